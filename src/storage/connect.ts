// The one place that knows which database adapter is in use.
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import type { Database } from './database.js';
import { apiKeyStore, legacyUsageStore, productStore } from './core-stores.js';
import { eventReads } from './event-reads.js';
import { rejectionStore } from './rejection-store.js';
import { governanceStore } from './governance-store.js';
import { identityStore } from './identity-store.js';
import { migrate, type MigrationReport } from './migrate.js';
import { startCheckpointerOnDemand, type Checkpointer } from './sqlite/checkpointer.js';
import { sqliteEventWriter } from './sqlite/event-writer.js';
import { WalSync } from './sqlite/wal-sync.js';
import { EventKeys, registerEventKeyFunction } from './sqlite/event-keys.js';
import { postgresEventWriter } from './postgres/event-writer.js';
import { trafficStore } from './traffic-store.js';
import { destinationStore } from './destination-store.js';
import { erasureStore } from './erasure-store.js';
import { sqliteStoreDialect } from './sqlite/store-dialect.js';
import { postgresStoreDialect } from './postgres/store-dialect.js';
import { sqliteEventDeletes } from './sqlite/event-deletes.js';
import { postgresEventDeletes } from './postgres/event-deletes.js';
import {
  checkWritableTarget,
  DatabaseUrlError,
  describeHosts,
  postgresSettings,
  type PostgresConnectionSettings,
} from './postgres/connection-url.js';
import { isPostgresUnavailable } from './postgres/errors.js';
import { retryingBusy } from './busy-retry.js';
import { createFailoverPool } from './postgres/pool.js';
import { readWalStats } from './postgres/wal-stats.js';
import { ensureEventPartitions, PARTITION_MAINTENANCE_INTERVAL_MS } from './postgres/event-partitions.js';
import type {
  CheckpointEvent,
  Dialect,
  EventKeyStats,
  PoolStats,
  PostgresWalStats,
  ReplicationStatus,
  Storage,
} from './types.js';

export interface OpenStorageOptions {
  /** SQLite `synchronous`: `full` fsyncs every commit (the default), `normal` may lose the last commits on power loss. */
  sqliteSynchronous?: 'full' | 'normal';
  /** PostgreSQL schema to use (created if missing); tests use one schema per run. The URL may name it
   *  instead: `postgres://…/db?schema=name` (postgres/connection-url.ts). */
  postgresSchema?: string;
  /** Connections in this process's pool (default 10). */
  postgresPoolSize?: number;
  /** PostgreSQL: client-side deadline per query once start-up (migrations) is done; 0: none. */
  queryTimeoutMs?: number;
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
  /** Apply pending migrations before returning (default true). */
  migrate?: boolean;
}

export interface OpenedStorage extends Storage {
  readonly db: Kysely<Database>;
  readonly migration: MigrationReport | undefined;
  /** True once close() was called: every later query fails, and that means "unavailable", not a bug. */
  readonly closed: boolean;
  /** PostgreSQL only: the connection pool's state, for metrics. */
  readonly poolStats?: () => PoolStats;
  /** PostgreSQL only: how the primary replicates, as this pool's sessions see it (metrics). */
  readonly replicationStatus?: () => Promise<ReplicationStatus>;
  /** PostgreSQL only: the server's checkpoints and WAL written (metrics, and the checkpoint advice in the log). */
  readonly walStats?: () => Promise<PostgresWalStats>;
  /**
   * PostgreSQL only: a small pool of its own for the shared rate limiter (it follows the primary like
   * the main one). Its sessions commit with synchronous_commit=off: a counter lost in a crash costs a
   * few requests of budget, while waiting for a synchronous standby on every request would cost latency.
   */
  readonly rateLimitPool?: () => pg.Pool;
  /** SQLite file with the checkpoint thread: calls `listener` after each WAL checkpoint (metrics). */
  readonly observeCheckpoints?: (listener: (event: CheckpointEvent) => void) => void;
  /** SQLite: the idempotency keys held in memory and the merges so far (sqlite/event-keys.ts). */
  readonly eventKeyStats?: () => EventKeyStats;
  /** SQLite: the subject index's entries in memory, merges and sweeps (the same figures). */
  readonly eventSubjectStats?: () => EventKeyStats;
  /**
   * SQLite, for the server at start: rebuilds the key and subject tails from the rows after the last merges now
   * (instead of in the first write) and starts building the key filter in the background; resolves once the
   * filter is built (sqlite/event-keys.ts). Until then every keyed event probes event_keys.
   */
  readonly warmEventIndexes?: () => Promise<void>;
  /** SQLite: resolves once no merge (move, sweep) of either index runs or is due (benches). */
  readonly settleEventIndexes?: () => Promise<void>;
}

