// Maintenance of the monthly partitions of `events` on PostgreSQL. The work is done by two SQL
// functions created by migration 1 (so operators can also call them from psql or pg_cron); these
// are their TypeScript entry points.
import { sql, type Kysely } from 'kysely';
import type { Database } from '../database.js';
import type { EventMonth, EventMonthCursor, EventMonthDrop } from '../erasure-types.js';

/** Months created ahead of the current (UTC) one. */
export const PARTITION_MONTHS_AHEAD = 3;

/** How often a running instance re-checks its partitions: well under a month, cheap when nothing is due. */
export const PARTITION_MAINTENANCE_INTERVAL_MS = 6 * 3_600_000;

/**
 * Creates the partitions of this month and the next `monthsAhead` months that are missing (moving
 * any of their rows out of the default partition). Idempotent; safe from several instances at once.
 * Returns how many partitions were created.
 */
export async function ensureEventPartitions(
  db: Kysely<Database>,
  monthsAhead = PARTITION_MONTHS_AHEAD,
): Promise<number> {
  const result = await sql<{
    created: number;
  }>`SELECT inlet_ensure_event_partitions(${monthsAhead}::integer) AS created`.execute(db);
  return Number(result.rows[0]?.created ?? 0);
}

/**
 * Retention: drops every monthly partition that ends on or before the start of `cutoff`'s UTC month,
 * deletes older rows of the default partition, and the idempotency keys of all of them. Returns the
 * dropped partitions. After this, a retry of a dropped event's external_id is stored as a new event.
 */
export async function dropEventPartitionsBefore(db: Kysely<Database>, cutoff: Date | string): Promise<string[]> {
  const at = typeof cutoff === 'string' ? cutoff : cutoff.toISOString();
  const result = await sql<{
    name: string;
  }>`SELECT name FROM inlet_drop_event_partitions_before(${at}::timestamptz) AS name`.execute(db);
  return result.rows.map((row) => row.name);
}

export interface EventPartition {
  name: string;
  /** `DEFAULT` or `FOR VALUES FROM (…) TO (…)`. */
  bounds: string;
}

/** The partitions of `events` with their bounds (for operators and tests). */
export async function listEventPartitions(db: Kysely<Database>): Promise<EventPartition[]> {
  const result = await sql<{ name: string; bounds: string }>`
    SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bounds
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'events'::regclass
     ORDER BY c.relname`.execute(db);
  return result.rows.map((row) => ({ name: row.name, bounds: row.bounds }));
}

// ---------------------------------------------------------------------------------------------------
// Retention by whole months (governance.md §4), per product. A month's partition holds every product's
// events while retention is per product, so retention-service.ts drops a month only when every product
// with rows in it allows it, in three steps that each hold little:
//   1. `productsInEventMonth`: which products have rows in the month (one index probe per product);
//   2. `deleteEventMonthKeys`: their idempotency keys (event_dedup is not partitioned), in small batches
//      that take no lock beyond the keys' rows: a retry of such an event meanwhile is stored as new,
//      which is what it would be after the drop anyway;
//   3. `dropEventMonth`: one short transaction with `lock_timeout` that counts the rows per product
//      (for the metric), re-checks the limits and drops the table.
// DROP TABLE of a partition takes ACCESS EXCLUSIVE on `events` (and on events_default): while it waits
// for a long reader (an export), every insert queues behind it. `lock_timeout` bounds that wait; on
// 55P03 the month is left to the batch deletes, which need no such lock. DETACH PARTITION CONCURRENTLY
// would not queue inserts, but PostgreSQL refuses it on a table with a default partition, and `events`
// has one (core migration 1); it also cannot run inside a transaction, so the count and the drop could
// not be one atomic step.

/** The monthly partitions of `events` whose month ends at or before `end`, oldest first. */
export async function eventMonthsEndingBy(db: Kysely<Database>, end: Date | string): Promise<EventMonth[]> {
  const at = typeof end === 'string' ? end : end.toISOString();
  const result = await sql<{ name: string; start: Date | string; end: Date | string }>`
    SELECT name, month AS start, month + interval '1 month' AS end
      FROM (SELECT c.relname::text AS name, (to_date(substr(c.relname, 9), 'YYYY_MM')::timestamp AT TIME ZONE 'UTC') AS month
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'events'::regclass
               AND c.relname ~ '^events_p[0-9]{4}_[0-9]{2}$') months
     WHERE month + interval '1 month' <= ${at}::timestamptz
     ORDER BY month`.execute(db);
  const iso = (v: Date | string) => (v instanceof Date ? v : new Date(v)).toISOString();
  return result.rows.map((row) => ({ name: row.name, start: iso(row.start), end: iso(row.end) }));
}

/**
 * The products with rows in a monthly partition: a skip scan of its (product_id, received_at) index
 * (events_by_time), one probe per product present, so a month of millions of rows costs a few probes.
 */
