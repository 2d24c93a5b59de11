// Runs the deliverers off the request loop: a worker thread (node:worker_threads) with its own storage
// connection (src/delivery-worker.ts). Delivery is lease-driven (service.ts), so the
// worker is "another instance that only delivers"; it uses this process's lease holder name, so a worker
// restarted after a crash renews the leases its predecessor held instead of waiting for them to expire.
//
// - The thread starts with the first destination: until the database has one, this thread checks every
//   `checkMs` (and at once when an admin change here pokes), so an instance that never delivers does not
//   carry the thread's V8 isolate and storage connection (~35 MB of RSS, bench/runs/2026-11-destinations.md). Once started it
//   stays, as before.
// - Admin changes in the main thread (create, resume, replay …) poke the worker by message.
// - The worker's delivery metrics come back by message and are applied to this process's prom-client
//   metrics, so /metrics shows them as before (and they keep counting across worker restarts).
// - A worker that dies (an uncaught error, a crash) is logged and started again, after 1 s, then 2, 4 …
//   up to 30 s while it keeps dying; a worker that ran a minute starts the backoff afresh.
// - close() (SIGTERM → services.close()) asks the worker to stop: it finishes or abandons the cycle in
//   flight (an abandoned one never moves the cursor), releases its leases and closes its connections.
//   A worker that has not ended after STOP_TIMEOUT_MS is terminated (the leases then expire by themselves);
//   the limit is half of the default INLET_SHUTDOWN_TIMEOUT_MS, so the process still exits cleanly (with a
//   warning that names the cause: a handle the worker left open).
// The composition root decides whether delivery runs here (src/delivery.ts) and names the thread's entry
// (src/delivery-worker.ts, which builds storage and the deliverers from the settings it is given).
import { access } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { DeliveryMetrics, TransformFigures, WarehouseFigures } from './metrics.js';
import type { DestinationService } from './service.js';

/** [what, destination, value]: a delivery report from the worker (DeliveryMetrics, flattened). */
export type MetricReport =
  | ['delivered' | 'failed' | 'latency' | 'attempt', string, number]
  | ['loaded', string, WarehouseFigures]
  | ['transformed', string, TransformFigures];
export type ToWorker = { type: 'poke' } | { type: 'stop' };
export type FromWorker =
  | { type: 'ready'; tid?: number; nice?: { value: number } | { error: string } }
  | { type: 'stopped' }
  | { type: 'metrics'; reports: MetricReport[] };
/** What the thread is started with: the deliverers' lease holder name, and what its entry needs to build them. */
export interface WorkerData<Settings> {
  holder: string;
  settings: Settings;
}

export interface WorkerLog {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

const RESTART_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 16_000, 30_000];
/** A worker that ran this long before dying starts the restart backoff afresh. */
const STABLE_MS = 60_000;
const STOP_TIMEOUT_MS = 5_000;

/** Applies one batch of the worker's reports to this process's metrics. */
export function applyReports(metrics: DeliveryMetrics, reports: MetricReport[]): void {
  for (const report of reports) {
    if (report[0] === 'loaded') {
      metrics.loaded(report[1], report[2]);
      continue;
    }
    if (report[0] === 'transformed') {
      metrics.transformed(report[1], report[2]);
      continue;
    }
    const [what, destination, value] = report;
    if (what === 'delivered') metrics.delivered(destination, value);
    else if (what === 'failed') metrics.failed(destination);
    else if (what === 'latency') metrics.latency(destination, value);
    else metrics.attempt(destination, value);
  }
}

/**
 * libuv's thread pool (files, DNS lookups) is started by the first thread that uses it, and its threads take that
 * thread's nice value: the main thread starts it before the worker lowers its own priority
 * (INLET_DESTINATIONS_WORKER_NICE), so the pool keeps the process's.
 */
function startThreadPool(entry: URL): Promise<void> {
  return access(fileURLToPath(entry)).catch(() => {});
}

/** A thread running `entry`: compiled JavaScript, or under tsx (tests, `npm run dev`) the TypeScript source. */
function spawnWorker(entry: URL, data: WorkerData<unknown>): Worker {
  if (!entry.pathname.endsWith('.ts')) return new Worker(entry, { workerData: data, name: 'inlet-destinations' });
  // A worker thread does not inherit tsx's loader hooks (Node 20): it registers them itself first.
  const source = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(source, { eval: true, workerData: data, name: 'inlet-destinations' });
}

