// Background deletes that yield to ingest (governance.md §3–4: ingest p99 within 2× while they run).
// On SQLite a delete holds the one connection ingest's commits also need, so ingest waits behind a
// batch for as long as it lasts: the batch size is tuned after each batch to take about `targetMs`,
// and the runner then rests `restRatio` times as long as the batch took (a quarter of the connection's
// time at most goes to the background work). 4 ms and 3×, measured at 10 M events with 100,000 of one
// person (`npm run bench:erasure -- --events 10000000 --person 100000`, 8 single-event senders, load
// 1.4–2.1, one run after the other on the same copied database): ingest p99 during the job 1.72× and
// 1.50× of without, job 49.1 s and 44.3 s; 6 ms and 1× (before) 2.33×, 26.1 s; 6 ms and 2× 2.06×, 35.2 s;
// 4 ms and 2× 2.00×, 34.0 s; 3 ms and 3× 1.69×, 51.1 s. (At 1 M events, 6 ms and 1×: p99 27.1 vs 16.6 ms.)
// On PostgreSQL a delete does not block inserts (row locks, MVCC), but each batch statement has a fixed cost
// that SQLite's 4 ms target leaves no room for: planning over the event partitions, a round trip, a commit.
// Under SQLite's pacing every batch on PostgreSQL took 4-8 ms whatever its size, so the size sank to its
// minimum of 20 rows (test/retention.test.ts: 212 of 299 batches at 20 rows). POSTGRES_GENTLE lets batches
// grow to 20 ms and rests three times as long as each took, as on SQLite (a quarter of one connection's
// time). `npm run bench:erasure -- --database postgres://postgres@127.0.0.1:5432/postgres` (1 M events,
// 100,000 of the person, with the ordered subject scan of erasure-store.ts), 2026-11-27: job 34.0 s, ingest
// p99 12 ms during against 7 ms without (1.71×); with 25 ms batches and rest 1×: 16.9 s, 14 ms against 6 ms (2.33×).
import { performance } from 'node:perf_hooks';
import type { Dialect } from '../storage/types.js';

export interface GentleBatchOptions {
  initial: number;
  min: number;
  max: number;
  targetMs: number;
  /** The rest after a batch, as a multiple of the batch's duration. */
  restRatio: number;
}

export const GENTLE_DEFAULTS: GentleBatchOptions = { initial: 200, min: 20, max: 2000, targetMs: 4, restRatio: 3 };
export const POSTGRES_GENTLE: GentleBatchOptions = { initial: 500, min: 100, max: 5000, targetMs: 20, restRatio: 3 };

/** The pacing for background deletes on `dialect`. */
export function gentleOptions(dialect: Dialect): GentleBatchOptions {
  return dialect === 'postgres' ? POSTGRES_GENTLE : GENTLE_DEFAULTS;
}

export interface GentleBatchHooks {
  /** Awaited before each batch, outside its timing (the store's `roomToWrite`). */
  before?: () => Promise<void>;
  /** Told each batch's duration in seconds (metrics). */
  onBatch?: (seconds: number) => void;
}

/** `options`: `gentleOptions(storage.dialect)`, the pacing of the backend the deletes run on. */
export function gentleBatches(options: GentleBatchOptions, hooks: GentleBatchHooks = {}) {
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
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, took * options.restRatio)));
      return result;
    },
  };
}
