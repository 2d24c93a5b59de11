// The PostgreSQL ingest path: one statement per group of requests, then one query for the originals
// of the rows that were duplicates.
//
// `events` is partitioned by month (migrations/core.ts), so the idempotency key (product, source,
// external_id) lives in the unpartitioned `event_dedup` table. One statement claims the keys and
// stores the events of the rows that won them:
//   WITH claimed AS (INSERT INTO event_dedup SELECT … FROM unnest(<keys>) ON CONFLICT DO NOTHING RETURNING event_id)
//   INSERT INTO events SELECT … FROM unnest(<rows>) WHERE external_id IS NULL OR id IN (SELECT event_id FROM claimed)
// A statement is atomic, so a key is never claimed without its event (or the other way round). A
// concurrent writer of the same key waits on the key until the first commits, then sees a conflict.
//
// Hand-written SQL over unnest() of one array per column instead of Kysely's multi-row VALUES: the
// statement text and its parameters are the same whatever the group size (no 65,535-parameter
// limit to chunk around, one plan shape), and a data-modifying CTE is clearer written out.
//
// The keys are sent as arrays of their own (five narrow columns, sorted) rather than read from a CTE over
// all the rows: a CTE referenced twice is materialised, copying every row with its properties once more
// inside the server (bench/runs/2026-11-postgresql.md, "Scaling on PostgreSQL: where the CPU goes (h16)").
//
// `event_dedup` holds a digest of (source, external_id), not their text (migration 851): an original found
// through it is matched to its row by its own key (`originals`), so a digest collision is never answered as a
// duplicate; the row then finds no original and its commit fails.
//
// The events' columns and their arrays come from the column table (event-columns.ts), in its order.
//
// Every array parameter is sent as one text the writer builds itself (arrayLiteral, jsonColumn): node-postgres
// escapes every element of a JS array with two regular expressions, 7 % of the instance's CPU in the
// batch bench on PostgreSQL; the json columns travel as one JSON array text, which needs no escaping at all.
//
// `name_format` is stored as its number (migration 857; `nameFormatCodeSql`): the array carries the text, the
// statement converts it, and the row mappers give the text back (`nameFormatText`).
//
// The statement's text is the same at every call, so it runs as a named prepared statement on each connection
// (the `inlet:prepare` mark, postgres/pool.ts): parsed and planned once instead of at every commit.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import { nameFormatCodeSql, type Database } from '../database.js';
import { EVENT_COLUMN_LIST, EVENT_COLUMNS, eventFromRow } from '../event-columns.js';
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

const NEEDS_ESCAPE = /["\\]/;

/**
 * A PostgreSQL array literal (`{"a","b",NULL}`) of the text values `pick` takes from `items`, for a `$n::text[]`
 * (or uuid[], timestamptz[]) parameter. Every element is quoted, so only `"` and `\` need a backslash; most values
 * (ids, names, timestamps) have neither and are copied as they are.
 */
export function arrayLiteral<T>(items: readonly T[], pick: (item: T) => string | null): string {
  let text = '{';
  for (let i = 0; i < items.length; i++) {
    const value = pick(items[i]!);
    if (i > 0) text += ',';
    if (value === null) text += 'NULL';
    else if (NEEDS_ESCAPE.test(value)) text += `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
    else text += `"${value}"`;
  }
  return `${text}}`;
}

/**
 * A json[] column of the unnest from one JSON array text: JSON texts joined need no escaping (see above), and
 * the server splits the array into its elements' texts as they were sent (`json_array_elements`; the columns
 * are `json`, migration 805, so nothing is converted). A json text is bounded only by the 1 GB of any text
 * parameter. `nullable`: the text `null` stands for SQL NULL (neither column that uses it ever holds a JSON
 * null: `context` is an object or absent, `original` an object); `json` has no equality operator, hence
 * json_typeof, which reads only the element's first token.
 */
function jsonColumn(rows: EventInsert[], pick: (row: EventInsert) => string | null, nullable: boolean) {
  let text = '[';
  for (let i = 0; i < rows.length; i++) text += (i === 0 ? '' : ',') + (pick(rows[i]!) ?? 'null');
  text += ']';
  return nullable
    ? sql`ARRAY(SELECT CASE WHEN json_typeof(element) = 'null' THEN NULL ELSE element END FROM json_array_elements(${text}::json) WITH ORDINALITY AS e(element, n) ORDER BY n)`
    : sql`ARRAY(SELECT element FROM json_array_elements(${text}::json) WITH ORDINALITY AS e(element, n) ORDER BY n)`;
}

/** Per column of the table, its unnest array of a group of rows: made once, called once per column and group. */
const UNNEST_ARRAYS: ReadonlyArray<(rows: EventInsert[]) => RawBuilder<unknown>> = EVENT_COLUMNS.map((column) => {
  if (column.type === 'json') return (rows) => jsonColumn(rows, column.value, column.nullable);
  const cast = sql.raw(`::${column.type}[]`);
  return (rows) => sql`${arrayLiteral(rows, column.value)}${cast}`;
});

function unnestArrays(rows: EventInsert[]) {
  const arrays: Array<RawBuilder<unknown>> = [];
  for (const array of UNNEST_ARRAYS) arrays.push(array(rows));
  return sql.join(arrays);
}

const COLUMNS = sql.raw(EVENT_COLUMN_LIST);
/** The insert's select list over the unnest's columns: each as it is, the name format as its number. */
const STORED = sql.raw(
  EVENT_COLUMNS.map((column) =>
    column.name === 'name_format' ? `${nameFormatCodeSql('t.name_format')} AS name_format` : `t.${column.name}`,
  ).join(', '),
);

export function postgresEventWriter(db: Kysely<Database>) {
  async function insert(rows: EventInsert[]): Promise<Set<string>> {
    // Keys are claimed in sorted order (the key arrays are sorted, and unnest … ORDER BY n keeps it), so two
    // groups that share keys wait on each other in the same order and never deadlock.
    const keyed = rows.filter((row) => row.externalId !== null).sort(compareKeys);
    const keys = (pick: (row: EventInsert) => string | null) => arrayLiteral(keyed, pick);
    const inserted = await sql<{ id: string }>`/* inlet:prepare event_insert */
      WITH claimed AS (
        INSERT INTO event_dedup (product_id, key_hash, event_id, received_at)
        SELECT product_id, inlet_event_dedup_key(source, external_id), event_id, received_at
          FROM unnest(${keys((r) => r.productId)}::text[], ${keys((r) => r.source)}::text[], ${keys((r) => r.externalId)}::text[],
                      ${keys((r) => r.id)}::uuid[], ${keys((r) => r.receivedAt)}::timestamptz[])
               WITH ORDINALITY AS k(product_id, source, external_id, event_id, received_at, n)
         ORDER BY n
        ON CONFLICT DO NOTHING
        RETURNING event_id
      )
      INSERT INTO events (${COLUMNS})
      SELECT ${STORED}
        FROM unnest(${unnestArrays(rows)}) WITH ORDINALITY AS t(${COLUMNS}, n)
       WHERE external_id IS NULL OR id IN (SELECT event_id FROM claimed)
       -- In request order: the columns tx and seq (the commit position) take their defaults row by row.
       ORDER BY n
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
              ON d.product_id = k.product_id AND d.key_hash = inlet_event_dedup_key(k.source, k.external_id)
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
      originals.set(
        dedupKey({ productId: stored.product_id, source: stored.source, externalId: stored.external_id }),
        eventFromRow(stored),
      );
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
      if (first !== undefined && first !== row && insertedIds.has(first.id))
        return { status: 'duplicate', event: first };
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
