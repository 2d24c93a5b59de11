// The destinations' metrics on /metrics: deliveries, failures, latencies and attempt durations (reported by
// the deliverers, here or from the delivery worker), worker restarts, and each destination's lag, counted at
// scrape time.
import { Counter, Gauge, Histogram } from 'prom-client';
import type { DestinationRecord, DestinationStore } from '../../storage/types.js';
import { scrapeRead, type Metrics } from '../metrics.js';

/** Lag is counted up to this many messages per log (a count over a huge backlog would be slow). */
export const LAG_CAP = 1_000_000;

/** What a deliverer reports; the main thread's prom-client metrics, or a forwarder in the delivery worker. */
export interface DeliveryMetrics {
  delivered(destination: string, messages: number): void;
  failed(destination: string): void;
  /** Seconds from the newest accepted message's receipt to its acceptance. */
  latency(destination: string, seconds: number): void;
  /** Seconds one attempt took. */
  attempt(destination: string, seconds: number): void;
  /** A warehouse load: rows, its duration, columns added, type widenings, warnings (a limit reached). */
  loaded(destination: string, load: WarehouseFigures): void;
  /** What the destination's own transformation did to a cycle's messages. */
  transformed(destination: string, figures: TransformFigures): void;
}

/** A cycle's messages through a destination's steps: [step, outcome, count], and CPU seconds per step kind. */
export interface TransformFigures {
  steps: Array<[number, string, number]>;
  cpu: Array<[string, number]>;
}

export interface WarehouseFigures {
  rows: number;
  seconds: number;
  columnsAdded: number;
  widenings: number;
  warnings: readonly unknown[];
}

/** The warehouse destinations' metrics (warehouses.md §3): rows loaded, load duration, columns added, widenings. */
function warehouseMetrics(metrics: Metrics): DeliveryMetrics['loaded'] {
  const registers = [metrics.registry];
  const labelNames = ['destination'];
  const rows = new Counter({
    name: 'inlet_warehouse_rows_loaded_total',
    help: 'Messages a warehouse destination loaded (events and identity messages), by destination',
    labelNames,
    registers,
  });
  const duration = new Histogram({
    name: 'inlet_warehouse_load_duration_seconds',
    help: 'Duration of one warehouse load (one transaction), by destination',
    labelNames,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60],
    registers,
  });
  const columns = new Counter({
    name: 'inlet_warehouse_columns_added_total',
    help: 'Columns a warehouse destination added to its tables, by destination',
    labelNames,
    registers,
  });
  const widenings = new Counter({
    name: 'inlet_warehouse_type_widenings_total',
    help: 'Warehouse columns whose type was widened (bigint → double precision → text), by destination',
    labelNames,
    registers,
  });
  const warnings = new Counter({
    name: 'inlet_warehouse_warnings_total',
    help: 'Loads that reached a table or column limit (the values stay in events), by destination',
    labelNames,
    registers,
  });
  return (destination, load) => {
    rows.inc({ destination }, load.rows);
    duration.observe({ destination }, load.seconds);
    if (load.columnsAdded > 0) columns.inc({ destination }, load.columnsAdded);
    if (load.widenings > 0) widenings.inc({ destination }, load.widenings);
    if (load.warnings.length > 0) warnings.inc({ destination }, load.warnings.length);
  };
}

/** The destinations' metrics, registered on `metrics`; the lag gauge reads `store` at each scrape. */
export function createDestinationMetrics(
  metrics: Metrics,
  store: Pick<DestinationStore, 'listAll' | 'lag'>,
): { delivery: DeliveryMetrics; workerRestarted(): void } {
  const delivered = new Counter({
    name: 'inlet_destination_messages_delivered_total',
    help: 'Messages a destination accepted, by destination',
    labelNames: ['destination'],
    registers: [metrics.registry],
  });
  const failed = new Counter({
    name: 'inlet_destination_failed_attempts_total',
    help: 'Delivery attempts that failed (non-2xx, timeout, connection error, NATS publish not acknowledged), by destination',
    labelNames: ['destination'],
    registers: [metrics.registry],
  });
  const latency = new Histogram({
    name: 'inlet_destination_delivery_latency_seconds',
    help: 'From an event being received to the destination accepting it (the newest message of each delivery), by destination',
    labelNames: ['destination'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600],
    registers: [metrics.registry],
  });
  const attemptDuration = new Histogram({
    name: 'inlet_destination_attempt_duration_seconds',
    help: 'Duration of one delivery attempt (HTTP request or NATS publishes), by destination',
    labelNames: ['destination'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 30],
    registers: [metrics.registry],
  });
  const warehouse = warehouseMetrics(metrics);
  const transformed = new Counter({
    name: 'inlet_destination_transformation_items_total',
    help: "Messages through each step of a destination's own transformation, by destination, step and outcome (changed, unchanged, dropped, error)",
    labelNames: ['destination', 'step', 'outcome'],
    registers: [metrics.registry],
  });
  const transformCpu = new Counter({
    name: 'inlet_destination_transformation_cpu_seconds_total',
    help: "Seconds spent in the steps of a destination's own transformation, by destination and step kind (a function step: the wait for the sandbox)",
    labelNames: ['destination', 'kind'],
    registers: [metrics.registry],
  });
  const workerRestarts = new Counter({
    name: 'inlet_destination_worker_restarts_total',
    help: 'Times the delivery worker thread died and was started again (services/destinations/worker.ts)',
    registers: [metrics.registry],
  });
  new Gauge({
    name: 'inlet_destination_lag_messages',
    help: `Messages after a destination's cursor (before its filter; counted up to ${LAG_CAP} per log), by destination and status`,
    labelNames: ['destination', 'status'],
    registers: [metrics.registry],
    async collect() {
      this.reset();
      // Without the database (an outage, a failover) the scrape goes on without these samples.
      const lags = await scrapeRead(async () => {
        const found: Array<{ d: DestinationRecord; lag: number }> = [];
        // One after the other, as before: a scrape takes one pool connection, not one per destination.
        for (const d of await store.listAll()) found.push({ d, lag: await store.lag(d.productId, d.cursor, LAG_CAP) });
        return found;
      });
      for (const { d, lag } of lags ?? []) this.set({ destination: d.id, status: d.status }, lag);
    },
  });
  return {
    delivery: {
      delivered: (destination, messages) => delivered.inc({ destination }, messages),
      failed: (destination) => failed.inc({ destination }),
      latency: (destination, seconds) => latency.observe({ destination }, seconds),
      attempt: (destination, seconds) => attemptDuration.observe({ destination }, seconds),
      loaded: warehouse,
      transformed: (destination, figures) => {
        for (const [step, outcome, count] of figures.steps) transformed.inc({ destination, step, outcome }, count);
        for (const [kind, seconds] of figures.cpu) transformCpu.inc({ destination, kind }, seconds);
      },
    },
    workerRestarted: () => workerRestarts.inc(),
  };
}
