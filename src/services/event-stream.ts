// The live stream (events-out §4): one tail reader per instance that pages each watched product by
// position and fans the events out to that product's open streams.
//
// - The tail polls storage every `pollMs`. Storage is the only channel, so events committed by another
//   instance (PostgreSQL) arrive the same way as our own, within a poll plus the time the oldest running
//   transaction keeps the read horizon back (event-reads.ts).
// - A stream resuming from a cursor first catches up on its own, paging with its filters up to the
//   current end, then joins the tail once it has read at least as far as the tail; every event at or
//   below what a stream has already read is skipped, so the hand-over neither repeats nor loses one.
// - Streams write through a `StreamSink`; a sink that cannot take more (a slow consumer past its bound)
//   is closed and removed, so the server never buffers without bound.
//
// Rejections (`include=rejections`) are live only (clarifications §27): not resumable, so not part of the
// position. Each poll of a product that a stream with rejections watches reads the product's rejections
// recorded in the last REJECTION_WINDOW_MS (any instance's: storage is the channel here too) and sends
// those not sent yet. A rejection is recorded within a second of its request (rejection-service.ts), so
// the window leaves a wide margin; the rejections list is their durable record.
import type { EventFilter, EventRecord, RejectionRecord, Storage } from '../storage/types.js';

/** How far back each poll looks for newly recorded rejections. */
const REJECTION_WINDOW_MS = 15_000;
/** At most this many rejections of one product are read per poll (a flood is sampled, not buffered). */
const REJECTION_PAGE = 500;

export interface StreamSink {
  /** Sends one event. */
  send(event: EventRecord): void;
  /** Sends one recorded rejection (only to streams opened with `includeRejections`). */
  sendRejection?(rejection: RejectionRecord): void;
  /**
   * Whether the consumer is too slow: more than its bound still unsent from earlier pages. Asked before
   * each page is fanned out, so a stream holds at most its bound plus one page (`pageSize` events).
   */
  lagging(): boolean;
  /** Resolves when the sink can take more; rejects or resolves false when it closed meanwhile. */
  ready(): Promise<boolean>;
  close(reason: 'shutdown' | 'slow' | 'error'): void;
}

export interface EventStreamOptions {
  pollMs: number;
  maxStreams: number;
  pageSize?: number;
  now?: () => number;
}

export interface StreamOptions {
  /** Also send the product's rejections as they are recorded (live only). */
  includeRejections?: boolean;
}

interface Subscriber {
  productId: string;
  filter: EventFilter;
  sink: StreamSink;
  /** Everything at or below this position has been read for this stream. */
  seen: string | null;
  closed: boolean;
  includeRejections: boolean;
  /** Rejections received before the stream opened are not sent (it starts at the current end). */
  openedAt: number;
}

interface ProductTail {
  cursor: string | null;
  subscribers: Set<Subscriber>;
  /** Rejection ids already sent, with when they were recorded (forgotten once out of the window). */
  rejectionsSent: Map<string, number>;
}

export function matchesFilter(filter: EventFilter, event: EventRecord): boolean {
  return (
    (filter.canonicalNames === undefined || filter.canonicalNames.includes(event.canonicalName)) &&
    (filter.eventType === undefined || filter.eventType === event.eventType) &&
    (filter.action === undefined || filter.action === event.action) &&
    (filter.source === undefined || filter.source === event.source) &&
    (filter.keyId === undefined || filter.keyId === event.apiKeyId) &&
    (filter.subjectType === undefined || filter.subjectType === event.subjectType) &&
    (filter.subjectIds === undefined || filter.subjectIds.includes(event.subjectId)) &&
    (filter.receivedFrom === undefined || event.receivedAt >= filter.receivedFrom) &&
    (filter.receivedTo === undefined || event.receivedAt < filter.receivedTo)
  );
}

const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

