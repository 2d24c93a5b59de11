// The subscription registry: every open stream of this instance, and per watched product the tail its
// streams follow. A product's tail goes when its last stream does.
import type { CloseReason, ProductTail, Subscriber } from './types.js';

export class StreamRegistry {
  /** Per product: the tail the poll reads. */
  readonly tails = new Map<string, ProductTail>();
  private readonly all = new Set<Subscriber>();

  get size(): number {
    return this.all.size;
  }

  add(subscriber: Subscriber): void {
    this.all.add(subscriber);
  }

  /** Starts following a product from `cursor` unless its tail exists already. */
  ensureTail(productId: string, cursor: string | null): void {
    if (!this.tails.has(productId))
      this.tails.set(productId, { cursor, subscribers: new Set(), rejectionsSent: new Map() });
  }

  /** Closes the stream and forgets it (once). */
  drop(subscriber: Subscriber, reason: CloseReason): void {
    if (subscriber.closed) return;
    subscriber.closed = true;
    this.all.delete(subscriber);
    const tail = this.tails.get(subscriber.productId);
    tail?.subscribers.delete(subscriber);
    if (tail !== undefined && tail.subscribers.size === 0) this.tails.delete(subscriber.productId);
    subscriber.sink.close(reason);
  }

  dropAll(reason: CloseReason): void {
    for (const subscriber of [...this.all]) this.drop(subscriber, reason);
  }
}
