// Rejections are recorded (segment-compat "Bodies"): an SDK never reads a response body, so this list is
// the only place a team sees what it sent wrong. Bounded per product and hour (clarifications §20):
// past the cap a rejection is only counted (metric and a per-hour row). Writes are buffered and
// flushed within a second, off the request path; reads flush first.
import { uuidv7 } from '../domain/ids.js';
import { MAX_PROPERTY_DEPTH, storableText } from '../domain/json-values.js';
import type { RejectionQuery, RejectionRecord, Storage } from '../storage/types.js';
import type { AuthContext } from './key-service.js';
import { createCappedRecorder } from './capped-recorder.js';
import type { Metrics } from './metrics.js';

export const MAX_RECORDED_ITEM_CHARS = 32 * 1024;

export interface RejectionEntry {
  index: number;
  messageId: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  /** The item as received (parsed JSON); recorded as its JSON text, which every backend can store. */
  item: unknown;
  /** The record's id (a UUIDv7: the list's order), when it was taken before an await (default: made here). */
  id?: string;
}

export interface RejectionOptions {
  maxPerHour: number;
  retentionDays: number;
  now?: () => number;
}

/**
 * JSON of a value that JSON.stringify refused (nested deeper than V8's stack allows: a batch element of 20,000
 * nested arrays, found by the fuzz suite), written to MAX_PROPERTY_DEPTH levels (the nesting any stored value may
 * have; deeper is replaced by a marker). Not String(item): an array's toString recurses just as deep and threw
 * the same RangeError, a 500 instead of a recorded rejection.
 */
function boundedJson(value: unknown, depth = 0): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (depth >= MAX_PROPERTY_DEPTH) return JSON.stringify(`… nested more than ${MAX_PROPERTY_DEPTH} levels deep`);
  if (Array.isArray(value)) return `[${value.map((inner) => boundedJson(inner, depth + 1)).join(',')}]`;
  return `{${Object.entries(value)
    .map(([key, inner]) => `${JSON.stringify(key)}:${boundedJson(inner, depth + 1)}`)
    .join(',')}}`;
}

/** The item as text: JSON escapes NUL and lone surrogates, so recording cannot fail the way the item did (§13). */
function itemText(item: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(item) ?? 'null';
  } catch {
    text = boundedJson(item);
  }
  // A cut can split a surrogate pair: storableText mends it.
  return storableText(text.length > MAX_RECORDED_ITEM_CHARS ? text.slice(0, MAX_RECORDED_ITEM_CHARS) : text);
}

/** Keys whose values name a person, in native and Segment items (identify's external_id is the person). */
const PERSON_KEYS = new Set([
  'userId',
  'anonymousId',
  'previousId',
  'subject_id',
  'from_external_id',
  'to_external_id',
  'user_id',
]);
const MAX_SUBJECT_IDS = 100;

/**
 * The ids an item names, recorded in an index beside the rejection so an erasure finds it without
 * scanning items (governance.md §3). Walks objects and arrays (a whole refused batch body) a few levels
 * deep; over-collecting is harmless (an erasure of such an id also deletes this record).
 */
export function subjectIdsOf(route: string, item: unknown): string[] {
  const found = new Set<string>();
  const walk = (value: unknown, depth: number): void => {
    if (found.size >= MAX_SUBJECT_IDS || depth > 4 || value === null || typeof value !== 'object') return;
    if (Array.isArray(value)) {
      for (const element of value.slice(0, 5000)) walk(element, depth + 1);
      return;
    }
    for (const [key, inner] of Object.entries(value)) {
      const named = PERSON_KEYS.has(key) || (key === 'external_id' && depth === 0 && route.includes('identify'));
      if (named && (typeof inner === 'string' || typeof inner === 'number') && String(inner) !== '')
        found.add(storableText(String(inner).slice(0, 1024)));
      else walk(inner, depth + 1);
    }
  };
  walk(item, 0);
  return [...found];
}

export function createRejectionService(storage: Storage, metrics: Metrics, options: RejectionOptions) {
  const recorder = createCappedRecorder<RejectionRecord>({
    maxPerHour: options.maxPerHour,
    retentionDays: options.retentionDays,
    ...(options.now === undefined ? {} : { now: options.now }),
    insert: (rows) => storage.rejections.insertMany(rows),
    addUnrecorded: (counts) => storage.rejections.addUnrecorded(counts),
    deleteOlderThan: (at) => storage.rejections.deleteOlderThan(at),
  });

  return {
    /** Records (or, past the hourly cap, only counts) the rejections and warnings of one request. */
    record(auth: AuthContext, route: string, entries: RejectionEntry[], receivedAt: string): void {
      for (const entry of entries) {
        const recorded = recorder.admit(auth.productId, receivedAt);
        metrics.rejections.inc({ code: entry.code, severity: entry.severity, recorded: String(recorded) });
        if (!recorded) continue;
        recorder.push({
          id: entry.id ?? uuidv7(),
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
          subjectIds: subjectIdsOf(route, entry.item),
        });
      }
    },

    async list(productId: string, query: RejectionQuery): Promise<RejectionRecord[]> {
      await recorder.flush();
      return storage.rejections.list(productId, query);
    },

    flush: recorder.flush,

    async close(): Promise<void> {
      await recorder.flush();
    },
  };
}

export type RejectionService = ReturnType<typeof createRejectionService>;
