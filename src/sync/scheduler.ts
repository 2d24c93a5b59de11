// Syncs every connected product on an interval (contract §8): the trailing 3 days and today, the
// first run of a source backfilling 90 days (both decided by the sync service). Products are synced
// one after another, so one slow provider cannot starve the database pool; one product's failure is
// logged and recorded in its run, and never stops the others. Ticks never overlap.
import type { Storage } from '../storage/types.js';
import type { SyncLogger, SyncResult, TrafficSyncService } from './sync-service.js';

export interface TrafficScheduler {
  /** Starts the interval (no-op when the interval is 0); `logger` receives one line per product synced. */
  start(logger?: SyncLogger): void;
  /** Stops scheduling and waits for the sync in progress, if any. */
  stop(): Promise<void>;
  /** One pass over every connected product (what each tick does). */
  runOnce(): Promise<Array<{ productId: string; result?: SyncResult; error?: string }>>;
}

export function createTrafficScheduler(
  storage: Storage,
  sync: TrafficSyncService,
  options: { intervalMs: number; logger?: SyncLogger },
): TrafficScheduler {
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> | undefined;
  let stopping = false;
  let logger = options.logger;

  async function runOnce() {
    const outcomes: Array<{ productId: string; result?: SyncResult; error?: string }> = [];
    const sources = await storage.traffic.listSources();
    for (const source of sources) {
      if (stopping) break;
      try {
        const result = await sync.syncProduct(source.productId, { kind: 'schedule' });
        logger?.info({ productId: source.productId, provider: source.provider, ...result }, 'scheduled traffic sync');
        outcomes.push({ productId: source.productId, result });
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        logger?.warn(
          { productId: source.productId, provider: source.provider, reason: message },
          'scheduled traffic sync failed',
        );
        outcomes.push({ productId: source.productId, error: message });
      }
    }
    return outcomes;
  }

  function tick() {
    if (current !== undefined || stopping) return; // the previous pass is still running
    current = runOnce()
      .catch((error: unknown) => logger?.error({ err: error }, 'traffic scheduler pass failed'))
      .finally(() => {
        current = undefined;
      });
  }

  return {
    start(startLogger) {
      if (startLogger !== undefined) logger = startLogger;
      if (options.intervalMs <= 0 || timer !== undefined) return;
      stopping = false;
      timer = setInterval(tick, options.intervalMs);
      timer.unref();
      setImmediate(tick);
    },
    async stop() {
      stopping = true;
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      await current;
    },
    runOnce,
  };
}
