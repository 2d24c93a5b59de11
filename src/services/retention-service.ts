// Retention (governance.md §4): per product, events whose received_at is older than `events_days` are
// deleted in the background in small batches (one transaction each, with a pause between them so
// ingest's commits go first). One instance at a time does it: a named lease in `background_leases`,
// taken and renewed with a conditional UPDATE like the destinations' lease (a dead instance's lease
// expires and another takes over). Retention emits no destination messages.
//
// On PostgreSQL `events` is partitioned by month of received_at (core migration 1), and a pass first
// drops whole months: a month's partition holds every product's events, so it goes only when every
// product with rows in it has a limit that covers the whole month (products without a limit keep
// everything; a product present in the month is found by a probe of the partition's index). Its
// idempotency keys go first in small batches, then one short transaction counts the rows per product
// (for the metric), re-checks the limits and drops the table, waiting at most `dropLockTimeoutMs` for
// the ACCESS EXCLUSIVE lock the drop needs: a drop queued behind a long reader would queue every insert
// behind itself. A drop that cannot have its lock in time is left for the next pass, and the batch
// deletes below (which need no such lock) trim the month meanwhile. Why not DETACH … CONCURRENTLY:
// postgres/event-partitions.ts.
import { randomBytes } from 'node:crypto';
import { Counter, Gauge } from 'prom-client';
import { AppError, validationError } from '../domain/errors.js';
import type { EventMonthCursor, EventMonthDrop, ProductRecord, Storage } from '../storage/types.js';
import type { Metrics } from './metrics.js';
import { gentleBatches } from './gentle-batches.js';

const LEASE_NAME = 'retention';
const LEASE_MS = 60_000;
const DAY_MS = 86_400_000;
/** Inserts wait behind a pending partition drop for at most this long (see the header). */
export const DROP_LOCK_TIMEOUT_MS = 250;

export interface RetentionOptions {
  intervalMs: number;
  holder?: string;
  now?: () => number;
  /** PostgreSQL: how long a month's drop waits for each lock before it gives up (default 250 ms). */
  dropLockTimeoutMs?: number;
}

export interface RetentionPass {
  /** Events deleted per product in this pass. */
  deleted: Record<string, number>;
  /** False when another instance holds the lease (nothing was done). */
  ran: boolean;
  /** PostgreSQL: the monthly partitions dropped in this pass. */
  dropped: string[];
  /** PostgreSQL: months past every present product's limit that were not dropped, and why. */
  kept: Array<{ name: string; reason: Exclude<EventMonthDrop, { dropped: true }>['reason'] }>;
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
  const drops = new Counter({
    name: 'inlet_retention_partition_drops_total',
    help: 'PostgreSQL: monthly partitions of events past retention, by outcome (dropped; lock_timeout: left to batch deletes because a lock was not granted in time; refused; gone)',
    labelNames: ['outcome'],
    registers: [metrics.registry],
  });
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /** One pass over every product with a limit; returns what it deleted. */
  async function runOnce(): Promise<RetentionPass> {
    if (!(await store.takeLease(LEASE_NAME, holder, LEASE_MS)))
      return { deleted: {}, ran: false, dropped: [], kept: [] };
    const pass: RetentionPass = { deleted: {}, ran: true, dropped: [], kept: [] };
    let renewedAt = clock();
    // Renew the lease as we go: a long pass must not let another instance start one.
    const renew = async (): Promise<boolean> => {
      if (clock() - renewedAt <= LEASE_MS / 3) return true;
      if (!(await store.takeLease(LEASE_NAME, holder, LEASE_MS))) return false;
      renewedAt = clock();
      return true;
    };
    const count = (productId: string, n: number) => {
      pass.deleted[productId] = (pass.deleted[productId] ?? 0) + n;
      if (n > 0) deletedTotal.inc({ product_id: productId }, n);
    };
    const limits = await store.retentionProducts();
    const now = clock();
    const cutoffs = new Map(limits.map(({ productId, eventsDays }) => [productId, now - eventsDays * DAY_MS]));

    // Whole months first (PostgreSQL; none on SQLite).
    if (cutoffs.size > 0) {
      const latest = Math.max(...cutoffs.values());
      for (const month of await store.eventMonthsEndingBy(new Date(latest).toISOString())) {
        if (stopped) return pass;
        const end = Date.parse(month.end);
        const present = await store.productsInEventMonth(month.name);
        if (!present.every((productId) => (cutoffs.get(productId) ?? -Infinity) >= end)) {
          // A product without a limit (or with a longer one) has rows in it: the batch deletes trim it.
          pass.kept.push({ name: month.name, reason: 'refused' });
          drops.inc({ outcome: 'refused' });
          continue;
        }
        const batches = gentleBatches(storage.capabilities.deletePacing);
        let after: EventMonthCursor | null = null;
        for (;;) {
          if (stopped) return pass;
          const size = batches.size;
          const batch = await batches.run((limit) => store.deleteEventMonthKeys(month.name, present, after, limit));
          after = batch.next;
          if (batch.events < size) break;
          if (!(await renew())) return pass;
        }
        const outcome = await store.dropEventMonth(month, now, options.dropLockTimeoutMs ?? DROP_LOCK_TIMEOUT_MS);
        drops.inc({ outcome: outcome.dropped ? 'dropped' : outcome.reason });
        if (outcome.dropped) {
          pass.dropped.push(month.name);
          for (const [productId, n] of Object.entries(outcome.counts)) count(productId, n);
        } else {
          pass.kept.push({ name: month.name, reason: outcome.reason });
          // A long reader holds `events`: the next months' drops would each wait for it too.
          if (outcome.reason === 'lock_timeout') break;
        }
        if (!(await renew())) return pass;
      }
    }

    // Then batch deletes, per product: everything on SQLite; on PostgreSQL the boundary month, months
    // that other products keep, the default partition.
    for (const { productId } of limits) {
      const cutoff = new Date(cutoffs.get(productId)!).toISOString();
      const batches = gentleBatches(storage.capabilities.deletePacing, { before: () => store.roomToWrite() });
      pass.deleted[productId] ??= 0;
      for (;;) {
        if (stopped) break;
        const size = batches.size;
        const n = await batches.run((limit) => store.deleteEventsBefore(productId, cutoff, limit));
        count(productId, n);
        if (n < size) break;
        if (!(await renew())) return pass;
      }
      const oldest = await store.oldestEvent(productId);
      if (oldest === null) oldestKept.remove({ product_id: productId });
      else oldestKept.set({ product_id: productId }, Date.parse(oldest) / 1000);
    }
    // The lease is kept until it expires: the next pass (on any instance) comes after the interval anyway.
    return pass;
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
        throw validationError([
          { pointer: '/retention/events_days', message: 'must be a whole number of days from 1 to 36500, or null' },
        ]);
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
