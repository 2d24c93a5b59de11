// The live stream (events-out §4): one tail reader per instance that pages each watched product by
// position and fans the events out to that product's open streams.
//
// - The tail polls storage every `pollMs`. Storage is the only channel, so events committed by another
//   instance (PostgreSQL) arrive the same way as our own, within a poll plus the time the oldest running
//   transaction keeps the read horizon back (event-reads.ts).
// - registry.ts keeps the streams and the tails, replay.ts catches a resuming stream up to the tail,
//   fan-out.ts reads each tail and hands its events (and, if asked, rejections) to the streams.
// - Streams write through a `StreamSink`; the HTTP transport is `http/sse.ts`.
import type { EventFilter, Storage } from '../../storage/types.js';
import { pollProduct, pollRejections, type FanOut } from './fan-out.js';
import { StreamRegistry } from './registry.js';
import { catchUpAndJoin } from './replay.js';
import type { EventStreamOptions, StreamOptions, StreamSink, Subscriber } from './types.js';

export type { EventStreamOptions, StreamOptions, StreamSink } from './types.js';
export { matchesFilter } from './fan-out.js';

export function createEventStreams(storage: Storage, options: EventStreamOptions) {
  const pageSize = options.pageSize ?? 200;
  const clock = options.now ?? Date.now;
  const registry = new StreamRegistry();
  const fan: FanOut = { events: storage.events, rejections: storage.rejections, registry, pageSize, clock };
  let timer: NodeJS.Timeout | undefined;
  let polling: Promise<void> | undefined;
  let stopped = false;

  async function poll(): Promise<void> {
    for (const [productId, tail] of registry.tails) {
      try {
        await pollProduct(fan, productId, tail);
        await pollRejections(fan, productId, tail);
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
        if (registry.tails.size > 0) schedule();
      });
    }, options.pollMs);
    timer.unref();
  }

  return {
    /** Streams open on this instance. */
    get openCount(): number {
      return registry.size;
    },
    get full(): boolean {
      return registry.size >= options.maxStreams;
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
      registry.add(subscriber);
      try {
        await catchUpAndJoin(storage.events, pageSize, registry, subscriber);
      } catch (error) {
        registry.drop(subscriber, 'error');
        throw error;
      }
      schedule();
      return () => registry.drop(subscriber, 'error');
    },
    /** Ends every stream (shutdown) and stops polling. */
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      registry.dropAll('shutdown');
      await polling;
    },
  };
}

export type EventStreams = ReturnType<typeof createEventStreams>;
