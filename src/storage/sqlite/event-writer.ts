// The SQLite ingest path. Hand-written prepared statements instead of Kysely: this runs for every
// event, and better-sqlite3's cached statements skip query compilation and the async round trips.
// In-process it runs inside Kysely's connection mutex so it never lands inside another open transaction; the
// writer thread (writer-thread.ts) runs the same transaction on a connection of its own.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import { externalIdInto, externalIdText, nameFormatCode, uuidBytesInto, type Database } from '../database.js';
import {
  EVENT_COLUMN_LIST,
  EVENT_COLUMNS,
  eventFromRow,
  SQLITE_EVENT_COLUMN_LIST,
  SQLITE_CODED,
  type EventRow,
} from '../event-columns.js';
import type { EventInsert, InsertOutcome } from '../types.js';
import type { EventKeys } from './event-keys.js';
import { withoutCommitSync, type WalSync } from './wal-sync.js';

// The statement's arguments: the table's columns (event-columns.ts), then the row's two hashes (event-keys.ts; a
// deleted row's note takes them from it, for the sweep). Times are stored as milliseconds since 1970 (migration
// 853) and ids as their 16 bytes, external ids that are lowercase uuids too and name formats as small numbers
// (migration 855): `stored` wraps the expression of such a column's text in Date.parse, uuidBytesInto,
// externalIdInto (one buffer per column for every row: better-sqlite3 copies a blob when it binds it, after every
// argument was made) or nameFormatCode; the source and the subject type in their codes (`SQLITE_CODED`, migration
// 856). The product and the key are stored as their numbers (migration 854), looked up by the transaction once per
// commit and id (`StoredNumbers`); the name as its number in `event_names` (migration 855), looked up or added by
// the transaction, with the type and the action NULL where they are the name's (`StoredName`).
const PLACEHOLDERS = EVENT_COLUMNS.map(() => '?').join(', ');
const stored = (column: number, text: string) => {
  const { name, type, sqliteCode } = EVENT_COLUMNS[column]!;
  if (name === 'product_id') return 'numbers.product';
  if (name === 'api_key_id') return 'numbers.key';
  if (name === 'canonical_name') return 'name.number';
  if (name === 'event_type') return 'name.eventType';
  if (name === 'action') return 'name.action';
  if (type === 'timestamptz') return `Date.parse(${text})`;
  if (type === 'uuid') return `uuidBytesInto(${text}, idBytes)`;
  if (sqliteCode === 'name-format') return `nameFormatCode(${text})`;
  if (SQLITE_CODED[name] !== undefined) return `coded.${name}.code(${text})`;
  return sqliteCode === 'uuid' ? `externalIdInto(${text}, externalBytes)` : text;
};
const idBytes = Buffer.alloc(16);
const externalBytes = Buffer.alloc(16);
const INSERT_SQL = `INSERT INTO events (${EVENT_COLUMN_LIST}, key_hash, subject_hash) VALUES (${PLACEHOLDERS}, ?, ?)`;

/**
 * How a row stores its name (migration 855): the name's number in `event_names`, and its type and action only
 * where they are not the ones `event_names` holds for the name (else NULL).
 */
export interface StoredName {
  number: number;
  eventType: string | null;
  action: string | null;
}

/**
 * A row's product and key as their numbers in `product_numbers` and `key_numbers` (migration 854): null when the id
 * has none (an unknown product is then refused by `product_id` NOT NULL, as the statement's subquery had it; no key
 * is NULL).
 */
export interface StoredNumbers {
  product: number | null;
  key: number | null;
}

type RunInsert<Rows> = (
  statement: BetterSqlite3.Statement,
  rows: Rows,
  index: number,
  keyHash: number | null,
  subjectHash: number,
  name: StoredName,
  numbers: StoredNumbers,
) => BetterSqlite3.RunResult;

/**
 * `statement.run(value0, …, keyHash, subjectHash)` compiled once from the table: each value is then an expression
 * of its own and the arguments go straight into the call, where a loop filling one array of arguments and
 * spreading it into the call cost every event measurably more. The source holds only indexes.
 */
