// The delivery worker's thread (src/delivery.ts and services/destinations/worker.ts start it): "another
// instance that only delivers", and the composition root of that thread.
// It opens storage on a connection of its own (no migrations: the main thread ran them), builds the
// deliverers with the main thread's lease holder name, and runs them until the main thread says stop.
// Its delivery metrics go to the main thread by message: the reports of up to REPORT_EVERY_MS together, so
// that a worker that dies loses next to none. (Sent after each turn of its loop, they were one postMessage per
// webhook batch, ~3 % of the worker's busy time in a drain, and as many messages for the request loop.)
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import type { DeliverySettings } from './delivery.js';
import { openStorage } from './storage/connect.js';
import type { DeliveryMetrics } from './services/destinations/metrics.js';
import { createDestinationService } from './services/destinations/service.js';
import type { MetricReport, ToWorker, WorkerData } from './services/destinations/worker.js';
import { createMetrics } from './services/metrics.js';
import { createOutboundGuard } from './services/outbound-guard.js';
import { createTransformRuntime, destinationServiceOptions } from './transform-runtime.js';

/** PostgreSQL connections of the worker's pool: a read and a state write per destination at a time. */
const WORKER_POOL_SIZE = 4;

const port = parentPort!;
const {
  holder,
  settings: { config, postgresSchema },
} = workerData as WorkerData<DeliverySettings>;

// The main thread owns /metrics: reports are collected here and sent in batches.
const REPORT_EVERY_MS = 100;
let pending: MetricReport[] = [];
let flushTimer: NodeJS.Timeout | undefined;
function flush(): void {
  if (flushTimer !== undefined) clearTimeout(flushTimer);
  flushTimer = undefined;
  if (pending.length === 0) return;
  port.postMessage({ type: 'metrics', reports: pending });
  pending = [];
}
function push(report: MetricReport): void {
  pending.push(report);
  flushTimer ??= setTimeout(flush, REPORT_EVERY_MS);
}
const forward: DeliveryMetrics = {
  delivered: (destination, value) => push(['delivered', destination, value]),
  failed: (destination) => push(['failed', destination, 1]),
  latency: (destination, value) => push(['latency', destination, value]),
  attempt: (destination, value) => push(['attempt', destination, value]),
  loaded: (destination, load) => push(['loaded', destination, { ...load, warnings: [...load.warnings] }]),
  transformed: (destination, figures) => push(['transformed', destination, figures]),
};

// The thread's OS id (Linux), logged by the main thread: the bench reads this thread's CPU time from /proc.
let tid: number | undefined;
try {
  tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
} catch {
  // not Linux
}
// Delivery is background work: on a busy machine this thread yields the CPU to the threads that acknowledge
// events (INLET_DESTINATIONS_WORKER_NICE). On Linux the nice value is a thread's own, and threads started here
// later (a destination transformation's sandbox) inherit it; the main thread keeps its own.
let nice: { value: number } | { error: string } | undefined;
if (tid !== undefined && config.destinationsWorkerNice > 0) {
  try {
    setPriority(tid, config.destinationsWorkerNice);
    nice = { value: config.destinationsWorkerNice };
  } catch (error) {
    nice = { error: (error as Error).message };
  }
}

const storage = await openStorage(config.databaseUrl, {
  migrate: false,
  // SQLite: the worker's commits (cursor, delivery log) skip the fsync. Power loss may take back the last
  // cursor moves (messages are then delivered again: at least once holds) but never an event: those are
  // committed, and synced, by the main thread before the worker can read them. Its write lock is then held
  // for microseconds, so the main thread's writer rarely waits for it.
  sqliteSynchronous: 'normal',
  // The main connection's checkpointer thread (storage/sqlite/checkpointer.ts) checkpoints the WAL; this
  // connection starts none of its own and never checkpoints in its commits (below).
  sqliteCheckpointThread: false,
  // A statement that finds the write lock taken fails at once and the destination store's call is retried on
  // this thread's event loop (storage/busy-retry.ts), instead of sleeping in SQLite's busy handler while
  // webhook answers and NATS acknowledgements wait.
  sqliteBusyTimeoutMs: 0,
  postgresPoolSize: WORKER_POOL_SIZE,
  queryTimeoutMs: config.databaseQueryTimeoutMs,
  destinationLeaseMs: config.destinationLeaseMs,
  ...(postgresSchema === undefined ? {} : { postgresSchema }),
});
await storage.capabilities.prepareDeliveryWorker();
// Destinations' own transformations run here: the enrichment modules, and a sandbox thread of this worker's own.
const runtime = await createTransformRuntime(config);
const service = createDestinationService(storage.destinations, createMetrics({ defaultMetrics: false }), {
  // The SSRF guard applies here exactly as in the main thread: built from the same settings.
  ...destinationServiceOptions(
    config,
    storage,
    runtime,
    createOutboundGuard({ allow: config.outboundAllow, allowPrivate: config.outboundAllowPrivate }),
  ),
  holder,
  deliveryMetrics: forward,
});

let stopping: Promise<void> | undefined;
port.on('message', (message: ToWorker) => {
  if (message.type === 'poke') service.poke();
  else if (message.type === 'stop') {
    // Stops the loops (an in-flight send is abandoned and its cycle records only what was accepted),
    // releases the leases, closes NATS and storage, then lets the thread end.
    stopping ??= (async () => {
      await service.close();
      await runtime.functions?.close();
      flush();
      await storage.close();
      port.postMessage({ type: 'stopped' });
      port.close();
    })();
  }
});
service.start();
port.postMessage({ type: 'ready', ...(tid === undefined ? {} : { tid }), ...(nice === undefined ? {} : { nice }) });
