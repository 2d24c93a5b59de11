// The SQLite backend: opens the file with better-sqlite3 (one connection, Kysely's mutex serialising its use),
// tunes it, starts the WAL's helpers, and says what the database can do (the port's capabilities).
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect, sql } from 'kysely';
import type { Backend, ReadyBackend } from '../backend.js';
import { retryingBusy } from '../busy-retry.js';
import type { Database } from '../database.js';
import { destinationStore } from '../destination-store.js';
import { eventReads } from '../event-reads.js';
import type { CommitPolicy, DeletePacing, StorageCapabilities } from '../types.js';
import { startCheckpointerOnDemand, type Checkpointer, type CheckpointHandOff } from './checkpointer.js';
import { sqliteEventDeletes } from './event-deletes.js';
import { EventKeys, registerEventKeyFunction } from './event-keys.js';
import { sqliteEventWriting, type EventWriting } from './event-writing.js';
import { sqliteStoreDialect } from './store-dialect.js';
import { sqliteBackup } from './backup.js';
import { WalSync } from './wal-sync.js';
import type { WriterSetup } from './writer-thread.js';
import { tune } from './tune.js';

export interface SqliteOptions {
  /** SQLite `synchronous`: `full` fsyncs every commit (the default), `normal` may lose the last commits on power loss. */
  sqliteSynchronous?: 'full' | 'normal';
  /** SQLite page cache of the server's connection, in KiB (default SQLITE_CACHE_KIB). */
  sqliteCacheKib?: number;
  /** SQLite file: checkpoint the WAL from a worker thread instead of in the committing call (default true;
   *  sqlite/checkpointer.ts). */
  sqliteCheckpointThread?: boolean;
  /** SQLite file with synchronous FULL: event commits sync the WAL on Node's thread pool, off the event loop,
   *  before they are acknowledged (default true; sqlite/wal-sync.ts). false: inside COMMIT, on the loop. */
  sqliteSyncOffLoop?: boolean;
  /** SQLite: idempotency keys held in memory before they are merged into `event_keys` (sqlite/event-keys.ts). */
  sqliteEventKeysTail?: number;
  /**
   * SQLite `busy_timeout` in ms (default 5000). 0: a statement that finds the write lock taken fails at once
   * with SQLITE_BUSY instead of sleeping in SQLite's busy handler (1, 2, 5, 10 … ms, synchronously, its
   * thread's event loop standing still), and the destination store's calls are retried on the event loop
   * (busy-retry.ts). Only that store retries: this is for the delivery worker's connection, which uses no other.
   */
  sqliteBusyTimeoutMs?: number;
  /**
   * SQLite file: events stored in-process before the writer thread takes over the event commits (0: from the
   * first; Infinity, the default: never; sqlite/writer-thread.ts).
   */
  sqliteWriterThreadAfter?: number;
}

export { SQLITE_CACHE_KIB } from './tune.js';

/**
 * A SQLite commit runs on the event loop, so a huge group stalls every other request while it lasts; 400
 * kept the batch p99 under a second at the same throughput (docs/design.md, "SQLite's commit and delete constants").
 */
const SQLITE_MAX_COMMIT_EVENTS = 400;

/**
 * SQLite commits in flight: the writes themselves run one after another on the event loop, but a commit's
 * WAL sync runs on the thread pool (sqlite/wal-sync.ts), and meanwhile the next group may be written,
 * so that one sync covers both; it is, once a quarter of a full group waits: overlapping always made single
 * events slower (more, smaller commits), so the threshold keeps them in one larger commit (docs/design.md,
 * "SQLite's commit and delete constants").
 */
const SQLITE_COMMITS_IN_FLIGHT = 2;

export const SQLITE_COMMITS: CommitPolicy = {
  maxItems: SQLITE_MAX_COMMIT_EVENTS,
  maxInFlight: SQLITE_COMMITS_IN_FLIGHT,
  minItemsToOverlap: SQLITE_MAX_COMMIT_EVENTS / 4,
};

/**
 * A delete holds the one connection ingest's commits also need, so ingest waits behind a batch for as long as it
 * lasts (governance.md §3–4: ingest p99 within 2× while background deletes run): batches of about 4 ms, then a rest
 * three times as long (a quarter of the connection's time at most goes to the background work): the pair that
 * kept ingest's p99 within 2× of the pairs measured (docs/design.md, "SQLite's commit and delete constants").
 */
export const SQLITE_DELETE_PACING: DeletePacing = { initial: 200, min: 20, max: 2000, targetMs: 4, restRatio: 3 };

const UNAVAILABLE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_IOERR', 'SQLITE_FULL']);

function isSqliteUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current !== null && typeof current === 'object' && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && UNAVAILABLE.has(code)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/** The WAL's helpers of a file: its sync off the event loop (wal-sync.ts) and the checkpoint thread (checkpointer.ts). */
function walHelpers(
  raw: BetterSqlite3.Database,
  path: string,
  options: SqliteOptions,
  handOff: CheckpointHandOff,
): { walSync?: WalSync; checkpointer?: Checkpointer } {
  if (path === ':memory:') return {};
  const synchronous = options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL';
  const walSync =
    synchronous === 'FULL' && options.sqliteSyncOffLoop !== false ? new WalSync(`${path}-wal`) : undefined;
  if (options.sqliteCheckpointThread === false) return walSync === undefined ? {} : { walSync };
  const checkpointer = startCheckpointerOnDemand(
    raw,
    path,
    synchronous,
    walSync === undefined ? { handOff } : { syncWal: () => walSync.sync(), handOff },
  );
  return { ...(walSync === undefined ? {} : { walSync }), checkpointer };
}

