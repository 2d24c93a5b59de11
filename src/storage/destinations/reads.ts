// The one read deliverers make (events-out §6): the product's messages (events and identity messages) after a
// destination's cursor, in one position order, never skipping one; and the cursors and counts around it.
//
// The cursor is two positions: the last event delivered (or passed over by the filter) and the last
// identity message. Both logs share one order:
// - PostgreSQL: (tx, seq) in both tables (identity messages draw `seq` from the events' sequence), read
//   below one read horizon (../event-position.ts), so nothing below it can still commit.
// - SQLite: events by position; an identity message sorts after the event `after_event` and before the
//   next (writes are serialised, so `after_event` is exact). Both tables are read in one transaction
//   (one snapshot), so a write between the two reads cannot interleave wrongly.
// A page of each log is read, merged, and only the part of the merge below both pages' ends is
// returned (what lies beyond a full page's end may still be missing from the other).
import type BetterSqlite3 from 'better-sqlite3';
import { sql, type Kysely } from 'kysely';
import { boundedMemo } from '../../domain/bounded-memo.js';
import type { Database } from '../database.js';
import {
  EVENT_COLUMN_NAMES,
  EVENT_TEXT_COLUMN_LIST,
  eventFromRawRow,
  eventFromRow,
  SQLITE_CODED,
  SQLITE_EVENT_COLUMN_LIST,
  SQLITE_PRODUCT_NUMBER,
  type EventRow,
} from '../event-columns.js';
import { inPositionOrder, positionReceived, positionSql, type PositionSql } from '../event-position.js';
import type { DestinationCursor, Dialect, EventRecord, IdentityMessageData, StoredMessage } from '../types.js';

type IdentityRow = {
  position: string | number;
  after_event?: number | string;
  id: string;
  type: string;
  created_at: string;
  data: string;
};

/** One page of each log, as read. */
interface Logs {
  events: EventRecord[];
  identity: IdentityRow[];
}

// The JSON columns are read as their stored text (cast on PostgreSQL, where node-postgres would parse json): a
// message is only ever written out as JSON, so the text goes into it as it is instead of a parse and a stringify.
const EVENT_SELECT = { sqlite: sql.raw(SQLITE_EVENT_COLUMN_LIST), postgres: sql.raw(EVENT_TEXT_COLUMN_LIST) };

