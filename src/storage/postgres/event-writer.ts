// The PostgreSQL ingest path: one multi-row INSERT … ON CONFLICT DO NOTHING per group of requests,
// then one query for the originals of the rows that were duplicates.
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';
import { eventFromRow } from '../core-stores.js';
import type { EventInsert, InsertOutcome } from '../types.js';

/** 14 parameters a row; PostgreSQL allows 65,535 parameters a statement. */
const ROWS_PER_STATEMENT = 2000;

function dedupKey(row: { productId: string; source: string; externalId: string | null }): string {
  return `${row.productId}\u0000${row.source}\u0000${row.externalId ?? ''}`;
}

function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function postgresEventWriter(db: Kysely<Database>) {
  async function insertChunk(executor: Kysely<Database>, rows: EventInsert[]): Promise<Set<string>> {
    const inserted = await executor
      .insertInto('events')
      .values(
        rows.map((row) => ({
          id: row.id,
          product_id: row.productId,
          source: row.source,
          external_id: row.externalId,
          event_type: row.eventType,
          action: row.action,
          canonical_name: row.canonicalName,
          name_format: row.nameFormat,
          subject_type: row.subjectType,
          subject_id: row.subjectId,
          occurred_at: row.occurredAt,
          received_at: row.receivedAt,
          properties: row.propertiesJson,
          api_key_id: row.apiKeyId,
        })),
      )
      .onConflict((oc) => oc.doNothing())
      .returning('id')
      .execute();
    return new Set(inserted.map((r) => r.id));
  }

  async function write(executor: Kysely<Database>, rows: EventInsert[]): Promise<InsertOutcome[]> {
    // Later rows with the same idempotency key as an earlier one are duplicates of it, decided here
    // so that the statement never holds two rows for one key.
    const firstByKey = new Map<string, EventInsert>();
    const unique: EventInsert[] = [];
    for (const row of rows) {
      if (row.externalId === null) {
        unique.push(row);
        continue;
      }
      const key = dedupKey(row);
      if (!firstByKey.has(key)) {
        firstByKey.set(key, row);
        unique.push(row);
      }
    }
    // Insert in one global order of idempotency keys: concurrent commits with overlapping keys then
    // wait on each other in the same order instead of deadlocking (each holds index entries the
    // other one needs when their orders differ). Outcomes are still returned in request order.
    unique.sort((a, b) => (a.externalId === null ? (b.externalId === null ? 0 : -1) : b.externalId === null ? 1 : compareKeys(dedupKey(a), dedupKey(b))));
    const insertedIds = new Set<string>();
    for (let i = 0; i < unique.length; i += ROWS_PER_STATEMENT) {
      for (const id of await insertChunk(executor, unique.slice(i, i + ROWS_PER_STATEMENT))) insertedIds.add(id);
    }
    const missing = unique.filter((row) => !insertedIds.has(row.id));
    const originals = new Map<string, InsertOutcome['event']>();
    if (missing.length > 0) {
      const found = await executor
        .selectFrom('events')
        .selectAll()
        .where((eb) =>
          eb(
            eb.refTuple('product_id', 'source', 'external_id'),
            'in',
            missing.map((row) => eb.tuple(row.productId, row.source, row.externalId as string)),
          ),
        )
        .execute();
      for (const stored of found) originals.set(dedupKey({ productId: stored.product_id, source: stored.source, externalId: stored.external_id }), eventFromRow(stored));
    }
    return rows.map((row): InsertOutcome => {
      if (insertedIds.has(row.id)) return { status: 'created', event: row };
      const first = firstByKey.get(dedupKey(row));
      if (first !== undefined && first !== row && insertedIds.has(first.id)) return { status: 'duplicate', event: first };
      const stored = originals.get(dedupKey(row));
      if (stored === undefined) throw new Error(`event ${row.id} was neither inserted nor found as a duplicate`);
      return { status: 'duplicate', event: stored };
    });
  }

  return {
    async insertMany(rows: EventInsert[]): Promise<InsertOutcome[]> {
      if (rows.length === 0) return [];
      if (rows.length <= ROWS_PER_STATEMENT) return write(db, rows);
      return db.transaction().execute((trx) => write(trx, rows));
    },
  };
}

