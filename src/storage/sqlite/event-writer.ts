// The SQLite ingest path. Hand-written prepared statements instead of Kysely: this runs for every
// event, and better-sqlite3's cached statements skip query compilation and the async round trips.
// It runs inside Kysely's connection mutex so it never lands inside another open transaction.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';
import { EVENT_COLUMN_LIST, EVENT_COLUMNS, eventFromRow, type EventRow } from '../event-columns.js';
import type { EventInsert, InsertOutcome } from '../types.js';
import type { EventKeys } from './event-keys.js';
import { withoutCommitSync, type WalSync } from './wal-sync.js';

// The statement's arguments: the table's columns (event-columns.ts), then the row's two hashes (event-keys.ts; a
// deleted row's note takes them from it, for the sweep).
const PLACEHOLDERS = EVENT_COLUMNS.map(() => '?').join(', ');
const INSERT_SQL = `INSERT INTO events (${EVENT_COLUMN_LIST}, key_hash, subject_hash) VALUES (${PLACEHOLDERS}, ?, ?)`;

type RunInsert = (
  statement: BetterSqlite3.Statement,
  row: EventInsert,
  keyHash: number | null,
  subjectHash: number,
) => BetterSqlite3.RunResult;

/**
 * `statement.run(value0(row), …, keyHash, subjectHash)` with the table's getters, compiled once: each getter is
 * then a call site of its own and the arguments go straight into the call, where a loop filling one array of
 * arguments and spreading it into the call cost every event measurably more. The source holds only indexes.
 */
function compileRunInsert(values: ReadonlyArray<(row: EventInsert) => string | null>): RunInsert {
  const names = values.map((_, i) => `v${i}`);
  const call = `statement.run(${names.map((name) => `${name}(row)`).join(', ')}, keyHash, subjectHash)`;
  const source = `'use strict';\nconst [${names.join(', ')}] = values;\nreturn (statement, row, keyHash, subjectHash) => ${call};`;
  return new Function('values', source)(values) as RunInsert;
}
const runInsert = compileRunInsert(EVENT_COLUMNS.map((column) => column.value));

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
  const { keys, subjects } = indexes;
  const insert = raw.prepare(INSERT_SQL);
  const byPosition = raw.prepare(`SELECT ${EVENT_COLUMN_LIST} FROM events WHERE position = ?`);

  // Idempotency (event-keys.ts): a key's candidate positions (this transaction's own rows first, then the tail,
  // the merging map and event_keys) are read back and compared; the first that matches is the original.
  const original = (row: EventInsert, candidates: number[]): EventRow | undefined => {
    for (const position of candidates) {
      const stored = byPosition.get(position) as EventRow | undefined;
      if (
        stored !== undefined &&
        stored.external_id === row.externalId &&
        stored.source === row.source &&
        stored.product_id === row.productId
      )
        return stored;
    }
    return undefined;
  };

  const writeAll = raw.transaction(
    (
      rows: EventInsert[],
      added: Array<[number, number]>,
      addedSubjects: Array<[number, number]>,
      last: { position: number },
    ): InsertOutcome[] => {
      subjects.catchUp(keys.catchUp());
      const mine = new Map<number, number[]>();
      return rows.map((row): InsertOutcome => {
        let h: number | undefined;
        const subjectHash = subjects.hashSubject(row.productId, row.subjectId);
        if (row.externalId !== null) {
          h = keys.hash(row.productId, row.source, row.externalId);
          const stored = original(row, keys.candidates(h, mine.get(h)?.slice()));
          if (stored !== undefined) return { status: 'duplicate', event: eventFromRow(stored) };
        }
        const result = runInsert(insert, row, h ?? null, subjectHash);
        const position = Number(result.lastInsertRowid);
        last.position = position;
        addedSubjects.push([subjectHash, position]);
        if (h !== undefined) {
          added.push([h, position]);
          const same = mine.get(h);
          if (same === undefined) mine.set(h, [position]);
          else same.push(position);
        }
        return { status: 'created', event: row };
      });
    },
  );

  /** One transaction, holding the write lock from its start (so that catchUp sees every other writer's rows);
   *  the keys and subjects it stored reach the tails only once it committed, in the same turn of the connection's
   *  lock (a read by subject that runs after the commit finds them). */
  const write = (rows: EventInsert[]): InsertOutcome[] => {
    const added: Array<[number, number]> = [];
    const addedSubjects: Array<[number, number]> = [];
    const last = { position: 0 };
    const outcomes = writeAll.immediate(rows, added, addedSubjects, last);
    keys.committed(added, last.position);
    subjects.committed(addedSubjects, last.position);
    return outcomes;
  };

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
      return outcomes;
    },
  };
}
