// The PostgreSQL backend: one failover pool (postgres/pool.ts) on the URL's hosts, the schema created if
// missing, the monthly event partitions kept ahead of the clock, and what the database can do (the port's
// capabilities).
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { Backend, ReadyBackend } from '../backend.js';
import type { Database } from '../database.js';
import { destinationStore } from '../destination-store.js';
import { eventReads } from '../event-reads.js';
import type { DeletePacing, ReplicationStatus, StorageCapabilities } from '../types.js';
import {
  checkWritableTarget,
  DatabaseUrlError,
  describeHosts,
  postgresSettings,
  type PostgresConnectionSettings,
} from './connection-url.js';
import { isPostgresUnavailable } from './errors.js';
import { postgresEventDeletes } from './event-deletes.js';
import { ensureEventPartitions, PARTITION_MAINTENANCE_INTERVAL_MS } from './event-partitions.js';
import { postgresEventWriter } from './event-writer.js';
import { createFailoverPool } from './pool.js';
import { postgresStoreDialect } from './store-dialect.js';
import { readWalStats } from './wal-stats.js';
import { postgresBackup } from './backup.js';

export interface PostgresOptions {
  /** PostgreSQL schema to use (created if missing); tests use one schema per run. The URL may name it
   *  instead: `postgres://…/db?schema=name` (postgres/connection-url.ts). */
  postgresSchema?: string;
  /** Connections in this process's pool (default 10). */
  postgresPoolSize?: number;
  /** PostgreSQL: client-side deadline per query once start-up (migrations) is done; 0: none. */
  queryTimeoutMs?: number;
  /**
   * INLET_DESTINATION_LEASE_MS: bounds how long a deliverer stopped inside its state write's transaction
   * keeps its destination's row locked (storage/destinations/state.ts).
   */
  destinationLeaseMs?: number;
}

const DEFAULT_POOL_SIZE = 10;

/**
 * PostgreSQL commits in flight at once, given the pool's size: 8 with the default pool of 10, leaving two
 * connections for reads and the duplicates' originals; never fewer than the 4 of before. Measured with the
 * scaling bench (`npm run bench -- --backend postgres --instances …`, 2 cores shared with other load): with 8
 * in flight instead of 4 the best N stored 8-43 % more events/s in 6 of 6 alternating pairs (× 1 alone: 5 of 6).
 * A commit waits on its WAL flush and on the other processes, so more in flight keeps the instance parsing
 * meanwhile; 2 was no better than 4.
 * See bench/runs/2026-11-postgresql.md, "Scaling on PostgreSQL: where the CPU goes (h16)".
 */
export function postgresCommitsInFlight(poolSize: number): number {
  return Math.min(8, Math.max(4, poolSize - 2));
}

/**
 * A delete does not block inserts here (row locks, MVCC), but each batch statement has a fixed cost that SQLite's
 * 4 ms target leaves no room for: planning over the event partitions, a round trip, a commit. Under SQLite's pacing
 * every batch on PostgreSQL took 4-8 ms whatever its size, so the size sank to its minimum of 20 rows
 * (test/retention.test.ts: 212 of 299 batches at 20 rows). Batches grow to 20 ms instead, with a rest three times
 * as long as each took, as on SQLite (a quarter of one connection's time; docs/design.md, "Erasure and retention").
 */
export const POSTGRES_DELETE_PACING: DeletePacing = {
  initial: 500,
  min: 100,
  max: 5000,
  targetMs: 20,
  restRatio: 3,
};

const PARTITION_MAINTENANCE_RETRY_MS = 60_000;

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

function settingsOf(url: string, schema: string | undefined): PostgresConnectionSettings {
  try {
    const settings = postgresSettings(url, schema);
    checkWritableTarget(settings);
    return settings;
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw new DatabaseUrlError(`INLET_DATABASE_URL: ${error.message}`);
    throw error;
  }
}

/** The rate limiter's pool and the maintenance connection, each opened when first asked for. */
function sidePools(settings: PostgresConnectionSettings, queryDeadline: { ms?: number }) {
  const searchPath = settings.schema === undefined ? '' : `-c search_path=${settings.schema}`;
  let limiterPool: pg.Pool | undefined;
  let maintenancePool: pg.Pool | undefined;
  let maintenanceDb: Kysely<Database> | undefined;
  return {
    rateLimitPool(): pg.Pool {
      limiterPool ??= createFailoverPool(settings, {
        max: 4,
        queryTimeoutMs: () => queryDeadline.ms,
        options: [searchPath, '-c synchronous_commit=off'].join(' ').trim(),
      }).pool;
      limiterPool.on('error', () => {});
      return limiterPool;
    },
    // Erasure's VACUUM (postgres/event-deletes.ts) on a connection of its own without the query deadline: a
    // vacuum of a large table outlasts it, and a deadline would mark the primary silent (pool.ts).
    // Retention's partition drop (a count of a whole month under lock_timeout) uses it too.
    maintenance(): Kysely<Database> {
      if (maintenanceDb === undefined) {
        maintenancePool = createFailoverPool(settings, {
          max: 1,
          types: postgresTypes(),
          ...(searchPath === '' ? {} : { options: searchPath }),
        }).pool;
        maintenancePool.on('error', () => {});
        maintenanceDb = new Kysely<Database>({ dialect: new PostgresDialect({ pool: maintenancePool }) });
      }
      return maintenanceDb;
    },
    async close() {
      await limiterPool?.end().catch(() => {});
      await maintenancePool?.end().catch(() => {});
    },
  };
}

