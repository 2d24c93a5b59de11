// Fan-out: each poll pages a watched product's tail by position and hands every event to the product's
// streams whose filters match; a stream too slow to take a page is cut off first, so the server never
// buffers without bound.
//
// Rejections (`include=rejections`) are live only (clarifications §27): not resumable, so not part of the
// position. Each poll of a product that a stream with rejections watches reads the product's rejections
// recorded in the last REJECTION_WINDOW_MS (any instance's: storage is the channel here too) and sends
// those not sent yet. A rejection is recorded within a second of its request (rejection-service.ts), so
// the window leaves a wide margin; the rejections list is their durable record.
import type { EventFilter, EventRecord, Storage } from '../../storage/types.js';
import type { StreamRegistry } from './registry.js';
import type { ComparePositions, ProductTail, Subscriber } from './types.js';

/** How far back each poll looks for newly recorded rejections. */
const REJECTION_WINDOW_MS = 15_000;
/** At most this many rejections of one product are read per poll (a flood is sampled, not buffered). */
const REJECTION_PAGE = 500;

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

export const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Sends the event unless the stream has read it already (a catch-up and the tail overlap) or filters it out. */
export function deliver(compare: ComparePositions, subscriber: Subscriber, event: EventRecord): void {
  if (subscriber.closed) return;
  if (subscriber.seen !== null && compare(event.position!, subscriber.seen) <= 0) return;
  subscriber.seen = event.position!;
  if (!matchesFilter(subscriber.filter, event)) return;
  subscriber.sink.send(event);
}

export interface FanOut {
  events: Storage['events'];
  rejections: Storage['rejections'];
  registry: StreamRegistry;
  pageSize: number;
  clock: () => number;
}

/** Reads the product's tail to its end, page by page, fanning each page out to its streams. */
export async function pollProduct(fan: FanOut, productId: string, tail: ProductTail): Promise<void> {
  const compare: ComparePositions = (a, b) => fan.events.comparePositions(a, b);
  for (;;) {
    const page = await fan.events.page({
      productId,
      filter: {},
      order: 'asc',
      limit: fan.pageSize,
      ...(tail.cursor === null ? {} : { after: tail.cursor }),
    });
    if (page.events.length > 0) {
      for (const subscriber of tail.subscribers) if (subscriber.sink.lagging()) fan.registry.drop(subscriber, 'slow');
    }
    for (const event of page.events) {
      tail.cursor = event.position!;
      for (const subscriber of tail.subscribers) deliver(compare, subscriber, event);
    }
    if (page.next === null) return;
    // Let sockets drain and other requests run between pages: with SQLite a page read never waits for
    // I/O, so without this a backlog would be fanned out in one turn of the event loop.
    await yieldToIo();
  }
}

/** Sends the product's rejections recorded since the last poll to the streams that asked for them. */
export async function pollRejections(fan: FanOut, productId: string, tail: ProductTail): Promise<void> {
  const watchers = [...tail.subscribers].filter((s) => s.includeRejections && s.sink.sendRejection !== undefined);
  if (watchers.length === 0) return;
  const now = fan.clock();
  const from = Math.max(Math.min(...watchers.map((s) => s.openedAt)), now - REJECTION_WINDOW_MS);
  for (const [id, at] of tail.rejectionsSent) if (at < from) tail.rejectionsSent.delete(id);
  const recent = await fan.rejections.list(productId, {
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
