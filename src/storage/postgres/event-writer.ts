// The PostgreSQL ingest path: one statement per group of requests, then one query for the originals
// of the rows that were duplicates.
//
// `events` is partitioned by month (migrations/core.ts), so the idempotency key (product, source,
// external_id) lives in the unpartitioned `event_dedup` table. One statement claims the keys and
// stores the events of the rows that won them:
//   WITH claimed AS (INSERT INTO event_dedup … ON CONFLICT DO NOTHING RETURNING event_id)
//   INSERT INTO events SELECT … WHERE external_id IS NULL OR id IN (SELECT event_id FROM claimed)
// A statement is atomic, so a key is never claimed without its event (or the other way round). A
// concurrent writer of the same key waits on the key until the first commits, then sees a conflict.
//
// Hand-written SQL over unnest() of one array per column instead of Kysely's multi-row VALUES: the
// statement text and its 17 parameters are the same whatever the group size (no 65,535-parameter
// limit to chunk around, one plan shape), and a data-modifying CTE is clearer written out.
import { sql, type Kysely } from 'kysely';
import type { Database } from '../database.js';
import { eventFromRow } from '../event-reads.js';
import type { EventInsert, InsertOutcome } from '../types.js';

function dedupKey(row: { productId: string; source: string; externalId: string | null }): string {
  return `${row.productId}\u0000${row.source}\u0000${row.externalId ?? ''}`;
}

function compareKeys(a: EventInsert, b: EventInsert): number {
  // Code-unit order is enough: the point is that every writer claims keys in one global order.
  if (a.productId !== b.productId) return a.productId < b.productId ? -1 : 1;
  if (a.source !== b.source) return a.source < b.source ? -1 : 1;
  const x = a.externalId ?? '';
  const y = b.externalId ?? '';
  return x === y ? 0 : x < y ? -1 : 1;
}

/**
 * A jsonb[] column of the unnest from one JSON array text instead of a text[] parameter. node-postgres writes a
 * text[] as an array literal, escaping every `"` and `\` of every element with two regular expressions: for a
 * Segment row's ~800 bytes of `context` and `original` that escaping was 12 % of the server's samples in the
 * Segment bench on PostgreSQL. The array text is the elements joined, with JSON `null` for SQL NULL (neither
 * column ever holds a JSON null: `context` is an object or absent, `original` an object).
 */
function jsonbColumn(rows: EventInsert[], pick: (row: EventInsert) => string | null | undefined) {
  let text = '[';
  for (let i = 0; i < rows.length; i++) text += (i === 0 ? '' : ',') + (pick(rows[i]!) ?? 'null');
  text += ']';
  return sql`ARRAY(SELECT NULLIF(element, 'null'::jsonb) FROM jsonb_array_elements(${text}::jsonb) WITH ORDINALITY AS e(element, n) ORDER BY n)`;
}

export function postgresEventWriter(db: Kysely<Database>) {
  async function insert(rows: EventInsert[]): Promise<Set<string>> {
    // Keys are claimed in sorted order (WITH ORDINALITY … ORDER BY), so two groups that share keys
    // wait on each other in the same order and never deadlock.
    const sorted = [...rows].sort(compareKeys);
    const requestOrder = new Map(rows.map((row, index) => [row, index]));
    const column = <T>(pick: (row: EventInsert) => T): T[] => sorted.map(pick);
    const inserted = await sql<{ id: string }>`
      WITH input AS (
        SELECT * FROM unnest(
          ${column((r) => r.id)}::uuid[], ${column((r) => r.productId)}::text[], ${column((r) => r.source)}::text[],
          ${column((r) => r.externalId)}::text[], ${column((r) => r.eventType)}::text[], ${column((r) => r.action)}::text[],
          ${column((r) => r.canonicalName)}::text[], ${column((r) => r.nameFormat)}::text[], ${column((r) => r.subjectType)}::text[],
          ${column((r) => r.subjectId)}::text[], ${column((r) => r.occurredAt)}::timestamptz[], ${column((r) => r.receivedAt)}::timestamptz[],
          ${column((r) => r.propertiesJson)}::jsonb[], ${column((r) => r.apiKeyId)}::text[],
          ${jsonbColumn(sorted, (r) => r.contextJson)}, ${jsonbColumn(sorted, (r) => r.originalJson)},
          ${column((r) => requestOrder.get(r)!)}::int[]
        ) WITH ORDINALITY AS t(id, product_id, source, external_id, event_type, action, canonical_name, name_format,
                               subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original,
                               request_order, position)
      ), claimed AS (
        INSERT INTO event_dedup (product_id, source, external_id, event_id, received_at)
        SELECT product_id, source, external_id, id, received_at FROM input WHERE external_id IS NOT NULL ORDER BY position
        ON CONFLICT DO NOTHING
        RETURNING event_id
      )
      INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format,
                          subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original)
      SELECT id, product_id, source, external_id, event_type, action, canonical_name, name_format,
             subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original
        FROM input
       WHERE external_id IS NULL OR id IN (SELECT event_id FROM claimed)
       -- In request order: the columns tx and seq (the commit position) take their defaults row by row.
       ORDER BY request_order
      RETURNING id`.execute(db);
    return new Set(inserted.rows.map((r) => r.id));
  }

  async function originalsOf(rows: EventInsert[]): Promise<Map<string, InsertOutcome['event']>> {
    const originals = new Map<string, InsertOutcome['event']>();
    if (rows.length === 0) return originals;
    // Joining on received_at as well lets PostgreSQL prune to the one partition holding each original.
    const found = await db
      .selectFrom('events')
      .innerJoin(
        sql<{ product_id: string; event_id: string; received_at: Date }>`(
          SELECT d.product_id, d.event_id, d.received_at
            FROM event_dedup d
            JOIN unnest(${rows.map((r) => r.productId)}::text[], ${rows.map((r) => r.source)}::text[], ${rows.map((r) => r.externalId)}::text[])
                 AS k(product_id, source, external_id)
              ON d.product_id = k.product_id AND d.source = k.source AND d.external_id = k.external_id
        )`.as('dedup'),
        (join) =>
          join
            .onRef('events.product_id', '=', 'dedup.product_id')
            .onRef('events.id', '=', 'dedup.event_id')
            .onRef('events.received_at', '=', 'dedup.received_at'),
      )
      .selectAll('events')
      .execute();
    for (const stored of found) {
      originals.set(dedupKey({ productId: stored.product_id, source: stored.source, externalId: stored.external_id }), eventFromRow(stored));
    }
    return originals;
  }

  async function write(rows: EventInsert[]): Promise<InsertOutcome[]> {
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
    const insertedIds = await insert(unique);
    // Read after the insert committed: a key another writer held is committed by now (ours waited).
    const originals = await originalsOf(unique.filter((row) => !insertedIds.has(row.id)));
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
      return write(rows);
    },
  };
}
