// Background deletes that yield to ingest (governance.md §3–4: ingest p99 within 2× while they run).
// On SQLite a delete holds the one connection ingest's commits also need, so ingest waits behind a
// batch for as long as it lasts: the batch size is tuned after each batch to take about `targetMs`,
// and the runner then rests as long as the batch took (at most half of the connection's time goes to
// the background work). 6 ms: measured on SQLite, 100,000 events of one person in a product of
// 1,000,000, 8 concurrent single-event senders, load ~2.7: ingest p99 27.1 ms during the job vs 16.6 ms
// without, job 14.5 s; with 25 ms and half the rest, p99 67.5 ms vs 11.9 ms (notes of issue 18).
// On PostgreSQL batches do not block inserts; the same pacing keeps the job's share of the server modest.
import { performance } from 'node:perf_hooks';

export interface GentleBatchOptions {
  initial: number;
  min: number;
  max: number;
  targetMs: number;
}

export const GENTLE_DEFAULTS: GentleBatchOptions = { initial: 200, min: 20, max: 2000, targetMs: 6 };

export interface GentleBatchHooks {
  /** Awaited before each batch, outside its timing (the store's `roomToWrite`). */
  before?: () => Promise<void>;
  /** Told each batch's duration in seconds (metrics). */
  onBatch?: (seconds: number) => void;
}

export function gentleBatches(options: GentleBatchOptions = GENTLE_DEFAULTS, hooks: GentleBatchHooks = {}) {
  let size = options.initial;
  return {
    /** Rows to ask for in the next batch. */
    get size(): number {
      return size;
    },
    /** Runs one batch, adjusts the size to its duration, then rests as long as it took. */
    async run<T>(batch: (size: number) => Promise<T>): Promise<T> {
      await hooks.before?.();
      const started = performance.now();
      const result = await batch(size);
      const took = performance.now() - started;
      hooks.onBatch?.(took / 1000);
      if (took > options.targetMs * 1.5) size = Math.max(options.min, Math.floor(size / 2));
      else if (took < options.targetMs / 2) size = Math.min(options.max, size * 2);
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, took)));
      return result;
    },
  };
}
