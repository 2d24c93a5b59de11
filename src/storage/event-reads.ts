// Event reads: one by uuid, the admin list (filters, both orders, cursors), the tail of the live
// stream and the export pages. One implementation over Kysely for both dialects; the commit position
// (migrations/event-positions.ts) is the only dialect-specific part, stated once in `positionSql`.
//
// Which index serves which filter, and the bounded scan, are explained in docs/design.md ("Admin
// reads: indexes"). In short: a read is ordered by position and driven by one index; filters the index
// does not serve are checked on the rows it yields, and such a read looks at no more than
// SCAN_BUDGET rows of the product before it answers (with a cursor to go on), so a rare value of an
// unindexed filter cannot make one request scan ten million rows.
import type BetterSqlite3 from 'better-sqlite3';
import { sql, type Expression, type Kysely, type RawBuilder, type SqlBool } from 'kysely';
import type { Database } from './database.js';
import {
  EVENT_COLUMN_NAMES,
  EVENT_TEXT_SELECTIONS,
  eventFromRawRow,
  eventFromRow,
  RAW_EVENT_COLUMNS,
  type EventRow,
} from './event-columns.js';
import type { Dialect, EventFilter, EventPage, EventPageQuery, EventRecord } from './types.js';
import { whereGiven } from './where-given.js';
import type { EventKeys } from './sqlite/event-keys.js';

/** Rows of the product (in position order) one filtered read may look at before it answers. */
export const SCAN_BUDGET = 20_000;

/**
 * Longer than any event's time from receipt to commit. received_from / received_to become position
 * bounds through the latest row received this long before `from` (and the earliest this long after
 * `to`): those committed before (after) every row of the range, so the range lies strictly between.
 */
export const RECEIVE_TO_COMMIT_SLACK_MS = 10 * 60_000;

type Row = EventRow & { position: string | number };

type Op = '<' | '>' | '<=' | '>=';

/** Exported for the destinations' reads (destination-store.ts), which follow the same position. */
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
 * backlog drained quadratically (EXPLAIN ANALYZE with 100,000 rows past the statistics: 168 ms a page of 1,000
 * against 1.5 ms in index order; the destinations bench: 78 ms per page; docs/design.md, "Reads past the
 * statistics"). Every such read has a plan without a sort, so the setting only removes the bad one. Each statement
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
  };
}

/**
 * How a read is served: `exact` when one index serves every filter (no scan budget needed); `split` when the
 * only filter is a list of names or of subject ids — one indexed read per value, merged by position (a single
 * `IN` read would make the planner walk the product's position index or sort every match); else `budget`.
 */
type Plan = { kind: 'exact' } | { kind: 'split'; key: 'canonicalNames' | 'subjectIds' } | { kind: 'budget' };

function planOf(filter: EventFilter): Plan {
  const { canonicalNames, subjectIds, ...rest } = filter;
  const others = Object.values(rest).filter((v) => v !== undefined).length - (filter.subjectType === undefined ? 0 : 1);
  if (others > 0 || (canonicalNames !== undefined && subjectIds !== undefined)) return { kind: 'budget' };
  if (canonicalNames !== undefined && canonicalNames.length > 1) return { kind: 'split', key: 'canonicalNames' };
  if (subjectIds !== undefined && subjectIds.length > 1) return { kind: 'split', key: 'subjectIds' };
  return { kind: 'exact' };
}

/**
 * SQLite's export read: the product's events in a position range, oldest first, as arrays (`.raw()`)
 * from one prepared statement, the JSON columns as their stored text. Through Kysely the same page cost
 * about 8–13 µs per event (query compilation, a 17-field object per row); this is the whole unfiltered
 * export's page and nothing else. It runs inside Kysely's connection mutex, as the writer does, so it never
 * reads inside another open transaction on the same connection.
 */
function sqliteRangeReader(db: Kysely<Database>, raw: BetterSqlite3.Database) {
  const statement = raw
    .prepare(
      `SELECT ${RAW_EVENT_COLUMNS} FROM events WHERE product_id = ? AND position > ? AND position <= ? ORDER BY position LIMIT ?`,
    )
    .raw(true);
  return async (productId: string, after: number, upTo: number, limit: number): Promise<EventRecord[]> => {
    const rows = await db.connection().execute(async () => statement.all(productId, after, upTo, limit) as unknown[][]);
    return rows.map(eventFromRawRow);
  };
}

/**
 * `subjects`: SQLite's subject index (sqlite/event-keys.ts, kind `subjects`; there is no index on the events'
 * subject columns there): reads and lists by subject id look up positions in it, then read those rows and check
 * every filter on them.
 */