export async function productsInEventMonth(db: Kysely<Database>, name: string): Promise<string[]> {
  const table = sql.table(name);
  const result = await sql<{ product_id: string }>`
    WITH RECURSIVE present AS (
      (SELECT product_id FROM ${table} ORDER BY product_id LIMIT 1)
      UNION ALL
      SELECT (SELECT e.product_id FROM ${table} e WHERE e.product_id > present.product_id ORDER BY e.product_id LIMIT 1)
        FROM present WHERE present.product_id IS NOT NULL
    )
    SELECT product_id FROM present WHERE product_id IS NOT NULL`.execute(db);
  return result.rows.map((row) => row.product_id);
}

/** Before every (product_id, id) of a partition. */
const EVENT_MONTH_START: EventMonthCursor = { productId: '', id: '00000000-0000-0000-0000-000000000000' };

/**
 * Deletes the idempotency keys of the next `limit` events of the partition (in primary key order after
 * `after`; null: from the start) whose product is one of `productIds`. Returns the events looked at (fewer than `limit`: the
 * end) and the cursor to go on from.
 */
export async function deleteEventMonthKeys(
  db: Kysely<Database>,
  name: string,
  productIds: string[],
  after: EventMonthCursor | null,
  limit: number,
): Promise<{ events: number; keys: number; next: EventMonthCursor }> {
  const table = sql.table(name);
  const from = after ?? EVENT_MONTH_START;
  const result = await sql<{ events: number; keys: number; last_product: string | null; last_id: string | null }>`
    WITH batch AS (
      SELECT product_id, id, source, external_id FROM ${table}
       WHERE (product_id, id) > (${from.productId}, ${from.id}::uuid)
       ORDER BY product_id, id LIMIT ${limit}
    ), gone AS (
      DELETE FROM event_dedup k USING batch b
       WHERE b.external_id IS NOT NULL AND b.product_id = ANY(${productIds}::text[])
         AND k.product_id = b.product_id AND k.key_hash = inlet_event_dedup_key(b.source, b.external_id)
         AND k.event_id = b.id
      RETURNING 1
    ), last AS (
      SELECT product_id, id FROM batch ORDER BY product_id DESC, id DESC LIMIT 1
    )
    SELECT (SELECT count(*) FROM batch)::int AS events, (SELECT count(*) FROM gone)::int AS keys,
           (SELECT product_id FROM last) AS last_product, (SELECT id::text FROM last) AS last_id`.execute(db);
  const row = result.rows[0]!;
  return {
    events: Number(row.events),
    keys: Number(row.keys),
    next: row.last_product === null || row.last_id === null ? from : { productId: row.last_product, id: row.last_id },
  };
}

/**
 * Drops one monthly partition if every product with rows in it allows it: one transaction that takes
 * SHARE on the partition (nobody can add or delete its rows meanwhile; inserts into other months go on),
 * counts its rows per product, asks `allowed` (which reads the current limits in the same transaction),
 * and drops the table. Every lock is waited for at most `lockTimeoutMs`; a lock not granted rolls it all
 * back (`lock_timeout`). The serialisation with `inlet_ensure_event_partitions` is its advisory lock.
 */
export async function dropEventMonth(
  db: Kysely<Database>,
  month: EventMonth,
  lockTimeoutMs: number,
  allowed: (q: Kysely<Database>, counts: Record<string, number>) => Promise<boolean>,
): Promise<EventMonthDrop> {
  try {
    return await db.transaction().execute(async (trx) => {
      await sql.raw(`SET LOCAL lock_timeout = '${Math.max(1, Math.floor(lockTimeoutMs))}ms'`).execute(trx);
      await sql`SELECT pg_advisory_xact_lock(7243002)`.execute(trx);
      const exists = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'events'::regclass AND c.relname = ${month.name}`.execute(trx);
      if (Number(exists.rows[0]?.n ?? 0) === 0) return { dropped: false, reason: 'gone' } as const;
      await sql`LOCK TABLE ${sql.table(month.name)} IN SHARE MODE`.execute(trx);
      const rows = await sql<{ product_id: string; n: number | string }>`
        SELECT product_id, count(*) AS n FROM ${sql.table(month.name)} GROUP BY product_id`.execute(trx);
      const counts: Record<string, number> = {};
      for (const row of rows.rows) counts[row.product_id] = Number(row.n);
      if (!(await allowed(trx, counts))) throw new Refused(counts);
      await sql`DROP TABLE ${sql.table(month.name)}`.execute(trx);
      return { dropped: true, counts } as const;
    });
  } catch (error) {
    if (error instanceof Refused) return { dropped: false, reason: 'refused', counts: error.counts };
    const code = (error as { code?: string }).code;
    if (code === '55P03' || code === '40P01') return { dropped: false, reason: 'lock_timeout' };
    if (code === '42P01') return { dropped: false, reason: 'gone' };
    throw error;
  }
}

/** Thrown inside the drop's transaction to roll it back (and release its locks) when it may not drop. */
class Refused extends Error {
  constructor(readonly counts: Record<string, number>) {
    super('a product with rows in the month does not allow dropping it');
  }
}