function compileRunInsert<Rows>(argument: (column: number) => string, values: unknown): RunInsert<Rows> {
  const call = `statement.run(${EVENT_COLUMNS.map((_, i) => stored(i, argument(i))).join(', ')}, keyHash, subjectHash)`;
  const names = EVENT_COLUMNS.map((_, i) => `v${i}`).join(', ');
  const source = `'use strict';\nconst [${names}] = values;\nreturn (statement, rows, i, keyHash, subjectHash, name, numbers) => ${call};`;
  const make = new Function(
    'values',
    'uuidBytesInto',
    'idBytes',
    'externalIdInto',
    'externalBytes',
    'nameFormatCode',
    'coded',
    source,
  );
  return make(
    values,
    uuidBytesInto,
    idBytes,
    externalIdInto,
    externalBytes,
    nameFormatCode,
    SQLITE_CODED,
  ) as RunInsert<Rows>;
}

/** The rows of one commit, whatever their shape: the fields the transaction reads, and the insert of one. */
export interface RowSource<Rows> {
  count(rows: Rows): number;
  productId(rows: Rows, i: number): string;
  apiKeyId(rows: Rows, i: number): string | null;
  source(rows: Rows, i: number): string;
  externalId(rows: Rows, i: number): string | null;
  subjectId(rows: Rows, i: number): string;
  canonicalName(rows: Rows, i: number): string;
  eventType(rows: Rows, i: number): string;
  action(rows: Rows, i: number): string;
  run: RunInsert<Rows>;
}

const getters = EVENT_COLUMNS.map((column) => column.value);

/** Rows as the ingest service gives them. */
export const EVENT_INSERTS: RowSource<EventInsert[]> = {
  count: (rows) => rows.length,
  productId: (rows, i) => rows[i]!.productId,
  apiKeyId: (rows, i) => rows[i]!.apiKeyId,
  source: (rows, i) => rows[i]!.source,
  externalId: (rows, i) => rows[i]!.externalId,
  subjectId: (rows, i) => rows[i]!.subjectId,
  canonicalName: (rows, i) => rows[i]!.canonicalName,
  eventType: (rows, i) => rows[i]!.eventType,
  action: (rows, i) => rows[i]!.action,
  run: compileRunInsert((c) => `v${c}(rows[i])`, getters),
};

/** How many values a row takes in a flat array (`flattenRows`). */
export const ROW_WIDTH = EVENT_COLUMNS.length;
const at = (field: string) => EVENT_COLUMNS.findIndex((column) => column.field === field);
const [PRODUCT, KEY, SOURCE, EXTERNAL, SUBJECT, NAME, TYPE, ACTION] = [
  'productId',
  'apiKeyId',
  'source',
  'externalId',
  'subjectId',
  'canonicalName',
  'eventType',
  'action',
].map(at) as [number, number, number, number, number, number, number, number];

/** Rows as one flat array of their column values, in the table's order: what crosses to the writer thread
 *  (one array of strings clones faster than an object per row with its keys). */
export function flattenRows(rows: readonly EventInsert[]): Array<string | null> {
  const flat: Array<string | null> = new Array<string | null>(rows.length * ROW_WIDTH);
  let o = 0;
  for (const row of rows) for (const value of getters) flat[o++] = value(row);
  return flat;
}

export const FLAT_ROWS: RowSource<Array<string | null>> = {
  count: (rows) => rows.length / ROW_WIDTH,
  productId: (rows, i) => rows[i * ROW_WIDTH + PRODUCT]!,
  apiKeyId: (rows, i) => rows[i * ROW_WIDTH + KEY] ?? null,
  source: (rows, i) => rows[i * ROW_WIDTH + SOURCE]!,
  externalId: (rows, i) => rows[i * ROW_WIDTH + EXTERNAL]!,
  subjectId: (rows, i) => rows[i * ROW_WIDTH + SUBJECT]!,
  canonicalName: (rows, i) => rows[i * ROW_WIDTH + NAME]!,
  eventType: (rows, i) => rows[i * ROW_WIDTH + TYPE]!,
  action: (rows, i) => rows[i * ROW_WIDTH + ACTION]!,
  run: compileRunInsert((c) => `rows[i * ${ROW_WIDTH} + ${c}]`, []),
};

