// Event reads: one by uuid, the admin list (filters, both orders, cursors), the tail of the live
// stream and the export pages. One implementation over Kysely for both dialects; the commit position
// (migrations/event-positions.ts) is the only dialect-specific part, stated once in event-position.ts.
//
// Which index serves which filter, and the bounded scan, are explained in docs/design.md ("Admin
// reads: indexes"). In short: a read is ordered by position and driven by one index; filters the index
// does not serve are checked on the rows it yields, and such a read looks at no more than
// SCAN_BUDGET rows of the product before it answers (with a cursor to go on), so a rare value of an
// unindexed filter cannot make one request scan ten million rows.
import type BetterSqlite3 from 'better-sqlite3';
import type { Expression, Kysely, SqlBool } from 'kysely';
import type { Database } from './database.js';
import {
  EVENT_TEXT_SELECTIONS,
  eventFromRawRow,
  eventFromRow,
  RAW_EVENT_COLUMNS,
  SQLITE_PRODUCT_NUMBER,
  type EventRow,
} from './event-columns.js';
import {
  eventsAtPositions,
  horizonNow,
  inOrder,
  inPositionOrder,
  positionReceived,
  positionSql,
  visibleEvents,
  type Op,
  type PositionSql,
} from './event-position.js';
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

type RangeReader = (productId: string, after: number, upTo: number, limit: number) => Promise<EventRecord[]>;

/**
 * SQLite's export read: the product's events in a position range, oldest first, as arrays (`.raw()`)
 * from one prepared statement, the JSON columns as their stored text. Through Kysely the same page cost
 * about 8–13 µs per event (query compilation, a 17-field object per row); this is the whole unfiltered
 * export's page and nothing else. It runs inside Kysely's connection mutex, as the writer does, so it never
 * reads inside another open transaction on the same connection.
 */
function sqliteRangeReader(db: Kysely<Database>, raw: BetterSqlite3.Database): RangeReader {
  const statement = raw
    .prepare(
      `SELECT ${RAW_EVENT_COLUMNS} FROM events WHERE product_id = ${SQLITE_PRODUCT_NUMBER} AND position > ? AND position <= ? ORDER BY position LIMIT ?`,
    )
    .raw(true);
  return async (productId, after, upTo, limit) => {
    const rows = await db.connection().execute(async () => statement.all(productId, after, upTo, limit) as unknown[][]);
    return rows.map(eventFromRawRow);
  };
}

/** The unfiltered export's page (oldest first, up to its end position, JSON as text), which sqliteRangeReader serves. */
function isWholeExportPage(query: EventPageQuery): query is EventPageQuery & { upTo: string } {
  return (
    query.jsonText === true &&
    query.order === 'asc' &&
    query.upTo !== undefined &&
    Object.values(query.filter).every((v) => v === undefined)
  );
}

async function exportPage(rangeReader: RangeReader, query: EventPageQuery & { upTo: string }): Promise<EventPage> {
  const { limit } = query;
  const after = query.after === undefined ? -1 : Number(query.after);
  const rows = await rangeReader(query.productId, after, Number(query.upTo), limit + 1);
  const events = rows.length > limit ? rows.slice(0, limit) : rows;
  return { events, next: rows.length > limit ? events[events.length - 1]!.position! : null };
}

/** A page's position bounds, and the same bounds as numbers, exclusive, for SQLite's subject index. */
interface Bounds {
  where: Array<Expression<SqlBool>>;
  range: { after: number; before: number };
}

/**
 * The page's position bounds: its cursor, its end, and its received-time range as positions (then checked exactly
 * on the rows), so that a range far from the head is found by an index, not by scanning towards it.
 */
