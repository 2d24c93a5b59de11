// What rejections (segment-compat "Bodies") and tracking-plan violations (governance.md §2) share: rows
// recorded off the request path, buffered and flushed within a second, at most `maxPerHour` per product
// and hour (clarifications §20: past it a row is only counted, in a per-hour row), swept after
// `retentionDays`. A flush that fails (storage unreachable) keeps its rows and counts for the next one
// instead of losing them; at most MAX_PENDING rows wait in memory, older ones past that are only counted.

const FLUSH_MS = 1000;
const RETENTION_SWEEP_MS = 3_600_000;
/** Rows kept in memory while storage is unreachable. */
export const MAX_PENDING = 10_000;

export interface HourCount {
  productId: string;
  /** `YYYY-MM-DDTHH` */
  hour: string;
  count: number;
}

export interface CappedRecorderOptions<Row extends { productId: string; receivedAt: string }> {
  maxPerHour: number;
  retentionDays: number;
  now?: () => number;
  insert(rows: Row[]): Promise<void>;
  addUnrecorded(counts: HourCount[]): Promise<void>;
  deleteOlderThan(at: string): Promise<unknown>;
}

export function createCappedRecorder<Row extends { productId: string; receivedAt: string }>(
  options: CappedRecorderOptions<Row>,
) {
  const clock = options.now ?? Date.now;
  const pending: Row[] = [];
  const unrecorded = new Map<string, HourCount>();
  const recordedThisHour = new Map<string, number>();
  let currentHour = '';
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;
  let lastSweep = 0;

  function countUnrecorded(productId: string, hour: string, count: number): void {
    const key = `${productId}\u0000${hour}`;
    const row = unrecorded.get(key);
    if (row === undefined) unrecorded.set(key, { productId, hour, count });
    else row.count += count;
  }

  function schedule(): void {
    timer ??= setTimeout(() => void flush().catch(() => {}), FLUSH_MS).unref();
  }

  /** Puts back what a failed flush took out, in front of what arrived meanwhile, and schedules a retry. */
  function restore(rows: Row[], counts: HourCount[]): void {
    pending.unshift(...rows);
    for (const row of counts) countUnrecorded(row.productId, row.hour, row.count);
    if (pending.length > MAX_PENDING) {
      for (const row of pending.splice(0, pending.length - MAX_PENDING))
        countUnrecorded(row.productId, row.receivedAt.slice(0, 13), 1);
    }
    schedule();
  }

  async function writePending(): Promise<void> {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const rows = pending.splice(0);
    const counts = [...unrecorded.values()];
    unrecorded.clear();
    try {
      if (rows.length > 0) await options.insert(rows);
    } catch (error) {
      restore(rows, counts);
      throw error;
    }
    try {
      if (counts.length > 0) await options.addUnrecorded(counts);
    } catch (error) {
      restore([], counts);
      throw error;
    }
    const now = clock();
    if (now - lastSweep >= RETENTION_SWEEP_MS) {
      lastSweep = now;
      await options.deleteOlderThan(new Date(now - options.retentionDays * 86_400_000).toISOString());
    }
  }

  function flush(): Promise<void> {
    const run = (flushing ?? Promise.resolve()).then(writePending, writePending);
    flushing = run.catch(() => {});
    return run;
  }

  return {
    /**
     * Whether one more row of the product may be recorded this hour; if not, it is counted for the
     * hour's summary row. Call once per row, then `push` the rows admitted.
     */
    admit(productId: string, receivedAt: string): boolean {
      const hour = receivedAt.slice(0, 13);
      if (hour !== currentHour) {
        currentHour = hour;
        recordedThisHour.clear();
      }
      const done = recordedThisHour.get(productId) ?? 0;
      if (done >= options.maxPerHour) {
        countUnrecorded(productId, hour, 1);
        schedule();
        return false;
      }
      recordedThisHour.set(productId, done + 1);
      return true;
    },
    push(row: Row): void {
      pending.push(row);
      schedule();
    },
    flush,
  };
}
