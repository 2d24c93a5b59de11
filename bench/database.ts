// The database under test: a fresh SQLite file in a temp directory, or a fresh PostgreSQL database
// (CREATE DATABASE inlet_bench_<random>) on the server given; both removed at the end.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import {
  externalIdInto,
  nameFormatCode,
  SOURCE_CODES,
  SUBJECT_TYPE_CODES,
  uuidBytes,
} from '../src/storage/database.js';
import { sqlitePlaceholder } from '../src/storage/event-columns.js';
import { keyHash, mergeAllEventKeys, subjectHash } from '../src/storage/sqlite/event-keys.js';
import pg from 'pg';
import { onCleanup, postgresCpuMeter } from './processes.js';
import { ROW_COLUMNS } from './workload.js';

export interface BenchDatabase {
  dialect: 'sqlite' | 'postgres';
  /** What the server gets as INLET_DATABASE_URL. */
  url: string;
  /** Shown in the report (no password). */
  description: string;
  /** Rows the server stored through the API. */
  /** Stored events of one source: `api` (native routes) or `segment`. */
  countEvents(source: 'api' | 'segment'): Promise<number>;
}

export function tempDirectory(): string {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-bench-'));
  onCleanup(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function sqliteDatabase(dir: string): BenchDatabase {
  const path = join(dir, 'inlet.db');
  return {
    dialect: 'sqlite',
    url: `sqlite:${path}`,
    description: `SQLite, fresh file ${path}`,
    async countEvents(source) {
      const db = new BetterSqlite3(path, { readonly: true });
      try {
        // The source as stored (its code since migration 856).
        const stored = SOURCE_CODES.code(source);
        return (db.prepare('SELECT count(*) AS n FROM events WHERE source = ?').get(stored) as { n: number }).n;
      } finally {
        db.close();
      }
    },
  };
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export function redact(url: string): string {
  const parsed = new URL(url);
  if (parsed.password !== '') parsed.password = '***';
  return parsed.toString();
}

export async function postgresDatabase(serverUrl: string): Promise<BenchDatabase> {
  const name = `inlet_bench_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  onCleanup(async () => {
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    } finally {
      await client.end();
    }
  });
  const url = withDatabase(serverUrl, name);
  return {
    dialect: 'postgres',
    url,
    description: `PostgreSQL, fresh database ${redact(url)} (dropped afterwards)`,
    async countEvents(source) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const result = await client.query<{ n: string }>('SELECT count(*) AS n FROM events WHERE source = $1', [
          source,
        ]);
        return Number(result.rows[0]!.n);
      } finally {
        await client.end();
      }
    },
  };
}

/** PostgreSQL's own counters around a measured run: the cluster's WAL position and this database's block reads. */
interface PostgresCounters {
  walBytes: number;
  blocksRead: number;
  blocksHit: number;
}

async function postgresCounters(url: string): Promise<PostgresCounters> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // pg_stat_database's counters arrive up to a second late (each backend flushes its statistics at most once a
    // second): over a 10 s run that is a few per cent.
    const { rows } = await client.query<{ wal: number; blks_read: string; blks_hit: string }>(
      `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS wal, blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database()`,
    );
    return { walBytes: rows[0]!.wal, blocksRead: Number(rows[0]!.blks_read), blocksHit: Number(rows[0]!.blks_hit) };
  } finally {
    await client.end();
  }
}

/**
 * What PostgreSQL spent on a measured run, per event: the CPU of the database's backends and of the server's
 * background processes (postgresCpuMeter), the WAL written (cluster-wide: other databases' writes meanwhile count
 * too) and the blocks read from outside shared_buffers (the OS page cache or the disk) and found in it. `stop`
 * gives the line the report prints after the run's group commits.
 */
export async function postgresRunMeter(url: string): Promise<{ stop(events: number): Promise<string> }> {
  const database = new URL(url).pathname.slice(1);
  const before = await postgresCounters(url);
  const cpu = postgresCpuMeter(database);
  return {
    async stop(events) {
      const seconds = cpu.stop();
      const after = await postgresCounters(url);
      if (events === 0) return 'PostgreSQL: no events';
      const per = (value: number, digits: number) => (value / events).toFixed(digits);
      return (
        `PostgreSQL: ${per(seconds * 1e6, 1)} µs CPU per event (${seconds.toFixed(1)} s in all), ${per(after.walBytes - before.walBytes, 0)} B of WAL per event, ` +
        `${per(after.blocksRead - before.blocksRead, 2)} blocks read from outside shared_buffers and ${per(after.blocksHit - before.blocksHit, 1)} found in it per event`
      );
    },
  };
}

/**
 * Fills the events table of a migrated SQLite file fast, straight through a second connection with no fsync
 * and a 2 GB page cache, while the server on that file is idle: set-up, not the thing measured. With random
 * subjects and external ids every index insert is a random B-tree write; through the service's writer this
 * ran at 1,540 events/s, this way 10 M events fill in minutes. `rowAt(i)` gives the ROW_COLUMNS values of
 * row i; rows go in transactions of 50,000. With `rebuildIndexes` the events table's secondary indexes are
 * dropped first and built again at the end (a sort instead of N random B-tree inserts: with random external
 * ids the unique key alone makes a 10 M fill with the indexes in place take ~20 min); a rebuilt index is
 * packed denser than one grown by inserts. The rows' idempotency keys are written too (mergeAllEventKeys).
 */
export function fillSqliteEvents(
  file: string,
  total: number,
  rowAt: (i: number) => unknown[],
  onProgress?: (filled: number) => void,
  rebuildIndexes = false,
): void {
  // The server has the file open meanwhile (idle, but its checkpoint thread copies what the fill writes): wait
  // for a lock it holds rather than fail the bench.
  const fill = new BetterSqlite3(file, { timeout: 60_000 });
  try {
    fill.pragma('synchronous = OFF');
    fill.pragma('cache_size = -2000000');
    const indexes = rebuildIndexes
      ? (fill
          .prepare(
            `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL`,
          )
          .all() as Array<{ name: string; sql: string }>)
      : [];
    for (const index of indexes) fill.exec(`DROP INDEX ${index.name}`);
    // What the schema declares a column of `events` as (undefined: no such column): the fill follows it.
    const declared = (column: string) =>
      fill.prepare(`SELECT type FROM pragma_table_info('events') WHERE name = ?`).pluck().get(column) as
        string | undefined;
    // Each row with its key and subject hashes, as the writer stores them (src/storage/sqlite/event-keys.ts), where
    // the schema has them: a file filled here then looks like one the server grew.
    const hashed = declared('key_hash') !== undefined;
    const seed = hashed ? (fill.prepare('SELECT seed FROM event_keys_state WHERE id = 1').pluck().get() as number) : 0;
    const columns = hashed ? [...ROW_COLUMNS, 'key_hash', 'subject_hash'] : [...ROW_COLUMNS];
    const at = (name: string) => ROW_COLUMNS.indexOf(name as (typeof ROW_COLUMNS)[number]);
    const [product, source, external, subject] = [at('product_id'), at('source'), at('external_id'), at('subject_id')];
    // Times as the writer stores them where the schema has them as milliseconds (migration 853).
    const millis = declared('received_at') === 'INTEGER';
    const times = [at('occurred_at'), at('received_at')];
    // And the id as its 16 bytes where the schema has it as a BLOB (migration 853).
    const idBytes = declared('id') === 'BLOB';
    const id = at('id');
    // And the external id as its 16 bytes when it is a lowercase uuid, the name format as its number, where the
    // schema has them so (migration 855).
    const externalBytes = declared('external_id') === 'BLOB';
    const nameFormat = at('name_format');
    // And the source and the subject type as their codes where the schema has them so (migration 856).
    const coded = declared('source') === 'BLOB';
    const subjectType = at('subject_type');
    // And the name as its number in `event_names`, the type and the action NULL where they are the name's, where
    // the schema has them so (migration 855), as the writer stores them.
    const namesNumbered =
      (fill
        .prepare(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'event_names'`)
        .pluck()
        .get() as number) === 1;
    const [canonical, eventType, action] = [at('canonical_name'), at('event_type'), at('action')];
    const nameGet = namesNumbered
      ? fill.prepare('SELECT number, event_type, action FROM event_names WHERE canonical_name = ?')
      : undefined;
    const nameAdd = namesNumbered
      ? fill.prepare('INSERT INTO event_names (canonical_name, event_type, action) VALUES (?, ?, ?)')
      : undefined;
    const names = new Map<string, { number: number; event_type: string; action: string }>();
    const numberName = (values: unknown[]) => {
      const name = values[canonical] as string;
      let known = names.get(name) ?? (nameGet!.get(name) as { number: number; event_type: string; action: string });
      if (known === undefined) {
        const number = Number(nameAdd!.run(name, values[eventType], values[action]).lastInsertRowid);
        known = { number, event_type: values[eventType] as string, action: values[action] as string };
      }
      names.set(name, known);
      values[canonical] = known.number;
      if (values[eventType] === known.event_type) values[eventType] = null;
      if (values[action] === known.action) values[action] = null;
    };
    // And the product and the key as their numbers where the schema has them (migration 854), as the writer stores them.
    const numbered =
      (fill
        .prepare(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'product_numbers'`)
        .pluck()
        .get() as number) === 1;
    const insert = fill.prepare(
      `INSERT INTO events (${columns.join(', ')}) VALUES (${columns
        .map((name) => (numbered ? sqlitePlaceholder(name) : '?'))
        .join(', ')})`,
    );
    const group = fill.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const values = rowAt(i) as Array<string | number | bigint | Buffer>;
        if (millis) for (const t of times) values[t] = Date.parse(values[t] as string);
        if (idBytes) values[id] = uuidBytes(values[id] as string);
        const externalText = values[external] as string | null;
        if (externalBytes) {
          values[external] = externalIdInto(externalText, Buffer.alloc(16))!;
          values[nameFormat] = nameFormatCode(values[nameFormat] as string);
        }
        if (namesNumbered) numberName(values);
        const sourceText = values[source] as string;
        if (coded) {
          values[source] = SOURCE_CODES.code(sourceText);
          values[subjectType] = SUBJECT_TYPE_CODES.code(values[subjectType] as string);
        }
        if (hashed) {
          const key = externalText === null ? null : keyHash(seed, values[product] as string, sourceText, externalText);
          insert.run(...values, key, subjectHash(keyHash, seed, values[product] as string, values[subject] as string));
        } else insert.run(...values);
      }
    });
    for (let at = 0; at < total; at += 50_000) {
      group.immediate(at, Math.min(total, at + 50_000));
      onProgress?.(Math.min(total, at + 50_000));
    }
    for (const index of indexes) fill.exec(index.sql);
    // Their idempotency keys, as the server's merges write them (src/storage/sqlite/event-keys.ts): without
    // this the server would take every filled row into memory at its next commit and merge them during the run.
    mergeAllEventKeys(fill);
    fill.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    fill.close();
  }
}