export function createEventStreams(storage: Storage, options: EventStreamOptions) {
  const pageSize = options.pageSize ?? 200;
  const clock = options.now ?? Date.now;
  const tails = new Map<string, ProductTail>();
  const all = new Set<Subscriber>();
  let timer: NodeJS.Timeout | undefined;
  let polling: Promise<void> | undefined;
  let stopped = false;
  const compare = (a: string, b: string) => storage.events.comparePositions(a, b);

  function newTail(cursor: string | null): ProductTail {
    return { cursor, subscribers: new Set(), rejectionsSent: new Map() };
  }

  function deliver(subscriber: Subscriber, event: EventRecord): void {
    if (subscriber.closed) return;
    if (subscriber.seen !== null && compare(event.position!, subscriber.seen) <= 0) return;
    subscriber.seen = event.position!;
    if (!matchesFilter(subscriber.filter, event)) return;
    subscriber.sink.send(event);
  }

  function drop(subscriber: Subscriber, reason: 'shutdown' | 'slow' | 'error'): void {
    if (subscriber.closed) return;
    subscriber.closed = true;
    all.delete(subscriber);
    const tail = tails.get(subscriber.productId);
    tail?.subscribers.delete(subscriber);
    if (tail !== undefined && tail.subscribers.size === 0) tails.delete(subscriber.productId);
    subscriber.sink.close(reason);
  }

  async function pollProduct(productId: string, tail: ProductTail): Promise<void> {
    for (;;) {
      const page = await storage.events.page({
        productId,
        filter: {},
        order: 'asc',
        limit: pageSize,
        ...(tail.cursor === null ? {} : { after: tail.cursor }),
      });
      if (page.events.length > 0) {
        for (const subscriber of tail.subscribers) if (subscriber.sink.lagging()) drop(subscriber, 'slow');
      }
      for (const event of page.events) {
        tail.cursor = event.position!;
        for (const subscriber of tail.subscribers) deliver(subscriber, event);
      }
      if (page.next === null) return;
      // Let sockets drain and other requests run between pages: with SQLite a page read never waits for
      // I/O, so without this a backlog would be fanned out in one turn of the event loop.
      await yieldToIo();
    }
  }

  async function pollRejections(productId: string, tail: ProductTail): Promise<void> {
    const watchers = [...tail.subscribers].filter((s) => s.includeRejections && s.sink.sendRejection !== undefined);
    if (watchers.length === 0) return;
    const now = clock();
    const from = Math.max(Math.min(...watchers.map((s) => s.openedAt)), now - REJECTION_WINDOW_MS);
    for (const [id, at] of tail.rejectionsSent) if (at < from) tail.rejectionsSent.delete(id);
    const recent = await storage.rejections.list(productId, {
      limit: REJECTION_PAGE,
      receivedFrom: new Date(from).toISOString(),
    });
    // Newest first from storage; sent oldest first.
    for (const rejection of recent.reverse()) {
      if (tail.rejectionsSent.has(rejection.id)) continue;
      tail.rejectionsSent.set(rejection.id, Date.parse(rejection.receivedAt));
      for (const subscriber of watchers) {
        if (subscriber.closed) continue;
        if (Date.parse(rejection.receivedAt) < subscriber.openedAt) continue;
        if (subscriber.filter.keyId !== undefined && rejection.keyId !== subscriber.filter.keyId) continue;
        subscriber.sink.sendRejection!(rejection);
      }
    }
  }

  async function poll(): Promise<void> {
    for (const [productId, tail] of tails) {
      try {
        await pollProduct(productId, tail);
        await pollRejections(productId, tail);
      } catch {
        // Storage unreachable for a moment: the next poll resumes from the same cursor.
      }
    }
  }

  function schedule(): void {
    if (stopped || timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      polling = poll().finally(() => {
        polling = undefined;
        if (tails.size > 0) schedule();
      });
    }, options.pollMs);
    timer.unref();
  }

  /** Reads the stream's own backlog (with its filters) until it has read at least as far as the tail, then joins it. */
  async function catchUpAndJoin(subscriber: Subscriber): Promise<void> {
    for (;;) {
      if (subscriber.closed) return;
      const tail = tails.get(subscriber.productId);
      if (
        tail !== undefined &&
        (tail.cursor === null || (subscriber.seen !== null && compare(subscriber.seen, tail.cursor) >= 0))
      ) {
        tail.subscribers.add(subscriber);
        return;
      }
      const end = await storage.events.endPosition(subscriber.productId);
      if (subscriber.seen === null && end === null) {
        // An empty product: the tail starts from the beginning.
        if (!tails.has(subscriber.productId)) tails.set(subscriber.productId, newTail(null));
        continue;
      }
      if (subscriber.seen === null) subscriber.seen = end;
      else if (end !== null && compare(subscriber.seen, end) < 0) {
        let after = subscriber.seen;
        for (;;) {
          const page = await storage.events.page({
            productId: subscriber.productId,
            filter: subscriber.filter,
            order: 'asc',
            after,
            upTo: end,
            limit: pageSize,
          });
          for (const event of page.events) deliver(subscriber, event);
          if (subscriber.closed) return;
          if (page.next === null) break;
          after = page.next;
          await yieldToIo();
          // Back-pressure: the backlog is read no faster than the consumer takes it.
          if (!(await subscriber.sink.ready())) return drop(subscriber, 'slow');
        }
        subscriber.seen = end;
      }
      if (!tails.has(subscriber.productId)) tails.set(subscriber.productId, newTail(subscriber.seen));
    }
  }

  return {
    /** Streams open on this instance. */
    get openCount(): number {
      return all.size;
    },
    get full(): boolean {
      return all.size >= options.maxStreams;
    },
    /**
     * Opens a stream of the product's events matching `filter`, after `after` (a position) or from the
     * current end. Returns a function that closes it. Throws if storage fails while catching up.
     */
    async open(
      productId: string,
      filter: EventFilter,
      after: string | undefined,
      sink: StreamSink,
      streamOptions: StreamOptions = {},
    ): Promise<() => void> {
      const subscriber: Subscriber = {
        productId,
        filter,
        sink,
        seen: after ?? null,
        closed: false,
        includeRejections: streamOptions.includeRejections === true,
        openedAt: clock(),
      };
      all.add(subscriber);
      try {
        await catchUpAndJoin(subscriber);
      } catch (error) {
        drop(subscriber, 'error');
        throw error;
      }
      schedule();
      return () => drop(subscriber, 'error');
    },
    /** Ends every stream (shutdown) and stops polling. */
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      for (const subscriber of [...all]) drop(subscriber, 'shutdown');
      await polling;
    },
  };
}

export type EventStreams = ReturnType<typeof createEventStreams>;