const PARTITION_MAINTENANCE_RETRY_MS = 60_000;

function indexStats(index: EventKeys | undefined): EventKeyStats {
  return {
    held: index?.held ?? 0,
    merges: index?.merges ?? 0,
    mergeSeconds: index?.mergeSeconds ?? 0,
    moves: index?.moves ?? 0,
    swept: index?.swept ?? 0,
    sweepSeconds: index?.sweepSeconds ?? 0,
    busySeconds: index?.busySeconds ?? 0,
    filterBytes: index?.filterBytes ?? 0,
  };
}

/** SQLite's page cache (SQLite's own default: 2,000 KiB). */
export const SQLITE_CACHE_KIB = 2000;

const SQLITE_UNAVAILABLE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_IOERR', 'SQLITE_FULL']);

function isSqliteUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current !== null && typeof current === 'object' && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && SQLITE_UNAVAILABLE.has(code)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

export function dialectOf(url: string): Dialect {
  return url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
}

/**
 * Checks a database URL without connecting (the config does at load time, so a bad URL fails before
 * anything starts): a PostgreSQL URL must parse and must not ask for a read-only session. Throws
 * DatabaseUrlError. The config calls this rather than the adapter's parser: outside storage, only
 * this module knows the adapters.
 */
export function checkDatabaseUrl(url: string): void {
  if (dialectOf(url) === 'postgres') checkWritableTarget(postgresSettings(url));
}