/** Where a commit's subjects go: the subject index in-process, or a list sent back from the writer thread. */
export interface SubjectSink {
  /** At the start of the transaction, with the last position given so far. */
  catchUp(last: number): void;
  hashSubject(productId: string, subjectId: string): number;
  /** After the commit: (hash, position) pairs in position order, and the last position given. */
  committed(pairs: Array<[number, number]>, last: number): void;
}

/** Per row: undefined when it was stored, else the stored original it duplicates. */
export type RowOutcomes = Array<EventRow | undefined>;

/**
 * The write transaction of one commit, for rows of any shape: `keys` the idempotency keys (event-keys.ts),
 * `subjects` where the subject hashes go. One transaction, holding the write lock from its start (so that catchUp
 * sees every other writer's rows); the keys and subjects it stored reach the tails only once it committed (a read
 * by subject that runs after the commit finds them).
 */
export function eventTransaction<Rows>(
  raw: BetterSqlite3.Database,
  keys: EventKeys,
  subjects: SubjectSink,
  shape: RowSource<Rows>,
): (rows: Rows) => RowOutcomes {
  const insert = raw.prepare(INSERT_SQL);
  const byPosition = raw.prepare(`SELECT ${SQLITE_EVENT_COLUMN_LIST} FROM events WHERE position = ?`);
  const nameGet = raw.prepare('SELECT number, event_type, action FROM event_names WHERE canonical_name = ?');
  const nameAdd = raw.prepare('INSERT INTO event_names (canonical_name, event_type, action) VALUES (?, ?, ?)');
  const productNumber = raw.prepare('SELECT number FROM product_numbers WHERE product_id = ?').pluck();
  const keyNumber = raw.prepare('SELECT number FROM key_numbers WHERE key_id = ?').pluck();

  // A product's or key's number, looked up once per commit and id (a commit's rows nearly all share both): no cache
  // across commits, so a number is always the one the database holds when the row is written.
  const numberOf = (known: Map<string, number | null>, lookup: BetterSqlite3.Statement, id: string) => {
    let number = known.get(id);
    if (number === undefined) {
      number = (lookup.get(id) as number | undefined) ?? null;
      known.set(id, number);
    }
    return number;
  };

  // A name's number and its type and action in `event_names`, numbered by the first event that has it. Looked up
  // once per commit and name (no cache across commits: a rolled-back commit takes its numbers with it).
  interface NameEntry {
    number: number;
    eventType: string;
    action: string;
    /** What a row whose type and action are the name's stores. */
    same: StoredName;
  }
  const nameEntry = (names: Map<string, NameEntry>, canonicalName: string, eventType: string, action: string) => {
    let entry = names.get(canonicalName);
    if (entry === undefined) {
      const row = nameGet.get(canonicalName) as { number: number; event_type: string; action: string } | undefined;
      const number =
        row === undefined ? Number(nameAdd.run(canonicalName, eventType, action).lastInsertRowid) : row.number;
      const known = row === undefined ? { eventType, action } : { eventType: row.event_type, action: row.action };
      entry = { number, ...known, same: { number, eventType: null, action: null } };
      names.set(canonicalName, entry);
    }
    return entry;
  };
  const storedName = (names: Map<string, NameEntry>, rows: Rows, i: number): StoredName => {
    const eventType = shape.eventType(rows, i);
    const action = shape.action(rows, i);
    const entry = nameEntry(names, shape.canonicalName(rows, i), eventType, action);
    if (entry.eventType === eventType && entry.action === action) return entry.same;
    return {
      number: entry.number,
      eventType: entry.eventType === eventType ? null : eventType,
      action: entry.action === action ? null : action,
    };
  };

  // Idempotency (event-keys.ts): a key's candidate positions (this transaction's own rows first, then the tail,
  // the merging map and event_keys) are read back and compared; the first that matches is the original.
  const original = (rows: Rows, i: number, candidates: number[]): EventRow | undefined => {
    for (const position of candidates) {
      const stored = byPosition.get(position) as EventRow | undefined;
      if (
        stored !== undefined &&
        externalIdText(stored.external_id as string | Uint8Array | null) === shape.externalId(rows, i) &&
        stored.source === shape.source(rows, i) &&
        stored.product_id === shape.productId(rows, i)
      )
        return stored;
    }
    return undefined;
  };

  const writeAll = raw.transaction(
    (
      rows: Rows,
      added: Array<[number, number]>,
      addedSubjects: Array<[number, number]>,
      last: { position: number },
    ) => {
      subjects.catchUp(keys.catchUp());
      const mine = new Map<number, number[]>();
      const names = new Map<string, NameEntry>();
      const products = new Map<string, number | null>();
      const apiKeys = new Map<string, number | null>();
      const numbers: StoredNumbers = { product: null, key: null };
      const count = shape.count(rows);
      const outcomes: RowOutcomes = new Array<EventRow | undefined>(count);
      for (let i = 0; i < count; i++) {
        const productId = shape.productId(rows, i);
        const externalId = shape.externalId(rows, i);
        let h: number | undefined;
        const subjectHash = subjects.hashSubject(productId, shape.subjectId(rows, i));
        if (externalId !== null) {
          h = keys.hash(productId, shape.source(rows, i), externalId);
          const stored = original(rows, i, keys.candidates(h, mine.get(h)?.slice()));
          if (stored !== undefined) {
            outcomes[i] = stored;
            continue;
          }
        }
        const apiKeyId = shape.apiKeyId(rows, i);
        numbers.product = numberOf(products, productNumber, productId);
        numbers.key = apiKeyId === null ? null : numberOf(apiKeys, keyNumber, apiKeyId);
        const position = Number(
          shape.run(insert, rows, i, h ?? null, subjectHash, storedName(names, rows, i), numbers).lastInsertRowid,
        );
        last.position = position;
        addedSubjects.push([subjectHash, position]);
        if (h !== undefined) {
          added.push([h, position]);
          const same = mine.get(h);
          if (same === undefined) mine.set(h, [position]);
          else same.push(position);
        }
      }
      return outcomes;
    },
  );

  return (rows) => {
    const added: Array<[number, number]> = [];
    const addedSubjects: Array<[number, number]> = [];
    const last = { position: 0 };
    const outcomes = writeAll.immediate(rows, added, addedSubjects, last);
    keys.committed(added, last.position);
    subjects.committed(addedSubjects, last.position);
    return outcomes;
  };
}

