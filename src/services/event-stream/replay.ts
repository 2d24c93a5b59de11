// Replay from a position: a stream resuming from a cursor first catches up on its own, paging with its
// filters up to the current end, then joins the tail once it has read at least as far as the tail; every
// event at or below what a stream has already read is skipped, so the hand-over neither repeats nor loses one.
import type { Storage } from '../../storage/types.js';
import { deliver, yieldToIo } from './fan-out.js';
import type { StreamRegistry } from './registry.js';
import type { ComparePositions, Subscriber } from './types.js';

/** Reads the stream's backlog from `seen` to `end` with its filters, as fast as the consumer takes it. */
async function replay(
  events: Storage['events'],
  pageSize: number,
  registry: StreamRegistry,
  subscriber: Subscriber,
  end: string,
): Promise<boolean> {
  const compare: ComparePositions = (a, b) => events.comparePositions(a, b);
  let after = subscriber.seen!;
  for (;;) {
    const page = await events.page({
      productId: subscriber.productId,
      filter: subscriber.filter,
      order: 'asc',
      after,
      upTo: end,
      limit: pageSize,
    });
    for (const event of page.events) deliver(compare, subscriber, event);
    if (subscriber.closed) return false;
    if (page.next === null) return true;
    after = page.next;
    await yieldToIo();
    // Back-pressure: the backlog is read no faster than the consumer takes it.
    if (!(await subscriber.sink.ready())) {
      registry.drop(subscriber, 'slow');
      return false;
    }
  }
}

/** Reads the stream's own backlog (with its filters) until it has read at least as far as the tail, then joins it. */
export async function catchUpAndJoin(
  events: Storage['events'],
  pageSize: number,
  registry: StreamRegistry,
  subscriber: Subscriber,
): Promise<void> {
  for (;;) {
    if (subscriber.closed) return;
    const tail = registry.tails.get(subscriber.productId);
    if (
      tail !== undefined &&
      (tail.cursor === null || (subscriber.seen !== null && events.comparePositions(subscriber.seen, tail.cursor) >= 0))
    ) {
      tail.subscribers.add(subscriber);
      return;
    }
    const end = await events.endPosition(subscriber.productId);
    if (subscriber.seen === null && end === null) {
      // An empty product: the tail starts from the beginning.
      registry.ensureTail(subscriber.productId, null);
      continue;
    }
    if (subscriber.seen === null) subscriber.seen = end;
    else if (end !== null && events.comparePositions(subscriber.seen, end) < 0) {
      if (!(await replay(events, pageSize, registry, subscriber, end))) return;
      subscriber.seen = end;
    }
    registry.ensureTail(subscriber.productId, subscriber.seen);
  }
}
