// The commit position (migrations/event-positions.ts) in SQL: the one dialect-specific part of the event reads
// (event-reads.ts) and of the destinations' reads, which follow the same position. SQLite: the rowid `position`,
// in commit order. PostgreSQL: `(tx, seq)`, read below a read horizon.
import { sql, type AliasedRawBuilder, type Expression, type Kysely, type RawBuilder, type SqlBool } from 'kysely';
import { uuidBytes, type Database, type EventsTable } from './database.js';
import {
  POSTGRES_EVENT_SELECTIONS,
  SQLITE_EVENT_SELECTIONS,
  SQLITE_ACTION_TEXT,
  SQLITE_CODED,
  SQLITE_EVENT_TYPE_TEXT,
  SQLITE_KEY_NUMBER,
  SQLITE_NAME_NUMBER,
  SQLITE_PRODUCT_NUMBER,
} from './event-columns.js';
import type { Dialect } from './types.js';

export type Op = '<' | '>' | '<=' | '>=';

export interface PositionSql {
  /** The select-list expression yielding the position as text. */
  select: RawBuilder<string>;
  /** ORDER BY columns. */
  orderColumns: string[];
  compare(op: Op, position: string): Expression<SqlBool>;
  /**
   * PostgreSQL: the read horizon, fetched before the read (its own statement). Rows with a `tx` below it
   * are final. SQLite: undefined (every committed row is final: rowid order is commit order).
   */
  horizon: ((db: Kysely<Database>) => Promise<string>) | undefined;
  visible(horizon: string): Expression<SqlBool>;
  valid(position: string): boolean;
  order(a: string, b: string): number;
  /** An ISO time as the parameter to compare with a time of `events` (SQLite stores milliseconds: migration 853). */
  time(iso: string): string | number;
  /**
   * The product's event with this id. SQLite stores the id as its 16 bytes (migration 853) and finds it through
   * `events_by_id (id)`; `+product_id` keeps the planner off the product's index, which would walk all its rows.
   */
  byId(productId: string, id: string): Expression<SqlBool>;
  /**
   * The value to compare `product_id` of `events` with: SQLite stores the product's number (migration 854), found
   * by a subquery that SQLite evaluates once, before it searches an index by it.
   */
  product(productId: string): Expression<string>;
  /** The same for `api_key_id` (SQLite stores the key's number: migration 854). */
  key(keyId: string): Expression<string>;
  /**
   * `canonical_name` of `events` is one of these names. SQLite stores the name's number (migration 855), each found
   * by a subquery that SQLite evaluates once; one name is compared with `=`, which SQLite searches
   * `events_by_name (product_id, canonical_name)` by, in position order, as it did the name's text.
   */
  named(names: string[]): Expression<SqlBool>;
  /** The value to compare `source` or `subject_type` of `events` with (SQLite stores a known one's code: 856). */
  code(column: 'source' | 'subject_type', text: string): Expression<string>;
  /** `event_type` or `action` of `events` as text, for a filter (SQLite: NULL in the row where it is the name's). */
  nameColumn(column: 'event_type' | 'action'): RawBuilder<string>;
  /** The select list of an event's columns (Kysely's): on SQLite with the product as its text id, on PostgreSQL with
   *  the times as milliseconds since 1970 (event-columns.ts, `postgresSelection`). */
  columns: ReadonlyArray<keyof EventsTable | AliasedRawBuilder<string, string>>;
}

