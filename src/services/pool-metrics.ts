// Gauges of the PostgreSQL connection pool, read at scrape time. A pool that is often exhausted
// (waiting > 0) is the first thing to look at when commit and request durations rise.
import { Gauge, type Registry } from 'prom-client';
import type { PoolStats, ReplicationStatus } from '../storage/types.js';
import { sharedScrapeRead } from './metrics.js';

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

/** pg_stat_replication.sync_state values, and `unknown` for a standby whose state this role may not see. */
const SYNC_STATES = ['sync', 'quorum', 'potential', 'async', 'unknown'] as const;

/**
 * Whether the primary this process writes to waits for a standby at each commit, read at scrape time (one
 * query). pg_auto_failover 2.0 can leave a primary without synchronous_standby_names while showing it healthy
 * (docs/scaling-out.md): this is where an operator sees it before a failover loses acknowledged events.
 */
export function registerReplicationMetrics(registry: Registry, status: () => Promise<ReplicationStatus>): void {
  // One query per scrape for both gauges. Labelled, so that a scrape without an answer (failed, or past 2 s) prints
  // no sample at all.
  const read = sharedScrapeRead(status);
  new Gauge({
    name: 'inlet_postgres_synchronous_commit',
    help: "1 when this process's commits wait for a standby (synchronous_standby_names set, synchronous_commit on, remote_write or remote_apply; both as labels); 0: a failover can lose acknowledged events",
    labelNames: ['synchronous_standby_names', 'synchronous_commit'],
    registers: [registry],
    async collect() {
      this.reset();
      const now = await read();
      if (now === undefined) return;
      const waits =
        now.synchronousStandbyNames.trim() !== '' &&
        ['on', 'remote_write', 'remote_apply'].includes(now.synchronousCommit);
      this.set(
        { synchronous_standby_names: now.synchronousStandbyNames, synchronous_commit: now.synchronousCommit },
        waits ? 1 : 0,
      );
    },
  });
  new Gauge({
    name: 'inlet_postgres_standbys',
    help: 'Standbys streaming from the PostgreSQL primary this process writes to, by pg_stat_replication.sync_state (unknown: the role may not see it, grant pg_monitor)',
    labelNames: ['sync_state'],
    registers: [registry],
    async collect() {
      this.reset();
      const now = await read();
      if (now === undefined) return;
      for (const state of SYNC_STATES)
        this.set({ sync_state: state }, now.standbys.filter((s) => (s.syncState ?? 'unknown') === state).length);
    },
  });
}
