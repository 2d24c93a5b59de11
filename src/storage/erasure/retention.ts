// Retention of events (governance.md §4): each product's limit, the batch deletes of older events, the drop of
// whole monthly partitions where the database has them, and the named leases that keep background work to one
// instance at a time.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import { toIso, type Database } from '../database.js';
import type { StoreDialect } from '../store-dialect.js';
import type { EventMonth, EventMonthDrop } from '../types.js';
import type { EventDeletes, EventMonths } from './event-deletes.js';
import type { ErasureDb } from './tables.js';

const DAY_MS = 86_400_000;

export async function retentionProducts(db: ErasureDb): Promise<Array<{ productId: string; eventsDays: number }>> {
  const rows = await db
    .selectFrom('products')
    .select(['id', 'retention_events_days'])
    .where('retention_events_days', 'is not', null)
    .execute();
  return rows.map((r) => ({ productId: r.id, eventsDays: Number(r.retention_events_days) }));
}

export async function setRetention(db: ErasureDb, productId: string, eventsDays: number | null): Promise<void> {
  await db.updateTable('products').set({ retention_events_days: eventsDays }).where('id', '=', productId).execute();
}

/** Deletes at most `limit` events of the product received before `cutoff`; returns how many. */
export function deleteEventsBefore(
  deletes: EventDeletes,
  dialect: Pick<StoreDialect, 'eventTime'>,
  productId: string,
  cutoff: string,
  limit: number,
): Promise<number> {
  // The events_by_time index (product_id, received_at) finds them oldest first.
  return deletes.where(productId, sql`received_at < ${dialect.eventTime(cutoff)}`, limit);
}

/** The month operations, where the database has monthly partitions. */
export function monthsOf(deletes: EventDeletes): EventMonths {
  if (deletes.months === undefined) throw new Error('this database has no monthly partitions of events');
  return deletes.months;
}

/**
 * Drops the month's partition if every product with rows in it has a limit that covers the whole month at `now`
 * (read in the drop's transaction).
 */
export function dropEventMonth(
  months: EventMonths,
  month: EventMonth,
  now: number,
  lockTimeoutMs: number,
): Promise<EventMonthDrop> {
  return months.drop(month, lockTimeoutMs, async (q: Kysely<Database>, counts) => {
    const ids = Object.keys(counts);
    if (ids.length === 0) return true;
    const limits = await q
      .selectFrom('products')
      .select(['id', 'retention_events_days'])
      .where('id', 'in', ids)
      .execute();
    const end = Date.parse(month.end);
    const allowing = new Set(
      limits
        .filter((p) => p.retention_events_days !== null && now - Number(p.retention_events_days) * DAY_MS >= end)
        .map((p) => p.id),
    );
    return ids.every((id) => allowing.has(id));
  });
}

/** The receive time of the product's oldest event, or null. */
export async function oldestEvent(
  db: ErasureDb,
  dialect: Pick<StoreDialect, 'eventProduct'>,
  productId: string,
): Promise<string | null> {
  const row = await db
    .selectFrom('events')
    .select((eb) => eb.fn.min('received_at').as('oldest'))
    .where('product_id', '=', dialect.eventProduct(productId))
    .executeTakeFirst();
  const oldest = row?.oldest as Date | string | number | null | undefined;
  return oldest == null ? null : toIso(oldest);
}

/** A named lease over background work: true when `holder` has it for `leaseMs` from the database's `now`. */
export async function takeLease(
  db: ErasureDb,
  now: RawBuilder<number>,
  name: string,
  holder: string,
  leaseMs: number,
): Promise<boolean> {
  await db
    .insertInto('background_leases')
    .values({ name, holder: null, lease_until: 0 })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const result = await db
    .updateTable('background_leases')
    .set({ holder, lease_until: sql<number>`${now} + ${leaseMs}` })
    .where('name', '=', name)
    .where((eb) => eb.or([eb('holder', 'is', null), eb('holder', '=', holder), eb('lease_until', '<', now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function releaseLease(db: ErasureDb, name: string, holder: string): Promise<void> {
  await db
    .updateTable('background_leases')
    .set({ holder: null, lease_until: 0 })
    .where('name', '=', name)
    .where('holder', '=', holder)
    .execute();
}