/** `path`: a file (its directory is created) or `:memory:`. */
export function openSqliteBackend(path: string, options: SqliteOptions = {}): Backend {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const raw = new BetterSqlite3(path);
  tune(raw, options);
  // Before migrations: the backfill of event_keys and the delete trigger call it.
  registerEventKeyFunction(raw);
  // Filled once the events' writer exists: the checkpoint thread's restart copy runs where the events are written.
  const handOff: CheckpointHandOff = {};
  const { walSync, checkpointer } = walHelpers(raw, path, options, handOff);
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
  return {
    dialect: 'sqlite',
    db,
    ready: async () => readySqlite(db, raw, { path, options, handOff }, walSync, checkpointer),
  };
}

/** The writer thread's connection, as the server's is opened; undefined for an in-memory database. */
function writerSetup(path: string, options: SqliteOptions): WriterSetup | undefined {
  if (path === ':memory:') return undefined;
  return {
    path,
    ...(options.sqliteSynchronous === undefined ? {} : { sqliteSynchronous: options.sqliteSynchronous }),
    ...(options.sqliteCacheKib === undefined ? {} : { sqliteCacheKib: options.sqliteCacheKib }),
    ...(options.sqliteBusyTimeoutMs === undefined ? {} : { sqliteBusyTimeoutMs: options.sqliteBusyTimeoutMs }),
    ...(options.sqliteEventKeysTail === undefined ? {} : { tailKeys: options.sqliteEventKeysTail }),
    checkpointThread: options.sqliteCheckpointThread !== false,
    syncOffLoop: options.sqliteSynchronous !== 'normal' && options.sqliteSyncOffLoop !== false,
  };
}

function readySqlite(
  db: Kysely<Database>,
  raw: BetterSqlite3.Database,
  file: { path: string; options: SqliteOptions; handOff: CheckpointHandOff },
  walSync: WalSync | undefined,
  checkpointer: Checkpointer | undefined,
): ReadyBackend {
  const { options, handOff } = file;
  // Both made with the writer, once the schema is migrated (their statements name its tables); reads and erasures
  // use the subject index too.
  const index = (kind: 'keys' | 'subjects') =>
    new EventKeys(raw, {
      kind,
      exclusive: (work) => db.connection().execute(async () => work()),
      synchronous: options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL',
      ...(options.sqliteEventKeysTail === undefined ? {} : { tailKeys: options.sqliteEventKeysTail }),
      ...(checkpointer === undefined ? {} : { roomInWal: checkpointer.roomInWal }),
      onMergeError: (error) =>
        process.emitWarning(`merging SQLite event ${kind} failed (tried again later): ${(error as Error).message}`),
    });
  const subjects = index('subjects');
  const writing = sqliteEventWriting({
    db,
    raw,
    makeKeys: () => index('keys'),
    subjects,
    walSync,
    thread: writerSetup(file.path, options),
    after: options.sqliteWriterThreadAfter ?? Infinity,
  });
  handOff.copy = () => writing.thread()?.checkpoint();
  handOff.fellBack = () =>
    void writing
      .thread()
      ?.autocheckpoint(1000)
      .catch(() => {});
  const destinations = destinationStore(db, 'sqlite', raw);
  return {
    name: 'sqlite',
    capabilities: capabilities(db, raw.name, writing, subjects, checkpointer),
    storeDialect: sqliteStoreDialect(),
    events: { insertMany: (rows) => writing.insertMany(rows), ...eventReads(db, 'sqlite', raw, subjects) },
    destinations: options.sqliteBusyTimeoutMs === 0 ? retryingBusy(destinations) : destinations,
    eventDeletes: sqliteEventDeletes(db, subjects, checkpointer?.roomInWal),
    async ping() {
      await sql`SELECT 1`.execute(db);
    },
    isUnavailable: isSqliteUnavailable,
    async close() {
      await writing.close();
      await subjects.stop();
      await checkpointer?.stop();
      await walSync?.close();
      await db.destroy();
    },
  };
}

/**
 * With the writer thread a commit no longer holds the event loop, and its latency (a hand-over each way) is what
 * bounds a connection's rate: more commits in flight keep the thread busy. Read at every group commit, so it
 * follows the thread's start.
 */
const THREAD_COMMITS_IN_FLIGHT = 4;

function commitPolicy(writing: EventWriting): CommitPolicy {
  return {
    maxItems: SQLITE_COMMITS.maxItems,
    get maxInFlight() {
      return writing.thread() === undefined ? SQLITE_COMMITS.maxInFlight : THREAD_COMMITS_IN_FLIGHT;
    },
    minItemsToOverlap: SQLITE_COMMITS.minItemsToOverlap,
  };
}

function capabilities(
  db: Kysely<Database>,
  file: string,
  writing: EventWriting,
  subjects: EventKeys,
  checkpointer: Checkpointer | undefined,
): StorageCapabilities {
  return {
    commits: commitPolicy(writing),
    backup: sqliteBackup(file),
    deletePacing: SQLITE_DELETE_PACING,
    telemetry: {
      ...(checkpointer === undefined ? {} : { observeCheckpoints: checkpointer.observe }),
      eventKeyStats: () => writing.keyStats(),
      eventSubjectStats: () => subjects.stats(),
    },
    eventIndexes: {
      warm: () => writing.warm(),
      settle: () => writing.settle(),
    },
    async prepareDeliveryWorker() {
      // The worker's connection never checkpoints in its commits: the server's checkpoint thread does
      // (sqlite/checkpointer.ts), and the worker opens its storage without one.
      await sql`PRAGMA wal_autocheckpoint = 0`.execute(db);
    },
  };
}