export interface DestinationWorker {
  /** Restarts so far (tests, stats). */
  readonly restarts: number;
  /** The worker thread now running, if any (tests: terminate it to simulate a crash). */
  readonly current: Worker | undefined;
}

/**
 * Runs `service`'s delivery in a worker thread started from `entry` with `settings`, restarted when it dies;
 * `service` forwards pokes to it and stops it on close().
 */
export function startDeliveryWorker<Settings>(
  service: DestinationService,
  entry: URL,
  settings: Settings,
  log: WorkerLog,
  options: { checkMs: number },
): DestinationWorker {
  const data: WorkerData<Settings> = { holder: service.holder, settings };
  let worker: Worker | undefined;
  let launched = false;
  let checkTimer: NodeJS.Timeout | undefined;
  let checking: Promise<void> | undefined;
  let waitingSaid = false;
  let failingSaid = false;
  /** A poke came while a check ran (its answer may predate the destination just created): check again at once. */
  let again = false;
  let startedAt = 0;
  let failures = 0;
  let restarts = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let stopping = false;

  /** Starts the thread once a destination exists; until then checks again every checkMs. */
  const check = (): Promise<void> => {
    if (checking !== undefined) {
      again = true;
      return checking;
    }
    return (checking = (async () => {
      clearTimeout(checkTimer);
      checkTimer = undefined;
      again = false;
      let found = false;
      try {
        found = await service.hasDestinations();
        if (found) await startThreadPool(entry);
        failingSaid = false;
      } catch (error) {
        // Said once per outage (the storage's own errors say the rest), not every checkMs.
        if (!failingSaid) log.warn({ err: error }, 'destinations: could not check for destinations; trying again');
        failingSaid = true;
      }
      checking = undefined;
      if (stopping || launched) return;
      if (found) launch();
      else if (again) void check();
      else {
        if (!waitingSaid) log.info({}, 'destinations: none yet; the delivery worker starts with the first one');
        waitingSaid = true;
        checkTimer = setTimeout(() => void check(), options.checkMs);
        checkTimer.unref();
      }
    })());
  };

  const launch = () => {
    launched = true;
    restartTimer = undefined;
    if (stopping) return;
    startedAt = Date.now();
    const w = spawnWorker(entry, data);
    worker = w;
    let lastError: Error | undefined;
    w.on('message', (message: FromWorker) => {
      if (message.type === 'metrics') applyReports(service.deliveryMetrics, message.reports);
      else if (message.type === 'ready') {
        const nice = message.nice !== undefined && 'value' in message.nice ? message.nice.value : undefined;
        log.info(
          { threadId: w.threadId, tid: message.tid, restarts, ...(nice === undefined ? {} : { nice }) },
          'destinations: delivery worker started',
        );
        if (message.nice !== undefined && 'error' in message.nice)
          log.warn(
            { err: message.nice.error },
            "destinations: could not lower the delivery worker's priority (INLET_DESTINATIONS_WORKER_NICE); it runs at the process's",
          );
      }
    });
    w.on('error', (error) => {
      lastError = error;
      log.error({ err: error, threadId: w.threadId }, 'destinations: delivery worker failed');
    });
    w.on('exit', (code) => {
      if (worker === w) worker = undefined;
      if (stopping) return;
      if (Date.now() - startedAt >= STABLE_MS) failures = 0;
      const delay = RESTART_DELAYS_MS[Math.min(failures, RESTART_DELAYS_MS.length - 1)]!;
      failures++;
      restarts++;
      service.workerRestarted();
      log.error(
        { code, err: lastError, restartInMs: delay, restarts },
        'destinations: delivery worker exited unexpectedly; restarting it',
      );
      restartTimer = setTimeout(launch, delay);
      restartTimer.unref();
    });
  };

  service.useRemote({
    poke() {
      if (worker !== undefined) worker.postMessage({ type: 'poke' } satisfies ToWorker);
      else if (!launched) void check();
    },
    async close() {
      stopping = true;
      clearTimeout(restartTimer);
      clearTimeout(checkTimer);
      await checking;
      const w = worker;
      if (w === undefined) return;
      const exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
      w.postMessage({ type: 'stop' } satisfies ToWorker);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), STOP_TIMEOUT_MS);
      });
      if ((await Promise.race([exited, late])) === 'late') {
        log.warn({ timeoutMs: STOP_TIMEOUT_MS }, 'destinations: delivery worker did not stop in time; terminating it');
        await w.terminate();
      }
      clearTimeout(timer);
    },
  });
  void check();
  return {
    get restarts() {
      return restarts;
    },
    get current() {
      return worker;
    },
  };
}