/** The subject index itself as the sink (in-process). */
export function subjectIndexSink(subjects: EventKeys): SubjectSink {
  return {
    catchUp: (last) => void subjects.catchUp(last),
    hashSubject: (productId, subjectId) => subjects.hashSubject(productId, subjectId),
    committed: (pairs, last) => subjects.committed(pairs, last),
  };
}

/** The rows' outcomes for the port: a stored row is the row given, a duplicate the original read back. */
export function insertOutcomes(rows: readonly EventInsert[], outcomes: RowOutcomes): InsertOutcome[] {
  return rows.map((row, i): InsertOutcome => {
    const stored = outcomes[i];
    return stored === undefined
      ? { status: 'created', event: row }
      : { status: 'duplicate', event: eventFromRow(stored) };
  });
}

/**
 * `keys`: the idempotency keys, `subjects`: the subject index (both event-keys.ts). `walSync`: commit with synchronous=NORMAL and resolve only after an fdatasync of the WAL on Node's thread
 * pool (wal-sync.ts), so the event loop never waits for the disk; without it, the connection's own
 * synchronous setting applies (FULL syncs inside COMMIT, on the event loop).
 */
export function sqliteEventWriter(
  db: Kysely<Database>,
  raw: BetterSqlite3.Database,
  indexes: { keys: EventKeys; subjects: EventKeys },
  walSync?: WalSync,
) {
  const write = eventTransaction(raw, indexes.keys, subjectIndexSink(indexes.subjects), EVENT_INSERTS);
  // The connection stays FULL for every other write (identity, keys, …); only these commits skip the sync
  // that `walSync` then runs.
  const unsynced = walSync === undefined ? undefined : withoutCommitSync(raw, 'FULL');
  return {
    async insertMany(rows: EventInsert[]): Promise<InsertOutcome[]> {
      if (rows.length === 0) return [];
      const outcomes = await db
        .connection()
        .execute(async () => (unsynced === undefined ? write(rows) : unsynced(() => write(rows))));
      // Also when every row was a duplicate: the row found may be another request's, committed a moment ago
      // and not yet synced, and "already stored" must be true when it is said.
      await walSync?.sync();
      return insertOutcomes(rows, outcomes);
    },
  };
}