function compareBig(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function compareKeys(a: bigint[], b: bigint[]): number {
  for (let i = 0; i < a.length; i++) {
    const c = compareBig(a[i]!, b[i]!);
    if (c !== 0) return c;
  }
  return 0;
}

/** Sort key of a message in the one order of both logs (see the header). */
function keyOf(
  dialect: Dialect,
  message: { kind: 'event' | 'identity'; position: string; afterEvent?: string },
): bigint[] {
  if (dialect === 'postgres') {
    const [tx, seq] = message.position.split('.') as [string, string];
    return [BigInt(tx), BigInt(seq)];
  }
  return message.kind === 'event'
    ? [BigInt(message.position), 0n, 0n]
    : [BigInt(message.afterEvent!), 1n, BigInt(message.position)];
}

/** The merge of both pages in the one order, up to `limit`, and only below both full pages' ends. */
function mergeLogs(dialect: Dialect, { events, identity }: Logs, limit: number): StoredMessage[] {
  // No identity message in the page (the usual case): the events as they are, without sort keys to compare.
  if (identity.length === 0) {
    const messages = new Array<StoredMessage>(Math.min(events.length, limit));
    for (let i = 0; i < messages.length; i++) {
      const event = events[i]!;
      messages[i] = { kind: 'event', position: event.position!, event };
    }
    return messages;
  }
  type Item = { key: bigint[]; message: StoredMessage };
  const eventItems: Item[] = events.map((event) => ({
    key: keyOf(dialect, { kind: 'event', position: event.position! }),
    message: { kind: 'event', position: event.position!, event },
  }));
  const identityItems: Item[] = identity.map((row) => ({
    key: keyOf(dialect, {
      kind: 'identity',
      position: String(row.position),
      afterEvent: row.after_event === undefined ? undefined : String(row.after_event),
    }),
    message: {
      kind: 'identity',
      position: String(row.position),
      id: row.id,
      type: row.type as 'user.identified' | 'user.merged' | 'user.erased',
      createdAt: row.created_at,
      data: JSON.parse(row.data) as IdentityMessageData,
    },
  }));
  let frontier: bigint[] | undefined;
  for (const items of [eventItems, identityItems]) {
    if (items.length === limit) {
      const last = items[items.length - 1]!.key;
      if (frontier === undefined || compareKeys(last, frontier) < 0) frontier = last;
    }
  }
  return [...eventItems, ...identityItems]
    .sort((a, b) => compareKeys(a.key, b.key))
    .filter((item) => frontier === undefined || compareKeys(item.key, frontier) <= 0)
    .slice(0, limit)
    .map((item) => item.message);
}

/** The identity messages' position in SQL, as the events' (../event-position.ts). */
const IDENTITY_POSITION = {
  sqlite: { select: sql<string>`position`, order: 'position' },
  postgres: { select: sql<string>`tx::text || '.' || seq::text`, order: 'tx, seq' },
};

function identityAfter(dialect: Dialect, cursor: string) {
  if (dialect === 'postgres') {
    const [tx, seq] = cursor.split('.') as [string, string];
    return sql`(tx, seq) > (${tx}::xid8, ${seq}::bigint)`;
  }
  return sql`position > ${Number(cursor)}`;
}

/** Both logs' reads in one snapshot (see the header); on PostgreSQL below the read horizon taken first. */
function inOneSnapshot<T>(
  db: Kysely<Database>,
  position: PositionSql,
  work: (q: Kysely<Database>, horizon: string | undefined) => Promise<T>,
): Promise<T> {
  if (position.horizon !== undefined) {
    const horizon = position.horizon;
    // Rows below the horizon are final: two statements after it see the same rows below it. In position order
    // without a sort of the whole backlog (inPositionOrder, ../event-position.ts).
    return inPositionOrder(db, async (trx) => work(trx, await horizon(trx)));
  }
  return db.transaction().execute((trx) => work(trx, undefined));
}

/**
 * The event's id (16 bytes on SQLite, migration 853) read as text made in SQL: better-sqlite3 gives each BLOB as a
 * Buffer of its own, which costs more than several other columns together. Its 32 lowercase hex digits; a text id
 * (never written: ids are uuids) as itself after a space (no hex digit), so the two stay apart (`idText`).
 */
const SQLITE_ID = `CASE typeof(id) WHEN 'blob' THEN lower(hex(id)) ELSE ' ' || id END AS id`;

function idText(stored: string): string {
  if (stored.charCodeAt(0) === 0x20) return stored.slice(1);
  return `${stored.slice(0, 8)}-${stored.slice(8, 12)}-${stored.slice(12, 16)}-${stored.slice(16, 20)}-${stored.slice(20)}`;
}

/**
 * SQLite's numbered columns (migrations 854–856) as stored, in the order of RAW_EVENT_COLUMNS (whose select list
 * turns them into their text with a subquery per column and row: five lookups per event read). The deliverers read
 * every event, so they read the numbers and map them here, each number looked up once (`SqliteNumbers`).
 */
const STORED_EVENT_COLUMNS = `${EVENT_COLUMN_NAMES.map((name) => (name === 'id' ? SQLITE_ID : name)).join(', ')}, position`;
const at = (name: (typeof EVENT_COLUMN_NAMES)[number]) => EVENT_COLUMN_NAMES.indexOf(name);
const ID = at('id');
const PRODUCT = at('product_id');
const KEY = at('api_key_id');
const NAME = at('canonical_name');
const TYPE = at('event_type');
const ACTION = at('action');
/** The coded columns (migration 856), each with its place in the row: every one SQLITE_CODED names. */
const CODED = Object.entries(SQLITE_CODED).map(([name, codes]) => ({
  index: at(name as (typeof EVENT_COLUMN_NAMES)[number]),
  codes: codes!,
}));

/** Numbers kept at most per map before it starts again (names and keys are few; this only bounds memory). */
const NUMBERS_KEPT = 100_000;

/**
 * The text of SQLite's stored numbers, each looked up once: `key_numbers` and `event_names` only ever gain rows
 * (a number, once given, names the same key or name for good), so what was read stays true.
 */
function sqliteNumbers(raw: BetterSqlite3.Database) {
  const keyText = raw.prepare('SELECT key_id FROM key_numbers WHERE number = ?').pluck(true);
  const nameText = raw.prepare('SELECT canonical_name, event_type, action FROM event_names WHERE number = ?').raw(true);
  const key = boundedMemo(NUMBERS_KEPT, (stored: unknown) => (keyText.get(stored) as string | undefined) ?? null);
  return {
    key: (stored: unknown): string | null => (stored === null ? null : key(stored)),
    name: boundedMemo(
      NUMBERS_KEPT,
      (stored: unknown) =>
        (nameText.get(stored) as [string, string, string] | undefined) ?? ([null, null, null] as const),
    ),
  };
}

/** SQLite: the page of each log as prepared statements returning arrays (as the export reads). */
function sqliteLogStatements(raw: BetterSqlite3.Database) {
  return {
    events: raw
      .prepare(
        `SELECT ${STORED_EVENT_COLUMNS} FROM events WHERE product_id = ${SQLITE_PRODUCT_NUMBER} AND position > ? ORDER BY position LIMIT ?`,
      )
      .raw(true),
    numbers: sqliteNumbers(raw),
    identity: raw.prepare(
      'SELECT id, type, created_at, data, position, after_event FROM identity_messages WHERE product_id = ? AND position > ? ORDER BY position LIMIT ?',
    ),
  };
}
type SqliteLogStatements = ReturnType<typeof sqliteLogStatements>;

function sqliteEvents(statements: SqliteLogStatements, productId: string, after: string | null, limit: number) {
  const rows = statements.events.all(productId, after === null ? -1 : Number(after), limit) as unknown[][];
  const numbers = statements.numbers;
  const events: EventRecord[] = new Array<EventRecord>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    // The row as RAW_EVENT_COLUMNS reads it: the numbers as their text (the type and the action stored only where
    // they differ from the name's, else NULL: `coalesce` as SQLITE_EVENT_TYPE_TEXT).
    const row = rows[i]!;
    const name = numbers.name(row[NAME]);
    row[ID] = idText(row[ID] as string);
    row[PRODUCT] = productId;
    row[KEY] = numbers.key(row[KEY]);
    row[NAME] = name[0];
    row[TYPE] ??= name[1];
    row[ACTION] ??= name[2];
    for (const { index, codes } of CODED) row[index] = codes.decode(row[index]);
    events[i] = eventFromRawRow(row);
  }
  return events;
}