export function eventReads(
  db: Kysely<Database>,
  dialect: Dialect,
  rawSqlite?: BetterSqlite3.Database,
  subjects?: EventKeys,
) {
  const position = positionSql(dialect);
  const rangeReader = rawSqlite === undefined ? undefined : sqliteRangeReader(db, rawSqlite);

  /** SQLite: the product's rows at these positions (`+product_id`: looked up by position, never through the
   *  product's index, whatever the planner guesses). */
  function byPositions(q: Kysely<Database>, productId: string, positions: number[]) {
    return q
      .selectFrom('events')
      .where(sql<SqlBool>`+product_id = ${productId}`)
      .where(sql<SqlBool>`position IN (SELECT value FROM json_each(${JSON.stringify(positions)}))`);
  }

  function base(q: Kysely<Database>, productId: string, horizon: string | undefined) {
    let query = q.selectFrom('events').where('product_id', '=', productId);
    if (horizon !== undefined) query = query.where(position.visible(horizon));
    return query;
  }

  const horizonNow = (q: Kysely<Database>): Promise<string | undefined> =>
    position.horizon === undefined ? Promise.resolve(undefined) : position.horizon(q);

  function orderBy<Q extends { orderBy: (column: never, direction: 'asc' | 'desc') => Q }>(
    query: Q,
    order: 'asc' | 'desc',
  ): Q {
    let ordered = query;
    for (const column of position.orderColumns) ordered = ordered.orderBy(sql.ref(column) as never, order);
    return ordered;
  }

  /** The position of the latest row received before `at` (or earliest after it): see RECEIVE_TO_COMMIT_SLACK_MS. */
  async function positionNear(
    q: Kysely<Database>,
    productId: string,
    at: string,
    side: 'before' | 'after',
  ): Promise<string | undefined> {
    const row = await q
      .selectFrom('events')
      .select(position.select.as('position'))
      .where('product_id', '=', productId)
      .where('received_at', side === 'before' ? '<' : '>', at)
      .orderBy('received_at', side === 'before' ? 'desc' : 'asc')
      .limit(1)
      .executeTakeFirst();
    return row === undefined ? undefined : String(row.position);
  }

  // PostgreSQL: a page's statements in position order without a sort of the rows behind (inPositionOrder).
  async function page(query: EventPageQuery): Promise<EventPage> {
    return dialect === 'postgres' ? inPositionOrder(db, (trx) => pageOn(trx, query)) : pageOn(db, query);
  }

  async function pageOn(q: Kysely<Database>, query: EventPageQuery): Promise<EventPage> {
    const { productId, filter, order, limit } = query;
    // The unfiltered export (oldest first, up to its end position, JSON as text): one prepared statement.
    if (
      rangeReader !== undefined &&
      query.jsonText === true &&
      order === 'asc' &&
      query.upTo !== undefined &&
      Object.values(filter).every((v) => v === undefined)
    ) {
      const rows = await rangeReader(
        productId,
        query.after === undefined ? -1 : Number(query.after),
        Number(query.upTo),
        limit + 1,
      );
      const events = rows.length > limit ? rows.slice(0, limit) : rows;
      return { events, next: rows.length > limit ? events[events.length - 1]!.position! : null };
    }
    const horizon = await horizonNow(q);
    const forward: Op = order === 'asc' ? '>' : '<';
    const bounds: Array<Expression<SqlBool>> = [];
    // The same bounds as numbers, exclusive, for the subject index (SQLite positions are integers).
    const range = { after: 0, before: Number.MAX_SAFE_INTEGER };
    const bound = (op: Op | '<=', at: string) => {
      bounds.push(position.compare(op, at));
      if (subjects === undefined) return;
      const value = Number(at);
      if (op === '>') range.after = Math.max(range.after, value);
      else range.before = Math.min(range.before, op === '<=' ? value + 1 : value);
    };
    if (query.after !== undefined) bound(forward, query.after);
    if (query.upTo !== undefined) bound('<=', query.upTo);
    // Received-time ranges become position bounds (then the exact check below), so a range far from
    // the head is found by an index, not by scanning towards it.
    if (filter.receivedFrom !== undefined) {
      const lower = await positionNear(
        q,
        productId,
        new Date(Date.parse(filter.receivedFrom) - RECEIVE_TO_COMMIT_SLACK_MS).toISOString(),
        'before',
      );
      if (lower !== undefined) bound('>', lower);
    }
    if (filter.receivedTo !== undefined) {
      const upper = await positionNear(
        q,
        productId,
        new Date(Date.parse(filter.receivedTo) + RECEIVE_TO_COMMIT_SLACK_MS).toISOString(),
        'after',
      );
      if (upper !== undefined) bound('<', upper);
    }

    // A read that one index does not fully serve looks at SCAN_BUDGET rows of the product at most.
    let scanEnd: string | undefined;
    const plan = planOf(filter);
    if (plan.kind === 'budget') {
      let window = base(q, productId, horizon).select(position.select.as('position'));
      for (const bound of bounds) window = window.where(bound);
      const edge = await orderBy(window, order)
        .offset(SCAN_BUDGET - 1)
        .limit(1)
        .executeTakeFirst();
      if (edge !== undefined) scanEnd = String(edge.position);
    }

    // node-postgres hands json back parsed unless it is cast to text; SQLite stores the text.
    const columns = query.jsonText === true && dialect === 'postgres' ? EVENT_TEXT_SELECTIONS : EVENT_COLUMN_NAMES;
    const read = async (filter: EventFilter, only?: number[]): Promise<Row[]> => {
      let select = (only === undefined ? base(q, productId, horizon) : byPositions(q, productId, only)).select([
        ...columns,
        position.select.as('position'),
      ] as never);
      for (const bound of bounds) select = select.where(bound);
      if (scanEnd !== undefined) select = select.where(position.compare(order === 'asc' ? '<=' : '>=', scanEnd));
      select = whereGiven(select, [
        ['canonical_name', 'in', filter.canonicalNames],
        ['event_type', '=', filter.eventType],
        ['action', '=', filter.action],
        ['source', '=', filter.source],
        ['api_key_id', '=', filter.keyId],
        ['subject_type', '=', filter.subjectType],
        ['subject_id', 'in', filter.subjectIds],
        ['received_at', '>=', filter.receivedFrom],
        ['received_at', '<', filter.receivedTo],
      ]);
      return (await orderBy(select, order)
        .limit(limit + 1)
        .execute()) as unknown as Row[];
    };
    // SQLite, one subject id: positions from the subject index, the first limit + 1 in order, then those rows with
    // every filter checked; rows that fail one (another subject type, a hash shared by another id, a row deleted
    // since) are made up for by the next positions.
    const readBySubject = async (filter: EventFilter): Promise<Row[]> => {
      const want = limit + 1;
      const rows: Row[] = [];
      const next = { ...range };
      for (;;) {
        const positions = await subjects!.subjectPositions(productId, filter.subjectIds!, {
          ...next,
          order,
          limit: want,
        });
        if (positions.length === 0) break;
        rows.push(...(await read(filter, positions)));
        if (rows.length >= want || positions.length < want) break;
        if (order === 'asc') next.after = positions[positions.length - 1]!;
        else next.before = positions[positions.length - 1]!;
      }
      return rows.slice(0, want);
    };
    const readOne = (filter: EventFilter): Promise<Row[]> =>
      subjects !== undefined && plan.kind !== 'budget' && filter.subjectIds?.length === 1
        ? readBySubject(filter)
        : read(filter);
    let rows: Row[];
    if (plan.kind === 'split') {
      const values = filter[plan.key]!;
      const parts = await Promise.all(values.map((value) => readOne({ ...filter, [plan.key]: [value] })));
      const sign = order === 'asc' ? 1 : -1;
      rows = parts
        .flat()
        .sort((x, y) => sign * position.order(String(x.position), String(y.position)))
        .slice(0, limit + 1);
    } else rows = await readOne(filter);

    const events = rows.slice(0, limit).map((row) => eventFromRow(row, query.jsonText === true));
    let next: string | null = null;
    if (rows.length > limit) next = events[events.length - 1]!.position!;
    else if (scanEnd !== undefined) next = scanEnd;
    return { events, next };
  }

  return {
    page,
    isPosition: position.valid,
    comparePositions: position.order,
    async endPosition(productId: string): Promise<string | null> {
      const row = await orderBy(
        base(db, productId, await horizonNow(db)).select(position.select.as('position')),
        'desc',
      )
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? null : String(row.position);
    },
    async get(productId: string, id: string) {
      const row = await db
        .selectFrom('events')
        .select([...EVENT_COLUMN_NAMES, position.select.as('position')])
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && eventFromRow(row as unknown as Row);
    },
    async count(productId: string) {
      const row = await db
        .selectFrom('events')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('product_id', '=', productId)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async listBySubjects(productId: string, subjectType: string, subjectIds: string[], limit: number) {
      if (subjectIds.length === 0) return [];
      const rows = await (
        subjects === undefined
          ? base(db, productId, undefined)
          : byPositions(db, productId, await subjects.subjectPositions(productId, subjectIds, { order: 'asc' }))
      )
        .select([...EVENT_COLUMN_NAMES, position.select.as('position')])
        .where('subject_type', '=', subjectType)
        .where('subject_id', 'in', subjectIds)
        .orderBy('occurred_at', 'desc')
        .orderBy('id', 'desc')
        .limit(limit)
        .execute();
      return (rows as unknown as Row[]).map((row) => eventFromRow(row));
    },
  };
}
