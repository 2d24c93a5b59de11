// Retention (governance.md §4): per product, events whose received_at is older than `events_days` are
// deleted in the background in small batches (one transaction each, with a pause between them so
// ingest's commits go first). One instance at a time does it: a named lease in `background_leases`,
// taken and renewed with a conditional UPDATE like the destinations' lease (a dead instance's lease
// expires and another takes over). Retention emits no destination messages.
import { randomBytes } from 'node:crypto';
import { Counter, Gauge } from 'prom-client';
import { AppError, validationError } from '../domain/errors.js';
import type { ProductRecord, Storage } from '../storage/types.js';
import type { Metrics } from './metrics.js';
import { gentleBatches } from './gentle-batches.js';

const LEASE_NAME = 'retention';
const LEASE_MS = 60_000;

export interface RetentionOptions {
  intervalMs: number;
  holder?: string;
  now?: () => number;
}

export interface RetentionPass {
  /** Events deleted per product in this pass. */
  deleted: Record<string, number>;
  /** False when another instance holds the lease (nothing was done). */
  ran: boolean;
}

export function createRetentionService(storage: Storage, metrics: Metrics, options: RetentionOptions) {
  const store = storage.erasure;
  const holder = options.holder ?? `retention-${randomBytes(6).toString('hex')}`;
  const clock = options.now ?? Date.now;
  const deletedTotal = new Counter({
    name: 'inlet_retention_deleted_events_total',
    help: 'Events deleted by retention (governance.md §4), by product',
    labelNames: ['product_id'],
    registers: [metrics.registry],
  });
  const oldestKept = new Gauge({
    name: 'inlet_retention_oldest_event_timestamp_seconds',
    help: 'Receive time (Unix seconds) of the oldest event kept, per product with a retention limit, after the last pass',
    labelNames: ['product_id'],
    registers: [metrics.registry],
  });
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /** One pass over every product with a limit; returns what it deleted. */
  async function runOnce(): Promise<RetentionPass> {
    if (!(await store.takeLease(LEASE_NAME, holder, clock(), LEASE_MS))) return { deleted: {}, ran: false };
    const deleted: Record<string, number> = {};
    {
      for (const { productId, eventsDays } of await store.retentionProducts()) {
        const cutoff = new Date(clock() - eventsDays * 86_400_000).toISOString();
        let total = 0;
        const batches = gentleBatches();
        let renewedAt = clock();
        for (;;) {
          if (stopped) break;
          const size = batches.size;
          const n = await batches.run((limit) => store.deleteEventsBefore(productId, cutoff, limit));
          total += n;
          if (n > 0) deletedTotal.inc({ product_id: productId }, n);
          if (n < size) break;
          // Renew the lease as we go: a long pass must not let another instance start one.
          if (clock() - renewedAt > LEASE_MS / 3) {
            if (!(await store.takeLease(LEASE_NAME, holder, clock(), LEASE_MS))) return { deleted, ran: true };
            renewedAt = clock();
          }
        }
        deleted[productId] = total;
        const oldest = await store.oldestEvent(productId);
        if (oldest === null) oldestKept.remove({ product_id: productId });
        else oldestKept.set({ product_id: productId }, Date.parse(oldest) / 1000);
      }
      // The lease is kept until it expires: the next pass (on any instance) comes after the interval anyway.
      return { deleted, ran: true };
    }
  }

  function schedule(delay: number): void {
    if (stopped || options.intervalMs === 0) return;
    timer = setTimeout(() => {
      running = runOnce()
        .catch(() => {})
        .finally(() => {
          running = undefined;
          schedule(options.intervalMs);
        });
    }, delay);
    timer.unref();
  }

  return {
    runOnce,

    /** Sets a product's limit (null: keep forever); answers the product. */
    async setEventsDays(productId: string, eventsDays: number | null): Promise<ProductRecord> {
      if (eventsDays !== null && (!Number.isInteger(eventsDays) || eventsDays < 1 || eventsDays > 36_500)) {
        throw validationError([{ pointer: '/retention/events_days', message: 'must be a whole number of days from 1 to 36500, or null' }]);
      }
      const product = await storage.products.get(productId);
      if (product === undefined) throw new AppError('not_found', `No product "${productId}".`);
      await store.setRetention(productId, eventsDays);
      return { ...product, retentionEventsDays: eventsDays };
    },

    start(): void {
      stopped = false;
      schedule(Math.min(options.intervalMs, 10_000));
    },

    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      await running;
      await store.releaseLease(LEASE_NAME, holder).catch(() => {});
    },
  };
}

export type RetentionService = ReturnType<typeof createRetentionService>;