async function createSchema(pool: pg.Pool, schema: string): Promise<void> {
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

async function replicationStatus(pool: pg.Pool): Promise<ReplicationStatus> {
  const { rows } = await pool.query<{
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
}

/** Ready means "can take writes": a server that was demoted (or a standby reached with
 *  target_session_attrs=any) answers SELECT 1 but refuses every insert. */
async function pingWritable(db: Kysely<Database>, hosts: string): Promise<void> {
  const { rows } = await sql<{
    writable: boolean;
  }>`SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable`.execute(db);
  if (rows[0]?.writable !== true) {
    throw Object.assign(new Error(`PostgreSQL at ${hosts} is read-only (a standby or a demoted primary)`), {
      code: '25006',
    });
  }
}

/**
 * A long-running instance keeps months ahead of the clock. A failed run (the primary away during a failover) is
 * retried a minute later, on whichever server is then the primary; meanwhile the default partition takes the rows,
 * so ingest never depends on it.
 */
function keepPartitionsAhead(db: Kysely<Database>): { stop(): void } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const run = (delay: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      ensureEventPartitions(db).then(
        () => run(PARTITION_MAINTENANCE_INTERVAL_MS),
        () => run(PARTITION_MAINTENANCE_RETRY_MS),
      );
    }, delay);
    timer.unref();
  };
  run(PARTITION_MAINTENANCE_INTERVAL_MS);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** Throws DatabaseUrlError for a URL that does not parse or asks for a read-only session. */
export async function openPostgresBackend(url: string, options: PostgresOptions = {}): Promise<Backend> {
  const settings = settingsOf(url, options.postgresSchema);
  const schema = settings.schema;
  // No deadline while migrations run (an index build on a big table may take minutes); set after them.
  const queryDeadline: { ms?: number } = {};
  const poolSize = options.postgresPoolSize ?? DEFAULT_POOL_SIZE;
  // One code path for one host and many: the pool connects only to a host that matches
  // target_session_attrs and moves on when it fails or is demoted (postgres/pool.ts).
  const { pool } = createFailoverPool(settings, {
    max: poolSize,
    queryTimeoutMs: () => queryDeadline.ms,
    types: postgresTypes(),
    ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
  });
  const side = sidePools(settings, queryDeadline);
  if (schema !== undefined) await createSchema(pool, schema);
  // An idle client that loses its connection must not crash the process; the next query reconnects.
  pool.on('error', () => {});
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    dialect: 'postgres',
    db,
    async ready(migrated): Promise<ReadyBackend> {
      if (migrated) await ensureEventPartitions(db);
      const partitions = migrated ? keepPartitionsAhead(db) : undefined;
      queryDeadline.ms = options.queryTimeoutMs;
      const hosts = describeHosts(settings);
      return {
        name: 'postgres',
        capabilities: capabilities(pool, poolSize, side.rateLimitPool),
        storeDialect: postgresStoreDialect(),
        // The writer prepares its statements against the migrated schema.
        events: { insertMany: postgresEventWriter(db).insertMany, ...eventReads(db, 'postgres') },
        destinations: destinationStore(db, 'postgres', undefined, options.destinationLeaseMs),
        eventDeletes: postgresEventDeletes(db, side.maintenance),
        ping: () => pingWritable(db, hosts),
        isUnavailable: isPostgresUnavailable,
        async close() {
          partitions?.stop();
          await side.close();
          await db.destroy();
          // Kysely's PostgresDialect ends the pool only if Kysely ever ran a query on it. A storage closed before
          // that (no migrations, nothing queried yet) but after pool.query (CREATE SCHEMA above) kept that
          // connection open: a delivery worker stopped right after it started outlived its shutdown this way.
          if (!(pool as pg.Pool & { ending?: boolean }).ending) await pool.end().catch(() => {});
        },
      };
    },
  };
}

function capabilities(pool: pg.Pool, poolSize: number, rateLimitPool: () => pg.Pool): StorageCapabilities {
  return {
    commits: { maxItems: 5000, minItemsToOverlap: 0, maxInFlight: postgresCommitsInFlight(poolSize) },
    deletePacing: POSTGRES_DELETE_PACING,
    telemetry: {
      poolStats: () => ({ max: poolSize, open: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
      replicationStatus: () => replicationStatus(pool),
      walStats: () => readWalStats(pool),
    },
    rateLimitPool,
    async prepareDeliveryWorker() {},
    backup: postgresBackup,
  };
}
