// Rejections are recorded (segment-compat "Bodies"): an SDK never reads a response body, so this list is
// the only place a team sees what it sent wrong. Bounded per product and hour (clarifications §20):
// past the cap a rejection is only counted (metric and a per-hour row). Writes are buffered and
// flushed within a second, off the request path; reads flush first.
import { uuidv7 } from '../domain/ids.js';
import { storableText } from '../domain/json-values.js';
import type { RejectionQuery, RejectionRecord, Storage } from '../storage/types.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';

export const MAX_RECORDED_ITEM_CHARS = 32 * 1024;
const FLUSH_MS = 1000;
/** Rows kept in memory while storage is unreachable (see `restore`). */
const MAX_PENDING = 10_000;
const RETENTION_SWEEP_MS = 3_600_000;

export interface RejectionEntry {
  index: number;
  messageId: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  /** The item as received (parsed JSON); recorded as its JSON text, which every backend can store. */
  item: unknown;
}

export interface RejectionOptions {
  maxPerHour: number;
  retentionDays: number;
  now?: () => number;
}

/** The item as text: JSON escapes NUL and lone surrogates, so recording cannot fail the way the item did (§13). */
function itemText(item: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(item) ?? 'null';
  } catch {
    text = String(item);
  }
  // A cut can split a surrogate pair, and String(item) can hold NUL: storableText mends both.
  return storableText(text.length > MAX_RECORDED_ITEM_CHARS ? text.slice(0, MAX_RECORDED_ITEM_CHARS) : text);
}

export function createRejectionService(storage: Storage, metrics: Metrics, options: RejectionOptions) {
  const clock = options.now ?? Date.now;
  const pending: RejectionRecord[] = [];
  const unrecorded = new Map<string, { productId: string; hour: string; count: number }>();
  const recordedThisHour = new Map<string, number>();
  let currentHour = '';
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;
  let lastSweep = 0;

  async function writePending(): Promise<void> {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const rows = pending.splice(0);
    const counts = [...unrecorded.values()];
    unrecorded.clear();
    try {
      if (rows.length > 0) await storage.rejections.insertMany(rows);
    } catch (error) {
      // Storage unreachable: keep the rows (and the counts) for the next flush instead of losing them.
      restore(rows, counts);
      throw error;
    }
    try {
      if (counts.length > 0) await storage.rejections.addUnrecorded(counts);
    } catch (error) {
      restore([], counts);
      throw error;
    }
    const now = clock();
    if (now - lastSweep >= RETENTION_SWEEP_MS) {
      lastSweep = now;
      await storage.rejections.deleteOlderThan(new Date(now - options.retentionDays * 86_400_000).toISOString());
    }
  }

  /**
   * Puts back what a failed flush took out, in front of what arrived meanwhile, and schedules a retry.
   * At most MAX_PENDING rows wait in memory: past that the oldest are only counted, like rejections past
   * the hourly cap, so an outage costs their text but never their count.
   */
  function restore(rows: RejectionRecord[], counts: Array<{ productId: string; hour: string; count: number }>): void {
    pending.unshift(...rows);
    for (const row of counts) countUnrecorded(row.productId, row.hour, row.count);
    if (pending.length > MAX_PENDING) {
      for (const row of pending.splice(0, pending.length - MAX_PENDING)) countUnrecorded(row.productId, row.receivedAt.slice(0, 13), 1);
    }
    timer ??= setTimeout(() => void flush().catch(() => {}), FLUSH_MS).unref();
  }

  function countUnrecorded(productId: string, hour: string, count: number): void {
    const key = `${productId}\u0000${hour}`;
    const row = unrecorded.get(key);
    if (row === undefined) unrecorded.set(key, { productId, hour, count });
    else row.count += count;
  }

  function flush(): Promise<void> {
    const run = (flushing ?? Promise.resolve()).then(writePending, writePending);
    flushing = run.catch(() => {});
    return run;
  }

  return {
    /** Records (or, past the hourly cap, only counts) the rejections and warnings of one request. */
    record(auth: AuthContext, route: string, entries: RejectionEntry[], receivedAt: string): void {
      if (entries.length === 0) return;
      const hour = receivedAt.slice(0, 13);
      if (hour !== currentHour) {
        currentHour = hour;
        recordedThisHour.clear();
      }
      for (const entry of entries) {
        const done = recordedThisHour.get(auth.productId) ?? 0;
        const recorded = done < options.maxPerHour;
        metrics.rejections.inc({ code: entry.code, severity: entry.severity, recorded: String(recorded) });
        if (!recorded) {
          countUnrecorded(auth.productId, hour, 1);
          continue;
        }
        recordedThisHour.set(auth.productId, done + 1);
        pending.push({
          id: uuidv7(),
          productId: auth.productId,
          receivedAt,
          keyId: auth.keyId,
          route: storableText(route),
          index: entry.index,
          messageId: entry.messageId === null ? null : storableText(entry.messageId),
          code: entry.code,
          detail: storableText(entry.detail),
          severity: entry.severity,
          item: itemText(entry.item),
        });
      }
      timer ??= setTimeout(() => void flush().catch(() => {}), FLUSH_MS).unref();
    },

    async list(productId: string, query: RejectionQuery): Promise<RejectionRecord[]> {
      await flush();
      return storage.rejections.list(productId, query);
    },

    flush,

    async close(): Promise<void> {
      await flush();
    },
  };
}

export type RejectionService = ReturnType<typeof createRejectionService>;