/**
 * SQLite: both logs read in one synchronous transaction of prepared statements (Kysely prepared them anew
 * on every read, with its own BEGIN and COMMIT: ~8 % of the deliverer's CPU). Only when no transaction is
 * open on the connection: a Kysely transaction that awaits between its statements would otherwise take this
 * read in as a savepoint and show it its uncommitted rows. Nothing can interleave with a synchronous one.
 */
function sqliteLogsReader(raw: BetterSqlite3.Database, statements: SqliteLogStatements) {
  return raw.transaction((productId: string, cursor: DestinationCursor, limit: number): Logs => ({
    events: sqliteEvents(statements, productId, cursor.event, limit),
    identity: statements.identity.all(
      productId,
      cursor.identity === null ? -1 : Number(cursor.identity),
      limit,
    ) as IdentityRow[],
  }));
}

/** A page of the product's events after `after` (a position, or null for the start), below the horizon. */
async function readEvents(
  q: Kysely<Database>,
  position: PositionSql,
  dialect: Dialect,
  page: { productId: string; after: string | null; horizon: string | undefined; limit: number },
): Promise<EventRecord[]> {
  const conditions = [sql`product_id = ${position.product(page.productId)}`];
  if (page.after !== null) conditions.push(sql`${position.compare('>', page.after)}`);
  if (page.horizon !== undefined) conditions.push(sql`${position.visible(page.horizon)}`);
  const order = sql.raw(position.orderColumns.join(', '));
  const result = await sql<EventRow>`SELECT ${EVENT_SELECT[dialect]}, ${position.select} AS position FROM events
      WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${order} LIMIT ${page.limit}`.execute(q);
  return result.rows.map((row) => eventFromRow(row, true));
}

/** A page of the product's identity messages after `after`, below the horizon. */
async function readIdentity(
  q: Kysely<Database>,
  dialect: Dialect,
  page: { productId: string; after: string | null; horizon: string | undefined; limit: number },
): Promise<IdentityRow[]> {
  const conditions = [sql`product_id = ${page.productId}`];
  if (page.after !== null) conditions.push(identityAfter(dialect, page.after));
  if (page.horizon !== undefined) conditions.push(sql`tx < ${page.horizon}::xid8`);
  const { select, order } = IDENTITY_POSITION[dialect];
  const extra = dialect === 'postgres' ? sql`` : sql`, after_event`;
  const result =
    await sql<IdentityRow>`SELECT id, type, created_at, data, ${select} AS position${extra} FROM identity_messages
      WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${sql.raw(order)} LIMIT ${page.limit}`.execute(q);
  return result.rows;
}

/** The cursor at the current end of the product's messages. */
async function endCursor(
  q: Kysely<Database>,
  position: PositionSql,
  dialect: Dialect,
  productId: string,
  horizon: string | undefined,
): Promise<DestinationCursor> {
  const conditions = [sql`product_id = ${position.product(productId)}`];
  if (horizon !== undefined) conditions.push(sql`${position.visible(horizon)}`);
  const order = sql.raw(position.orderColumns.map((c) => `${c} DESC`).join(', '));
  const event = await sql<{
    position: string;
  }>`SELECT ${position.select} AS position FROM events WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${order} LIMIT 1`.execute(
    q,
  );
  const idConditions = [sql`product_id = ${productId}`];
  if (horizon !== undefined) idConditions.push(sql`tx < ${horizon}::xid8`);
  const idOrder = sql.raw(dialect === 'postgres' ? 'tx DESC, seq DESC' : 'position DESC');
  const identity = await sql<{
    position: string;
  }>`SELECT ${IDENTITY_POSITION[dialect].select} AS position FROM identity_messages WHERE ${sql.join(idConditions, sql` AND `)} ORDER BY ${idOrder} LIMIT 1`.execute(
    q,
  );
  return {
    event: event.rows[0] === undefined ? null : String(event.rows[0].position),
    identity: identity.rows[0] === undefined ? null : String(identity.rows[0].position),
  };
}