function compareBigInts(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The PostgreSQL read horizon: the oldest transaction that was running when this statement's snapshot
 * was taken *and* holds a lock on this schema's `events` (an event writer), else the snapshot's xmax.
 *
 * Why not simply pg_snapshot_xmin: xids are cluster-wide, so xmin waits for every writing transaction
 * of every database and schema on the server (measured here: other schemas' tests held it back long
 * enough to hide a just-acknowledged event from the list).
 *
 * Why it cannot skip: let T be an event writer with xid x < horizon. x < xmax, so T had its xid when the
 * snapshot was taken. Writers lock `events` before they get an xid (their first write is the event
 * insert; a transaction that writes elsewhere first must LOCK TABLE events IN ROW EXCLUSIVE MODE first),
 * and hold the lock to the end. pg_locks is read after the snapshot; had T still been running then, x
 * would be in the set and the horizon ≤ x. So T ended before this statement finished, and the next
 * statement (the read, with a newer snapshot) sees its rows if it committed.
 */
const HORIZON_QUERY = sql<{ horizon: string }>`
  WITH snapshot AS (SELECT pg_current_snapshot() AS s),
  writers AS (
    SELECT own.transactionid::text::bigint AS xid32
      FROM pg_locks rel
      JOIN pg_locks own ON own.virtualtransaction = rel.virtualtransaction
                       AND own.locktype = 'transactionid' AND own.mode = 'ExclusiveLock' AND own.granted
     WHERE rel.locktype = 'relation' AND rel.relation = 'events'::regclass AND rel.granted
  )
  SELECT COALESCE(
           (SELECT min(x) FROM snapshot, pg_snapshot_xip(snapshot.s) AS x
             WHERE (x::text::numeric % 4294967296)::bigint IN (SELECT xid32 FROM writers)),
           (SELECT pg_snapshot_xmax(s) FROM snapshot)
         )::text AS horizon`;

/**
 * PostgreSQL: runs a paged read (the first `limit` rows after a cursor in position order) in a transaction with
 * `enable_sort = off`. The position, name and subject indexes give those rows in order, and a Merge Append of the
 * partitions' index scans stops at the limit. But rows past the last ANALYZE's statistics (the newest: a live
 * stream, an export or a destination near the head) are estimated at a handful, and the planner then fetched every
 * row between the cursor and the horizon (a bitmap scan) to sort out the first `limit`: O(rows behind) per page, so a
 * backlog drained quadratically (docs/design.md, "Reads past the statistics"). Every such read has a plan without a
 * sort, so the setting only removes the bad one. Each statement
 * still takes its own snapshot (READ COMMITTED), which the read horizon needs.
 */
export function inPositionOrder<DB, T>(db: Kysely<DB>, work: (trx: Kysely<DB>) => Promise<T>): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`SET LOCAL enable_sort = off`.execute(trx);
    return work(trx);
  });
}

const SQLITE_POSITION = /^[1-9][0-9]{0,17}$/;
const POSTGRES_POSITION = /^([0-9]{1,20})\.([0-9]{1,19})$/;

/** SQLite: the lookup of a product's or key's number (event-columns.ts) with its text id as the parameter. */
function sqliteNumber(lookup: string, id: string): RawBuilder<string> {
  const [before, after] = lookup.split('?') as [string, string];
  return sql<string>`${sql.raw(before)}${id}${sql.raw(after)}`;
}

const sqliteProduct = (productId: string) => sqliteNumber(SQLITE_PRODUCT_NUMBER, productId);