async function boundsOf(q: Kysely<Database>, position: PositionSql, query: EventPageQuery): Promise<Bounds> {
  const { productId, filter } = query;
  const bounds: Bounds = { where: [], range: { after: 0, before: Number.MAX_SAFE_INTEGER } };
  const bound = (op: Op, at: string) => {
    bounds.where.push(position.compare(op, at));
    const value = Number(at);
    if (op === '>') bounds.range.after = Math.max(bounds.range.after, value);
    else bounds.range.before = Math.min(bounds.range.before, op === '<=' ? value + 1 : value);
  };
  if (query.after !== undefined) bound(query.order === 'asc' ? '>' : '<', query.after);
  if (query.upTo !== undefined) bound('<=', query.upTo);
  if (filter.receivedFrom !== undefined) {
    const from = new Date(Date.parse(filter.receivedFrom) - RECEIVE_TO_COMMIT_SLACK_MS).toISOString();
    const lower = await positionReceived(q, position, productId, from, 'before');
    if (lower !== undefined) bound('>', lower);
  }
  if (filter.receivedTo !== undefined) {
    const to = new Date(Date.parse(filter.receivedTo) + RECEIVE_TO_COMMIT_SLACK_MS).toISOString();
    const upper = await positionReceived(q, position, productId, to, 'after');
    if (upper !== undefined) bound('<', upper);
  }
  return bounds;
}

/** A read that one index does not fully serve looks at SCAN_BUDGET rows of the product at most: where they end. */
async function scanEndOf(
  q: Kysely<Database>,
  position: PositionSql,
  query: EventPageQuery,
  horizon: string | undefined,
  bounds: Bounds,
): Promise<string | undefined> {
  let window = visibleEvents(q, position, query.productId, horizon).select(position.select.as('position'));
  for (const bound of bounds.where) window = window.where(bound);
  const edge = await inOrder(window, position, query.order)
    .offset(SCAN_BUDGET - 1)
    .limit(1)
    .executeTakeFirst();
  return edge === undefined ? undefined : String(edge.position);
}

/** What the reads of one page share. */
interface PageRead {
  q: Kysely<Database>;
  position: PositionSql;
  dialect: Dialect;
  subjects: EventKeys | undefined;
  query: EventPageQuery;
  horizon: string | undefined;
  bounds: Bounds;
  scanEnd: string | undefined;
}

/** The first `limit + 1` rows matching `filter` within the page's bounds; `only`: at these positions (SQLite). */
async function readRows(page: PageRead, filter: EventFilter, only?: number[]): Promise<Row[]> {
  const { q, position, query, horizon, scanEnd } = page;
  // node-postgres hands json back parsed unless it is cast to text; SQLite stores the text.
  const columns = query.jsonText === true && page.dialect === 'postgres' ? EVENT_TEXT_SELECTIONS : position.columns;
  const from =
    only === undefined
      ? visibleEvents(q, position, query.productId, horizon)
      : eventsAtPositions(q, query.productId, only);
  let select = from.select([...columns, position.select.as('position')] as never);
  for (const bound of page.bounds.where) select = select.where(bound);
  if (scanEnd !== undefined) select = select.where(position.compare(query.order === 'asc' ? '<=' : '>=', scanEnd));
  if (filter.canonicalNames !== undefined) select = select.where(position.named(filter.canonicalNames));
  select = whereGiven(select, [
    [position.nameColumn('event_type'), '=', filter.eventType],
    [position.nameColumn('action'), '=', filter.action],
    ['source', '=', filter.source === undefined ? undefined : position.code('source', filter.source)],
    ['api_key_id', '=', filter.keyId === undefined ? undefined : position.key(filter.keyId)],
    [
      'subject_type',
      '=',
      filter.subjectType === undefined ? undefined : position.code('subject_type', filter.subjectType),
    ],
    ['subject_id', 'in', filter.subjectIds],
    ['received_at', '>=', filter.receivedFrom === undefined ? undefined : position.time(filter.receivedFrom)],
    ['received_at', '<', filter.receivedTo === undefined ? undefined : position.time(filter.receivedTo)],
  ]);
  return (await inOrder(select, position, query.order)
    .limit(query.limit + 1)
    .execute()) as unknown as Row[];
}

/**
 * SQLite, one subject id: positions from the subject index, the first limit + 1 in order, then those rows with
 * every filter checked; rows that fail one (another subject type, a hash shared by another id, a row deleted
 * since) are made up for by the next positions.
 */
async function readBySubject(page: PageRead, subjects: EventKeys, filter: EventFilter): Promise<Row[]> {
  const { productId, order, limit } = page.query;
  const want = limit + 1;
  const rows: Row[] = [];
  const next = { ...page.bounds.range };
  for (;;) {
    const positions = await subjects.subjectPositions(productId, filter.subjectIds!, { ...next, order, limit: want });
    if (positions.length === 0) break;
    rows.push(...(await readRows(page, filter, positions)));
    if (rows.length >= want || positions.length < want) break;
    if (order === 'asc') next.after = positions[positions.length - 1]!;
    else next.before = positions[positions.length - 1]!;
  }
  return rows.slice(0, want);
}