/** `sqlite:./data/inlet.db` → absolute path; `sqlite::memory:` stays in memory. */
export function sqlitePath(url: string): string {
  const path = url.slice('sqlite:'.length).replace(/^\/\//, '');
  return path === ':memory:' ? path : resolve(path);
}

function postgresTypes() {
  // Counts and sums come back as numbers and dates as plain YYYY-MM-DD strings, on this pool only.
  const parsers: Record<number, (value: string) => unknown> = {
    20: (v) => Number(v), // int8
    1700: (v) => Number(v), // numeric
    1082: (v) => v, // date
  };
  return {
    getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
      parsers[oid] ?? pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
  };
}

export async function openStorage(url: string, options: OpenStorageOptions = {}): Promise<OpenedStorage> {
  const dialect = dialectOf(url);
  let db: Kysely<Database>;
  let makeWriter: () => Storage['events']['insertMany'];
  let poolStats: (() => PoolStats) | undefined;
  let replicationStatus: (() => Promise<ReplicationStatus>) | undefined;
  let walStats: (() => Promise<PostgresWalStats>) | undefined;
  let pool: pg.Pool | undefined;
  let rateLimitPool: (() => pg.Pool) | undefined;
  let limiterPool: pg.Pool | undefined;
  let maintenancePool: pg.Pool | undefined;
  let maintenanceDatabase: (() => Kysely<Database>) | undefined;
  let maintenanceDb: Kysely<Database> | undefined;
  let postgresHosts = '';
  // No deadline while migrations run (an index build on a big table may take minutes); set after them.
  const queryDeadline: { ms?: number } = {};
  let rawSqlite: BetterSqlite3.Database | undefined;
  let checkpointer: Checkpointer | undefined;
  let walSync: WalSync | undefined;
  let eventKeys: EventKeys | undefined;
  let eventSubjects: EventKeys | undefined;

  if (dialect === 'sqlite') {
    const path = sqlitePath(url);
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    const raw = new BetterSqlite3(path);
    rawSqlite = raw;
    raw.pragma('journal_mode = WAL');
    raw.pragma(`synchronous = ${options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
    raw.pragma(`busy_timeout = ${options.sqliteBusyTimeoutMs ?? 5000}`);
    raw.pragma('foreign_keys = ON');
    // Erasure (governance.md §3): a deleted row's bytes are overwritten with zeros, not left in free
    // space. Costs extra writes on deletes only (erasure, retention, sweeps); inserts are unaffected.
    raw.pragma('secure_delete = ON');
    raw.pragma(`cache_size = -${options.sqliteCacheKib ?? SQLITE_CACHE_KIB}`);
    // Before migrations: the backfill of event_keys and the delete trigger call it.
    registerEventKeyFunction(raw);
    if (path !== ':memory:' && options.sqliteSynchronous !== 'normal' && options.sqliteSyncOffLoop !== false) {
      walSync = new WalSync(`${path}-wal`);
    }
    if (path !== ':memory:' && options.sqliteCheckpointThread !== false) {
      const wal = walSync;
      checkpointer = startCheckpointerOnDemand(
        raw,
        path,
        options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL',
        wal === undefined ? {} : { syncWal: () => wal.sync() },
      );
    }
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
    const kysely = db;
    // Both made with the writer, once the schema is migrated (their statements name its tables); reads and erasures
    // use the subject index too.
    const index = (kind: 'keys' | 'subjects') =>
      new EventKeys(raw, {
        kind,
        exclusive: (work) => kysely.connection().execute(async () => work()),
        synchronous: options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL',
        ...(options.sqliteEventKeysTail === undefined ? {} : { tailKeys: options.sqliteEventKeysTail }),
        ...(checkpointer === undefined ? {} : { roomInWal: checkpointer.roomInWal }),
        onMergeError: (error) =>
          process.emitWarning(`merging SQLite event ${kind} failed (tried again later): ${(error as Error).message}`),
      });
    makeWriter = () => {
      eventKeys = index('keys');
      eventSubjects = index('subjects');
      return sqliteEventWriter(kysely, raw, { keys: eventKeys, subjects: eventSubjects }, walSync).insertMany;
    };
  } else {
    let settings: PostgresConnectionSettings;
    try {
      settings = postgresSettings(url, options.postgresSchema);
      checkWritableTarget(settings);
    } catch (error) {
      if (error instanceof DatabaseUrlError) throw new DatabaseUrlError(`INLET_DATABASE_URL: ${error.message}`);
      throw error;
    }
    const schema = settings.schema;
    // One code path for one host and many: the pool connects only to a host that matches
    // target_session_attrs and moves on when it fails or is demoted (postgres/pool.ts).
    const created = createFailoverPool(settings, {
      max: options.postgresPoolSize ?? 10,
      queryTimeoutMs: () => queryDeadline.ms,
      types: postgresTypes(),
      ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
    });
    pool = created.pool;
    postgresHosts = describeHosts(settings);
    rateLimitPool = () => {
      limiterPool ??= createFailoverPool(settings, {
        max: 4,
        queryTimeoutMs: () => queryDeadline.ms,
        options: [schema === undefined ? '' : `-c search_path=${schema}`, '-c synchronous_commit=off'].join(' ').trim(),
      }).pool;
      limiterPool.on('error', () => {});
      return limiterPool;
    };
    // Erasure's VACUUM (erasure-store.ts) on a connection of its own without the query deadline: a
    // vacuum of a large table outlasts it, and a deadline would mark the primary silent (pool.ts).
    // Retention's partition drop (a count of a whole month under lock_timeout) uses it too.
    maintenanceDatabase = () => {
      if (maintenanceDb === undefined) {
        maintenancePool = createFailoverPool(settings, {
          max: 1,
          types: postgresTypes(),
          ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
        }).pool;
        maintenancePool.on('error', () => {});
        maintenanceDb = new Kysely<Database>({ dialect: new PostgresDialect({ pool: maintenancePool }) });
      }
      return maintenanceDb;
    };
    if (schema !== undefined) {
      try {
        await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      } catch (error) {
        // CREATE SCHEMA IF NOT EXISTS is not atomic: an instance starting at the same moment may win.
        if (!['42P06', '23505'].includes((error as { code?: string }).code ?? '')) {
          await pool.end().catch(() => {});
          throw error;
        }
      }
    }
    // An idle client that loses its connection must not crash the process; the next query reconnects.
    pool.on('error', () => {});
    const max = options.postgresPoolSize ?? 10;
    const stats = pool;
    poolStats = () => ({ max, open: stats.totalCount, idle: stats.idleCount, waiting: stats.waitingCount });
    replicationStatus = async () => {
      const { rows } = await stats.query<{
        names: string;
        commit: string;
        sync_state: string | null;
        standby: boolean;
      }>(
        "SELECT current_setting('synchronous_standby_names') AS names, current_setting('synchronous_commit') AS commit, r.sync_state, r.pid IS NOT NULL AS standby " +
          'FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication AS r ON true',
      );
      return {
        synchronousStandbyNames: rows[0]?.names ?? '',
        synchronousCommit: rows[0]?.commit ?? '',
        standbys: rows.filter((r) => r.standby).map((r) => ({ syncState: r.sync_state })),
      };
    };
    walStats = () => readWalStats(stats);
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    const kysely = db;
    makeWriter = () => postgresEventWriter(kysely).insertMany;
  }

  let closed = false;
  const migration = options.migrate === false ? undefined : await migrate(db, dialect);
  let maintenance: NodeJS.Timeout | undefined;
  if (dialect === 'postgres' && options.migrate !== false) {
    const kysely = db;
    await ensureEventPartitions(kysely);
    // A long-running instance keeps months ahead of the clock. A failed run (the primary away during a
    // failover) is retried a minute later, on whichever server is then the primary; meanwhile the
    // default partition takes the rows, so ingest never depends on it.
    const run = (delay: number) => {
      if (closed) return;
      maintenance = setTimeout(() => {
        ensureEventPartitions(kysely).then(
          () => run(PARTITION_MAINTENANCE_INTERVAL_MS),
          () => run(PARTITION_MAINTENANCE_RETRY_MS),
        );
      }, delay);
      maintenance.unref();
    };
    run(PARTITION_MAINTENANCE_INTERVAL_MS);
  }
  queryDeadline.ms = options.queryTimeoutMs;
  // The writer prepares its statements against the migrated schema.
  const insertMany = makeWriter();
  const reads = eventReads(db, dialect, rawSqlite, eventSubjects);
  const storeDialect = dialect === 'sqlite' ? sqliteStoreDialect() : postgresStoreDialect();

  return {
    dialect,
    db,
    migration,
    ...(poolStats === undefined ? {} : { poolStats }),
    ...(replicationStatus === undefined ? {} : { replicationStatus }),
    ...(walStats === undefined ? {} : { walStats }),
    ...(rateLimitPool === undefined ? {} : { rateLimitPool }),
    ...(checkpointer === undefined ? {} : { observeCheckpoints: checkpointer.observe }),
    ...(dialect === 'sqlite'
      ? {
          eventKeyStats: () => indexStats(eventKeys),
          eventSubjectStats: () => indexStats(eventSubjects),
          async warmEventIndexes() {
            const keys = eventKeys!;
            const subjects = eventSubjects!;
            await db.connection().execute(async () => subjects.catchUp(keys.catchUp()));
            await keys.filtered();
          },
          async settleEventIndexes() {
            await Promise.all([eventKeys!.settle(), eventSubjects!.settle()]);
          },
        }
      : {}),
    isUnavailable: dialect === 'sqlite' ? isSqliteUnavailable : isPostgresUnavailable,
    get closed() {
      return closed;
    },
    products: productStore(db),
    apiKeys: apiKeyStore(db),
    events: { insertMany, ...reads },
    legacyUsage: legacyUsageStore(db),
    rejections: rejectionStore(db),
    identity: identityStore(db, storeDialect),
    traffic: trafficStore(db, storeDialect),
    destinations:
      dialect === 'sqlite' && options.sqliteBusyTimeoutMs === 0
        ? retryingBusy(destinationStore(db, dialect, rawSqlite))
        : destinationStore(db, dialect, rawSqlite),
    governance: governanceStore(db, storeDialect),
    erasure: erasureStore(
      db,
      storeDialect,
      dialect === 'sqlite'
        ? sqliteEventDeletes(db, eventSubjects!, checkpointer?.roomInWal)
        : postgresEventDeletes(db, maintenanceDatabase),
    ),
    async ping() {
      if (dialect === 'sqlite') {
        await sql`SELECT 1`.execute(db);
        return;
      }
      // Ready means "can take writes": a server that was demoted (or a standby reached with
      // target_session_attrs=any) answers SELECT 1 but refuses every insert.
      const { rows } = await sql<{
        writable: boolean;
      }>`SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable`.execute(db);
      if (rows[0]?.writable !== true) {
        throw Object.assign(new Error(`PostgreSQL at ${postgresHosts} is read-only (a standby or a demoted primary)`), {
          code: '25006',
        });
      }
    },
    async close() {
      closed = true;
      clearTimeout(maintenance);
      await limiterPool?.end().catch(() => {});
      await maintenancePool?.end().catch(() => {});
      await eventKeys?.stop();
      await eventSubjects?.stop();
      await checkpointer?.stop();
      await walSync?.close();
      await db.destroy();
      // Kysely's PostgresDialect ends the pool only if Kysely ever ran a query on it. A storage closed before
      // that (no migrations, nothing queried yet) but after pool.query (CREATE SCHEMA above) kept that
      // connection open: a delivery worker stopped right after it started outlived its shutdown this way.
      if (pool !== undefined && !(pool as pg.Pool & { ending?: boolean }).ending) await pool.end().catch(() => {});
    },
  };
}
