// Background deletes that yield to ingest (governance.md §3–4: ingest p99 within 2× while they run): the batch
// size is tuned after each batch to take about `targetMs`, and the runner then rests `restRatio` times as long as
// the batch took. The figures are the storage's (`storage.capabilities.deletePacing`): each backend says how
// batches should be paced on its database, and why (storage/sqlite/backend.ts, storage/postgres/backend.ts).
import { performance } from 'node:perf_hooks';
import type { DeletePacing } from '../storage/types.js';

export type GentleBatchOptions = DeletePacing;

export interface GentleBatchHooks {
  /** Awaited before each batch, outside its timing (the store's `roomToWrite`). */
  before?: () => Promise<void>;
  /** Told each batch's duration in seconds (metrics). */
  onBatch?: (seconds: number) => void;
}

/** `options`: `storage.capabilities.deletePacing`, the pacing of the backend the deletes run on. */
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