/** The page's first `limit + 1` rows: one read, or (`split`) one per value merged by position. */
async function pageRows(page: PageRead, plan: Plan): Promise<Row[]> {
  const { subjects, query } = page;
  const readOne = (filter: EventFilter): Promise<Row[]> =>
    subjects !== undefined && plan.kind !== 'budget' && filter.subjectIds?.length === 1
      ? readBySubject(page, subjects, filter)
      : readRows(page, filter);
  if (plan.kind !== 'split') return readOne(query.filter);
  const values = query.filter[plan.key]!;
  const parts = await Promise.all(values.map((value) => readOne({ ...query.filter, [plan.key]: [value] })));
  const sign = query.order === 'asc' ? 1 : -1;
  return parts
    .flat()
    .sort((x, y) => sign * page.position.order(String(x.position), String(y.position)))
    .slice(0, query.limit + 1);
}

/** One page of the product's events in position order (EventStore.page), its statements on `q`. */
async function readPage(
  q: Kysely<Database>,
  position: PositionSql,
  dialect: Dialect,
  subjects: EventKeys | undefined,
  query: EventPageQuery,
): Promise<EventPage> {
  const horizon = await horizonNow(q, position);
  const bounds = await boundsOf(q, position, query);
  const plan = planOf(query.filter);
  const scanEnd = plan.kind === 'budget' ? await scanEndOf(q, position, query, horizon, bounds) : undefined;
  const rows = await pageRows({ q, position, dialect, subjects, query, horizon, bounds, scanEnd }, plan);
  const events = rows.slice(0, query.limit).map((row) => eventFromRow(row, query.jsonText === true));
  let next: string | null = null;
  if (rows.length > query.limit) next = events[events.length - 1]!.position!;
  else if (scanEnd !== undefined) next = scanEnd;
  return { events, next };
}

/** Most recent first: the events of these subjects (EventStore.listBySubjects). */
async function listBySubjects(
  db: Kysely<Database>,
  position: PositionSql,
  subjects: EventKeys | undefined,
  request: { productId: string; subjectType: string; subjectIds: string[]; limit: number },
): Promise<EventRecord[]> {
  const { productId, subjectType, subjectIds, limit } = request;
  if (subjectIds.length === 0) return [];
  const from =
    subjects === undefined
      ? visibleEvents(db, position, productId, undefined)
      : eventsAtPositions(db, productId, await subjects.subjectPositions(productId, subjectIds, { order: 'asc' }));
  const rows = await from
    .select([...position.columns, position.select.as('position')] as never)
    .where('subject_type', '=', position.code('subject_type', subjectType))
    .where('subject_id', 'in', subjectIds)
    .orderBy('occurred_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
  return (rows as unknown as Row[]).map((row) => eventFromRow(row));
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

  return {
    isPosition: position.valid,
    comparePositions: position.order,
    async page(query: EventPageQuery): Promise<EventPage> {
      if (rangeReader !== undefined && isWholeExportPage(query)) return exportPage(rangeReader, query);
      // PostgreSQL: a page's statements in position order without a sort of the rows behind (inPositionOrder).
      return dialect === 'postgres'
        ? inPositionOrder(db, (trx) => readPage(trx, position, dialect, subjects, query))
        : readPage(db, position, dialect, subjects, query);
    },
    async endPosition(productId: string): Promise<string | null> {
      const end = visibleEvents(db, position, productId, await horizonNow(db, position));
      const row = await inOrder(end.select(position.select.as('position')), position, 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? null : String(row.position);
    },
    async get(productId: string, id: string) {
      const row = await db
        .selectFrom('events')
        .select([...position.columns, position.select.as('position')] as never)
        .where(position.byId(productId, id))
        .executeTakeFirst();
      return row && eventFromRow(row as unknown as Row);
    },
    async count(productId: string) {
      const row = await db
        .selectFrom('events')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('product_id', '=', position.product(productId))
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },
    listBySubjects: (productId: string, subjectType: string, subjectIds: string[], limit: number) =>
      listBySubjects(db, position, subjects, { productId, subjectType, subjectIds, limit }),
  };
}
