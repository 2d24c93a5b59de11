// Erasure's and retention's event deletes on PostgreSQL (erasure/event-deletes.ts). Deleted rows stay on disk
// as dead tuples until VACUUM, which `reclaim` runs on the touched tables after a job; retention drops whole
// monthly partitions where it can (postgres/event-partitions.ts).
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../database.js';
import type { EventDeletes } from '../erasure/event-deletes.js';
import { TOUCHED_TABLES } from '../erasure/tables.js';
import { deleteEventMonthKeys, dropEventMonth, eventMonthsEndingBy, productsInEventMonth } from './event-partitions.js';

async function deleteWhere(
  db: Kysely<Database>,
  productId: string,
  where: RawBuilder<unknown>,
  limit: number,
  order: RawBuilder<unknown> = sql``,
): Promise<number> {
  // The idempotency keys live in their own table on PostgreSQL (core migration): they go with their events.
  // The batch's ids are collected into an array first (an init plan, run once), then deleted by probes of
  // each partition's primary key (product_id, id, …): a join with the batch (DELETE … USING doomed) was
  // planned as a nested loop over all of the product's rows whenever the statistics were stale
  // (docs/design.md, "Erasure and retention").
  const result = await sql<{ n: number }>`WITH gone AS (
      DELETE FROM events
       WHERE product_id = ${productId}
         AND id = ANY (ARRAY(SELECT id FROM events WHERE product_id = ${productId} AND ${where} ${order} LIMIT ${limit}))
      RETURNING source, external_id
    ), keys AS (
      DELETE FROM event_dedup k USING gone g
       WHERE k.product_id = ${productId} AND k.key_hash = inlet_event_dedup_key(g.source, g.external_id)
    )
    SELECT count(*)::int AS n FROM gone`.execute(db);
  return Number(result.rows[0]?.n ?? 0);
}

/**
 * Through the events_by_subject index: one id at a time, in the index's own order (product_id, subject_type,
 * subject_id, tx, seq), so that the batch is the first `limit` entries of one range and the scan stops there.
 * Without the order, PostgreSQL chose a bitmap scan that read every entry of the person in each batch, so an
 * erasure's cost grew with the square of the person's events (docs/design.md, "Erasure and retention").
 * An id that yields fewer rows than asked has no more: the next id fills the rest of the batch, so a
 * batch smaller than `limit` still means that every id is done (what the caller stops on).
 */
async function deleteOfSubjects(
  db: Kysely<Database>,
  productId: string,
  externalIds: string[],
  limit: number,
): Promise<number> {
  let deleted = 0;
  for (const externalId of externalIds) {
    if (deleted >= limit) break;
    deleted += await deleteWhere(
      db,
      productId,
      sql`subject_type = 'user' AND subject_id = ${externalId}`,
      limit - deleted,
      sql`ORDER BY tx, seq`,
    );
  }
  return deleted;
}

/**
 * `maintenance`: a connection without the client-side query deadline (postgres/backend.ts), for VACUUM, which on a
 * large table outlasts it, and for retention's partition drop (the count of a whole month under lock_timeout).
 */
export function postgresEventDeletes(
  db: Kysely<Database>,
  maintenance: () => Kysely<Database> = () => db,
): EventDeletes {
  return {
    where: (productId, where, limit) => deleteWhere(db, productId, where, limit),
    ofSubjects: (productId, externalIds, limit) => deleteOfSubjects(db, productId, externalIds, limit),
    async reclaim(only) {
      const tables = only === 'identity_messages' ? ['identity_messages'] : TOUCHED_TABLES;
      for (const table of tables) await sql.raw(`VACUUM ${table}`).execute(maintenance());
    },
    async roomToWrite() {},
    months: {
      endingBy: (end) => eventMonthsEndingBy(db, end),
      products: (name) => productsInEventMonth(db, name),
      deleteKeys: (name, productIds, after, limit) => deleteEventMonthKeys(db, name, productIds, after, limit),
      drop: (month, lockTimeoutMs, allowed) => dropEventMonth(maintenance(), month, lockTimeoutMs, allowed),
    },
  };
}