/** Messages after the cursor, counted up to `cap` per log. */
async function lag(
  q: Kysely<Database>,
  position: PositionSql,
  dialect: Dialect,
  request: { productId: string; cursor: DestinationCursor; cap: number; horizon: string | undefined },
): Promise<number> {
  const { productId, cursor, cap, horizon } = request;
  const conditions = [sql`product_id = ${position.product(productId)}`];
  if (cursor.event !== null) conditions.push(sql`${position.compare('>', cursor.event)}`);
  if (horizon !== undefined) conditions.push(sql`${position.visible(horizon)}`);
  const events = await sql<{
    n: number | string;
  }>`SELECT count(*) AS n FROM (SELECT 1 FROM events WHERE ${sql.join(conditions, sql` AND `)} LIMIT ${cap}) AS behind`.execute(
    q,
  );
  const idConditions = [sql`product_id = ${productId}`];
  if (cursor.identity !== null) idConditions.push(identityAfter(dialect, cursor.identity));
  if (horizon !== undefined) idConditions.push(sql`tx < ${horizon}::xid8`);
  const identity = await sql<{
    n: number | string;
  }>`SELECT count(*) AS n FROM (SELECT 1 FROM identity_messages WHERE ${sql.join(idConditions, sql` AND `)} LIMIT ${cap}) AS behind`.execute(
    q,
  );
  return Number(events.rows[0]?.n ?? 0) + Number(identity.rows[0]?.n ?? 0);
}

/** The DestinationStore's reads of the product's messages and cursors. */
export function destinationReads(db: Kysely<Database>, dialect: Dialect, rawSqlite?: BetterSqlite3.Database) {
  const position = positionSql(dialect);
  const statements = rawSqlite === undefined ? undefined : sqliteLogStatements(rawSqlite);
  const readLogsRaw =
    rawSqlite === undefined || statements === undefined ? undefined : sqliteLogsReader(rawSqlite, statements);

  return {
    isEventPosition: position.valid,
    orderPositions: position.order,

    /**
     * Up to `limit` messages of the product after `cursor`, in position order. Each carries its
     * position; the cursor after a message is the cursor before it with that log's part moved.
     */
    async readMessages(productId: string, cursor: DestinationCursor, limit: number): Promise<StoredMessage[]> {
      const logs =
        readLogsRaw !== undefined && !rawSqlite!.inTransaction
          ? readLogsRaw(productId, cursor, limit)
          : await inOneSnapshot(db, position, async (q, horizon) => ({
              // SQLite inside another open transaction: its prepared statement, on the transaction's connection.
              events:
                statements === undefined
                  ? await readEvents(q, position, dialect, { productId, after: cursor.event, horizon, limit })
                  : sqliteEvents(statements, productId, cursor.event, limit),
              identity: await readIdentity(q, dialect, { productId, after: cursor.identity, horizon, limit }),
            }));
      return mergeLogs(dialect, logs, limit);
    },

    /** The cursor at the current end of the product's messages ("start": "now"). */
    async endCursor(productId: string): Promise<DestinationCursor> {
      return inOneSnapshot(db, position, (q, horizon) => endCursor(q, position, dialect, productId, horizon));
    },

    /** The cursor just after the event at `eventPosition` (identity messages ordered before it count as passed). */
    async cursorAfterEvent(productId: string, eventPosition: string): Promise<DestinationCursor> {
      if (dialect === 'postgres') return { event: eventPosition, identity: eventPosition };
      const row = await sql<{
        position: number | null;
      }>`SELECT max(position) AS position FROM identity_messages WHERE product_id = ${productId} AND after_event < ${Number(eventPosition)}`.execute(
        db,
      );
      const identity = row.rows[0]?.position;
      return { event: eventPosition, identity: identity == null ? null : String(identity) };
    },

    /** The position of the last event received before `at` (a replay from a time starts after it), or null. */
    async eventPositionBefore(productId: string, at: string): Promise<string | null> {
      return (await positionReceived(db, position, productId, at, 'before')) ?? null;
    },

    /** Messages after the cursor, counted up to `cap` per log (the lag; without the destination's filter). */
    async lag(productId: string, cursor: DestinationCursor, cap: number): Promise<number> {
      return inOneSnapshot(db, position, (q, horizon) =>
        lag(q, position, dialect, { productId, cursor, cap, horizon }),
      );
    },
  };
}