export function positionSql(dialect: Dialect): PositionSql {
  if (dialect === 'sqlite') {
    return {
      select: sql<string>`position`,
      orderColumns: ['position'],
      compare: (op, position) => sql<SqlBool>`position ${sql.raw(op)} ${Number(position)}`,
      horizon: undefined,
      visible: () => sql<SqlBool>`true`,
      valid: (position) => SQLITE_POSITION.test(position) && Number.isSafeInteger(Number(position)),
      order: (a, b) => Number(a) - Number(b),
      time: (iso) => Date.parse(iso),
      byId: (productId, id) => sql<SqlBool>`+product_id = ${sqliteProduct(productId)} AND id = ${uuidBytes(id)}`,
      product: sqliteProduct,
      key: (keyId) => sqliteNumber(SQLITE_KEY_NUMBER, keyId),
      named: (names) => {
        const numbers = names.map((name) => sqliteNumber(SQLITE_NAME_NUMBER, name));
        return numbers.length === 1
          ? sql<SqlBool>`canonical_name = ${numbers[0]}`
          : sql<SqlBool>`canonical_name IN (${sql.join(numbers)})`;
      },
      code: (column, text) => sql<string>`${SQLITE_CODED[column]!.code(text)}`,
      nameColumn: (column) => sql.raw<string>(column === 'event_type' ? SQLITE_EVENT_TYPE_TEXT : SQLITE_ACTION_TEXT),
      columns: SQLITE_EVENT_SELECTIONS,
    };
  }
  return {
    select: sql<string>`tx::text || '.' || seq::text`,
    orderColumns: ['tx', 'seq'],
    compare: (op, position) => {
      const [, tx, seq] = POSTGRES_POSITION.exec(position)!;
      return sql<SqlBool>`(tx, seq) ${sql.raw(op)} (${tx}::xid8, ${seq}::bigint)`;
    },
    horizon: async (db) => (await HORIZON_QUERY.execute(db)).rows[0]!.horizon,
    visible: (horizon) => sql<SqlBool>`tx < ${horizon}::xid8`,
    valid: (position) => {
      const match = POSTGRES_POSITION.exec(position);
      return match !== null && BigInt(match[1]!) < 2n ** 64n && BigInt(match[2]!) < 2n ** 63n;
    },
    order: (a, b) => {
      const [txA, seqA] = a.split('.') as [string, string];
      const [txB, seqB] = b.split('.') as [string, string];
      return compareBigInts(BigInt(txA), BigInt(txB)) || compareBigInts(BigInt(seqA), BigInt(seqB));
    },
    time: (iso) => iso,
    byId: (productId, id) => sql<SqlBool>`product_id = ${productId} AND id = ${id}`,
    product: (productId) => sql<string>`${productId}`,
    key: (keyId) => sql<string>`${keyId}`,
    named: (names) => sql<SqlBool>`canonical_name IN (${sql.join(names)})`,
    code: (_column, text) => sql<string>`${text}`,
    nameColumn: (column) => sql.ref<string>(column),
    columns: POSTGRES_EVENT_SELECTIONS,
  };
}

/** The product's events, below the read horizon when there is one (PostgreSQL). */
export function visibleEvents(
  q: Kysely<Database>,
  position: PositionSql,
  productId: string,
  horizon: string | undefined,
) {
  let query = q.selectFrom('events').where('product_id', '=', position.product(productId));
  if (horizon !== undefined) query = query.where(position.visible(horizon));
  return query;
}

/**
 * SQLite: the product's rows at these positions (`+product_id`: looked up by position, never through the
 * product's index, whatever the planner guesses).
 */
export function eventsAtPositions(q: Kysely<Database>, productId: string, positions: number[]) {
  return q
    .selectFrom('events')
    .where(sql<SqlBool>`+product_id = ${sqliteProduct(productId)}`)
    .where(sql<SqlBool>`position IN (SELECT value FROM json_each(${JSON.stringify(positions)}))`);
}

/** The read horizon now (PostgreSQL), or undefined (SQLite). */
export function horizonNow(q: Kysely<Database>, position: PositionSql): Promise<string | undefined> {
  return position.horizon === undefined ? Promise.resolve(undefined) : position.horizon(q);
}

export function inOrder<Q extends { orderBy: (column: never, direction: 'asc' | 'desc') => Q }>(
  query: Q,
  position: PositionSql,
  order: 'asc' | 'desc',
): Q {
  let ordered = query;
  for (const column of position.orderColumns) ordered = ordered.orderBy(sql.ref(column) as never, order);
  return ordered;
}

/** The position of the latest event of the product received before `at` (or the earliest after it). */
export async function positionReceived(
  q: Kysely<Database>,
  position: PositionSql,
  productId: string,
  at: string,
  side: 'before' | 'after',
): Promise<string | undefined> {
  const row = await q
    .selectFrom('events')
    .select(position.select.as('position'))
    .where('product_id', '=', position.product(productId))
    .where('received_at', side === 'before' ? '<' : '>', position.time(at))
    .orderBy('received_at', side === 'before' ? 'desc' : 'asc')
    .limit(1)
    .executeTakeFirst();
  return row === undefined ? undefined : String(row.position);
}
