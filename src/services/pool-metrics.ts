// Gauges of the PostgreSQL connection pool, read at scrape time. A pool that is often exhausted
// (waiting > 0) is the first thing to look at when commit and request durations rise.
import { Gauge, type Registry } from 'prom-client';
import type { PoolStats } from '../storage/types.js';

export function registerPoolMetrics(registry: Registry, stats: () => PoolStats): void {
  new Gauge({
    name: 'inlet_db_pool_connections',
    help: 'PostgreSQL connections of this process: max (INLET_PG_POOL_SIZE), open, idle',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const now = stats();
      this.set({ state: 'max' }, now.max);
      this.set({ state: 'open' }, now.open);
      this.set({ state: 'idle' }, now.idle);
    },
  });
  new Gauge({
    name: 'inlet_db_pool_waiting',
    help: 'Queries of this process waiting for a free PostgreSQL connection',
    registers: [registry],
    collect() {
      this.set(stats().waiting);
    },
  });
}
