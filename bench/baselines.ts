// Raw-insert baselines for the batch scenario: the same rows written straight into the database,
// 100 (the batch size) per transaction, with no HTTP, validation or service code in between.
// Only the database work is timed; building the rows is not. With `ids`, the rows are the issue-11
// workload's (workload.ts: random uuid v4 / v7 external ids, 100,000 subjects, 300-byte properties), the
// same the HTTP load sends, so the comparison is like for like; without, the older small sequential rows.
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { openStorage } from '../src/storage/connect.js';
import { nameFormatCode } from '../src/storage/database.js';
import type { IdKind } from './args.js';
import { ExternalIds, ROW_COLUMNS, externalIdMaker, rowValues, workloadRowValues } from './workload.js';

export interface BaselineResult {
  label: string;
  rows: number;
  seconds: number;
  eventsPerSecond: number;
}

const PRODUCT = 'prd_benchbaseline';
const KEY = 'key_benchbaseline';

/** better-sqlite3 prepared statement, one transaction per batch, on a fresh file with the server's pragmas and schema. */
/** The baseline's rows: the workload's (like the load) when `ids` is given, else the older sequential ones. */
function rowMaker(
  ids: IdKind | undefined,
): (productId: string, apiKeyId: string, source: string, n: number) => unknown[] {
  if (ids === undefined) {
    const sequential = new ExternalIds('baseline');
    return (productId, apiKeyId, source, n) => rowValues(productId, apiKeyId, source, sequential.take(), n);
  }
  const next = externalIdMaker(ids, `baseline-${Date.now()}`);
  return (productId, apiKeyId, source) => workloadRowValues(productId, apiKeyId, source, next());
}

export async function sqliteRawInsert(
  dir: string,
  synchronous: 'full' | 'normal',
  batchSize: number,
  durationSeconds: number,
  ids?: IdKind,
): Promise<BaselineResult> {
  const path = join(dir, 'baseline.db');
  // The real migrations, so the table, keys and indexes are the server's.
  const storage = await openStorage(`sqlite:${path}`, { sqliteSynchronous: synchronous });
  await storage.close();

  const db = new BetterSqlite3(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
    db.pragma('busy_timeout = 5000');
    db.pragma('foreign_keys = ON');
    const now = new Date().toISOString();
    db.prepare('INSERT INTO products (id, name, created_at) VALUES (?, ?, ?)').run(PRODUCT, 'bench baseline', now);
    db.prepare(
      `INSERT INTO api_keys (id, product_id, kind, prefix, key_hash, created_at) VALUES (?, ?, 'events', 'inlet_ev_x', 'x', ?)`,
    ).run(KEY, PRODUCT, now);
    const insert = db.prepare(
      `INSERT INTO events (${ROW_COLUMNS.join(', ')}) VALUES (${ROW_COLUMNS.map(() => '?').join(', ')})`,
    );
    // The product and the key as the server stores them where the schema numbers them (migration 854), looked up once.
    const numbered =
      db
        .prepare(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'product_numbers'`)
        .pluck()
        .get() === 1;
    const number = (
      numbered ? db.prepare('SELECT number FROM product_numbers WHERE product_id = ?').pluck().get(PRODUCT) : PRODUCT
    ) as string | number;
    const key = (numbered ? db.prepare('SELECT number FROM key_numbers WHERE key_id = ?').pluck().get(KEY) : KEY) as
      string | number;
    const [productAt, keyAt] = [ROW_COLUMNS.indexOf('product_id'), ROW_COLUMNS.indexOf('api_key_id')];
    const writeBatch = db.transaction((rows: unknown[][]) => {
      for (const row of rows) insert.run(row);
    });

    const row = rowMaker(ids);
    let rows = 0;
    let timed = 0n;
    const until = Date.now() + durationSeconds * 1000;
    for (let n = 0; Date.now() < until; n++) {
      const batch: unknown[][] = [];
      for (let i = 0; i < batchSize; i++) {
        const values = row(PRODUCT, KEY, 'api', rows + i);
        values[productAt] = number;
        values[keyAt] = key;
        batch.push(values);
      }
      const started = process.hrtime.bigint();
      writeBatch(batch);
      timed += process.hrtime.bigint() - started;
      rows += batchSize;
    }
    const seconds = Number(timed) / 1e9;
    return {
      label: `raw better-sqlite3 insert, ${batchSize} rows per transaction (synchronous=${synchronous.toUpperCase()}${ids === undefined ? '' : `, ${ids} ids`})`,
      rows,
      seconds,
      eventsPerSecond: rows / seconds,
    };
  } finally {
    db.close();
  }
}

/** One multi-row INSERT of `batchSize` rows per statement (its own transaction), into the same events table. */
export async function postgresRawInsert(
  url: string,
  productId: string,
  apiKeyId: string,
  batchSize: number,
  durationSeconds: number,
  ids?: IdKind,
): Promise<BaselineResult> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const width = ROW_COLUMNS.length;
    const nameFormatAt = ROW_COLUMNS.indexOf('name_format');
    const placeholders = Array.from(
      { length: batchSize },
      (_, r) => `(${ROW_COLUMNS.map((_, c) => `$${r * width + c + 1}`).join(', ')})`,
    ).join(', ');
    const text = `INSERT INTO events (${ROW_COLUMNS.join(', ')}) VALUES ${placeholders}`;
    const row = rowMaker(ids);
    let rows = 0;
    let timed = 0n;
    const until = Date.now() + durationSeconds * 1000;
    while (Date.now() < until) {
      const values: unknown[] = [];
      // A source of its own keeps these rows apart from the ones the server stored.
      for (let i = 0; i < batchSize; i++) {
        const one = row(productId, apiKeyId, 'bench-baseline', rows + i);
        // The name format as the server stores it (migration 857).
        one[nameFormatAt] = nameFormatCode(one[nameFormatAt] as string);
        values.push(...one);
      }
      const started = process.hrtime.bigint();
      await client.query({ name: 'bench-baseline-insert', text, values });
      timed += process.hrtime.bigint() - started;
      rows += batchSize;
    }
    const seconds = Number(timed) / 1e9;
    return {
      label: `raw multi-row INSERT, ${batchSize} rows per statement, one connection${ids === undefined ? '' : `, ${ids} ids`}`,
      rows,
      seconds,
      eventsPerSecond: rows / seconds,
    };
  } finally {
    await client.end();
  }
}
