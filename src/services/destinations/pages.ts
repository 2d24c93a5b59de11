// One page read shared between a product's destinations (events-out §6). Each destination reads the
// product's messages after its own cursor; two destinations near the head of the log would read, and
// format, the same messages one after the other. This keeps, per product, the run of messages read last:
// a window [start cursor → m0, m1, … mk] that is exactly what the store holds after `start` (the store's
// never-skip rule: nothing can later appear before a message it returned). A read after a cursor inside
// the window is answered from it, and only what lies beyond its end is read from the store (and appended).
// A cursor outside every window reads from the store and starts a new window there. A product keeps
// WINDOWS_PER_PRODUCT windows (the least recently used is replaced), so two destinations that drifted apart
// (a fast NATS stream, a slower webhook) each keep theirs instead of replacing each other's at every read.
//
// Bounds: WINDOW_MESSAGES per window, and messages older than MAX_AGE_MS are not served (an erasure
// or retention sweep deletes events; a window entry must not outlive the few seconds a delivery cycle
// already holds its page). Only products with at least two destinations use a window (`shared`); a
// product with one reads straight from the store as before.
//
// The formatted message (its wire JSON) is kept on the message object, so it is built once for all
// destinations reading that object.
import type { DestinationCursor, DestinationStore, StoredMessage } from '../../storage/types.js';
import type { MessageFormatter, WireMessage } from './messages.js';

const WINDOW_MESSAGES = 2_000;
const MAX_AGE_MS = 1_000;
const WINDOWS_PER_PRODUCT = 2;

interface Window {
  /** The cursor after each message (after[i] follows messages[i]); `start` precedes messages[0]. */
  start: DestinationCursor;
  messages: StoredMessage[];
  after: DestinationCursor[];
  /** When messages[i] was read (ms); the window's first unexpired message is found from these. */
  readAt: number[];
  /** When a read last used it (ms). */
  usedAt: number;
}

const same = (a: DestinationCursor, b: DestinationCursor) => a.event === b.event && a.identity === b.identity;

/** Where `cursor` is in the window: 0 at its start, i + 1 after messages[i]; undefined when outside. Readers are
 *  mostly at the end (the newest messages), so that is tried first, then the rest from the end backwards. */
function find(
  w: { start: DestinationCursor; after: DestinationCursor[] },
  cursor: DestinationCursor,
): number | undefined {
  for (let i = w.after.length - 1; i >= 0; i--) if (same(w.after[i]!, cursor)) return i + 1;
  return same(w.start, cursor) ? 0 : undefined;
}

export function cursorAfter(cursor: DestinationCursor, message: StoredMessage): DestinationCursor {
  return message.kind === 'event'
    ? { event: message.position, identity: cursor.identity }
    : { event: cursor.event, identity: message.position };
}

export function createPageReader(
  store: DestinationStore,
  format: MessageFormatter,
  now: () => number = () => Date.now(),
) {
  const windows = new Map<string, Window[]>();
  let hits = 0;
  let misses = 0;

  /** A new window at `start`, in place of `replacing` or of the product's least recently used one. */
  function fresh(productId: string, start: DestinationCursor, at: number, replacing?: Window): Window {
    const w: Window = { start, messages: [], after: [], readAt: [], usedAt: at };
    const list = windows.get(productId) ?? [];
    const old =
      replacing ??
      (list.length < WINDOWS_PER_PRODUCT ? undefined : list.reduce((a, b) => (a.usedAt <= b.usedAt ? a : b)));
    windows.set(productId, [...list.filter((x) => x !== old), w]);
    return w;
  }

  /** Drops a window's expired messages from its front; returns the window, or a new empty one at its end. */
  function expire(productId: string, w: Window, at: number): Window {
    if (w.readAt.length === 0 || at - w.readAt[0]! <= MAX_AGE_MS) return w;
    let expired = 0;
    while (expired < w.readAt.length && at - w.readAt[expired]! > MAX_AGE_MS) expired++;
    if (expired === w.messages.length) return fresh(productId, w.after[w.after.length - 1]!, w.usedAt, w);
    trim(w, expired);
    return w;
  }

  const endOf = (w: Window) => (w.after.length === 0 ? w.start : w.after[w.after.length - 1]!);

  function append(w: Window, page: StoredMessage[], at: number): void {
    let cursor = endOf(w);
    for (const message of page) {
      cursor = cursorAfter(cursor, message);
      w.messages.push(message);
      w.after.push(cursor);
      w.readAt.push(at);
    }
    const excess = w.messages.length - WINDOW_MESSAGES;
    if (excess > 0) trim(w, excess);
  }

  /** Drops the first `n` messages of the window. */
  function trim(w: Window, n: number): void {
    w.start = w.after[n - 1]!;
    w.messages.splice(0, n);
    w.after.splice(0, n);
    w.readAt.splice(0, n);
  }

  return {
    /**
     * Up to `limit` messages of the product after `cursor`, in position order (as store.readMessages).
     * `shared`: the product has several destinations, so the window is used and kept.
     */
    async read(productId: string, cursor: DestinationCursor, limit: number, shared: boolean): Promise<StoredMessage[]> {
      if (!shared) {
        windows.delete(productId);
        return store.readMessages(productId, cursor, limit);
      }
      const at = now();
      let w: Window | undefined;
      let found: number | undefined;
      for (const candidate of windows.get(productId) ?? []) {
        const current = expire(productId, candidate, at);
        found = find(current, cursor);
        if (found !== undefined) {
          w = current;
          break;
        }
      }
      if (w === undefined || found === undefined) {
        misses++;
        const page = await store.readMessages(productId, cursor, limit);
        append(fresh(productId, cursor, at), page, at);
        return page;
      }
      w.usedAt = at;
      const cached = w.messages.slice(found, found + limit);
      if (cached.length > 0) hits++;
      if (cached.length === limit) return cached;
      // The rest from the store, after the window's end; appended unless another read moved that end meanwhile.
      const end = endOf(w);
      const more = await store.readMessages(productId, end, limit - cached.length);
      if ((windows.get(productId) ?? []).includes(w) && endOf(w) === end) append(w, more, at);
      return cached.concat(more);
    },

    /** The message's wire form, made once per message object (shared by the destinations reading it). */
    format(message: StoredMessage): WireMessage {
      // Kept on the message object itself: a WeakMap of every message read cost more GC than it saved.
      const m = message as StoredMessage & { wire?: WireMessage };
      return (m.wire ??= format(message));
    },

    forget(productId: string): void {
      windows.delete(productId);
    },

    /** Reads answered (partly) from a window, and reads that started a new one (tests, profiling). */
    stats(): { hits: number; misses: number; windows: number } {
      let n = 0;
      for (const list of windows.values()) n += list.length;
      return { hits, misses, windows: n };
    },
  };
}

export type PageReader = ReturnType<typeof createPageReader>;
