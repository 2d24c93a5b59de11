// The one place that knows which database adapter is in use.
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import type { Database } from './database.js';
import { apiKeyStore, eventReads, legacyUsageStore, productStore } from './core-stores.js';
import { identityStore } from './identity-store.js';
import { migrate, type MigrationReport } from './migrate.js';
import { sqliteEventWriter } from './sqlite/event-writer.js';
import { postgresEventWriter } from './postgres/event-writer.js';
import { trafficStore } from './traffic-store.js';
import { postgresTarget } from './postgres/connection-url.js';
import { ensureEventPartitions, PARTITION_MAINTENANCE_INTERVAL_MS } from './postgres/event-partitions.js';
import { isPostgresUnavailable } from './postgres/unavailable.js';
import { isSqliteUnavailable } from './sqlite/unavailable.js';
import type { Dialect, Storage } from './types.js';

export interface OpenStorageOptions {
  /** SQLite `synchronous`: `full` fsyncs every commit (the default), `normal` may lose the last commits on power loss. */
  sqliteSynchronous?: 'full' | 'normal';
  /** PostgreSQL schema to use (created if missing); tests use one schema per run. The URL may name it
   *  instead: `postgres://…/db?schema=name` (postgres/connection-url.ts). */
  postgresSchema?: string;
  /** Connections in this process's pool (default 10). */
  postgresPoolSize?: number;
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
}

export interface PoolStats {
  max: number;
  open: number;
  idle: number;
  /** Queries waiting for a free connection. */
  waiting: number;
}

export function dialectOf(url: string): Dialect {
  return url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
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

  if (dialect === 'sqlite') {
    const path = sqlitePath(url);
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    const raw = new BetterSqlite3(path);
    raw.pragma('journal_mode = WAL');
    raw.pragma(`synchronous = ${options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
    raw.pragma('busy_timeout = 5000');
    raw.pragma('foreign_keys = ON');
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
    const kysely = db;
    makeWriter = () => sqliteEventWriter(kysely, raw).insertMany;
  } else {
    const { connectionString, schema } = postgresTarget(url, options.postgresSchema);
    if (schema !== undefined) {
      const admin = new pg.Client({ connectionString });
      await admin.connect();
      try {
        await admin.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      } catch (error) {
        // CREATE SCHEMA IF NOT EXISTS is not atomic: an instance starting at the same moment may win.
        if (!['42P06', '23505'].includes((error as { code?: string }).code ?? '')) throw error;
      } finally {
        await admin.end();
      }
    }
    const pool = new pg.Pool({
      connectionString,
      max: options.postgresPoolSize ?? 10,
      types: postgresTypes(),
      ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
    });
    // An idle client that loses its connection must not crash the process; the next query reconnects.
    pool.on('error', () => {});
    const max = options.postgresPoolSize ?? 10;
    poolStats = () => ({ max, open: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount });
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    const kysely = db;
    makeWriter = () => postgresEventWriter(kysely).insertMany;
  }

  const migration = options.migrate === false ? undefined : await migrate(db, dialect);
  let maintenance: NodeJS.Timeout | undefined;
  if (dialect === 'postgres' && options.migrate !== false) {
    const kysely = db;
    await ensureEventPartitions(kysely);
    // A long-running instance keeps months ahead of the clock. A failed run is retried at the next
    // tick; meanwhile the default partition takes the rows, so ingest never depends on it.
    maintenance = setInterval(() => void ensureEventPartitions(kysely).catch(() => {}), PARTITION_MAINTENANCE_INTERVAL_MS);
    maintenance.unref();
  }
  // The writer prepares its statements against the migrated schema.
  const insertMany = makeWriter();
  const reads = eventReads(db);

  let closed = false;
  return {
    dialect,
    db,
    migration,
    ...(poolStats === undefined ? {} : { poolStats }),
    get closed() {
      return closed;
    },
    products: productStore(db),
    apiKeys: apiKeyStore(db),
    events: { insertMany, get: reads.get, count: reads.count, listBySubjects: reads.listBySubjects },
    legacyUsage: legacyUsageStore(db),
    identity: identityStore(db, dialect),
    traffic: trafficStore(db, dialect),
    async ping() {
      await sql`SELECT 1`.execute(db);
    },
    isUnavailable: dialect === 'sqlite' ? isSqliteUnavailable : isPostgresUnavailable,
    async close() {
      clearInterval(maintenance);
      closed = true;
      await db.destroy();
    },
  };
}
