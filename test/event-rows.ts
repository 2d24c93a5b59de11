// For tests that write through the event writer directly: one stored-event row, and SQLite's real writer with its
// idempotency keys over a migrated file, without the service around them (the test drives merges and syncs).
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { uuidv7 } from '../src/domain/ids.js';
import type { Database } from '../src/storage/database.js';
import { migrate } from '../src/storage/migrate.js';
import { migrations } from '../src/storage/migrations/index.js';
import { EventKeys, registerEventKeyFunction } from '../src/storage/sqlite/event-keys.js';
import { sqliteEventWriter } from '../src/storage/sqlite/event-writer.js';
import type { WalSync } from '../src/storage/sqlite/wal-sync.js';
import type { EventInsert } from '../src/storage/types.js';

/**
 * A row as the write path hands it to `storage.events.insertMany`: an `order_placed` of `productId` by user `u1`,
 * received now; `overrides` replaces any of its fields (a subject, a receive time, …), and its properties' JSON
 * follows its properties unless given.
 */
export function eventRow(
  productId: string,
  externalId: string | null,
  overrides: Partial<EventInsert> = {},
): EventInsert {
  const now = new Date().toISOString();
  const properties = overrides.properties ?? {};
  return {
    id: uuidv7(),
    productId,
    source: 'api',
    externalId,
    eventType: 'order',
    action: 'placed',
    canonicalName: 'order_placed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: 'u1',
    occurredAt: now,
    receivedAt: now,
    properties,
    propertiesJson: JSON.stringify(properties),
    apiKeyId: null,
    ...overrides,
  };
}

export function sqliteDirectWriter(
  file: string,
  options: {
    tailKeys?: number;
    sweepMin?: number;
    hash?: (seed: number, p: string, s: string, e: string) => number;
    walSync?: WalSync;
  } = {},
) {
  const raw = new BetterSqlite3(file);
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
  const index = (kind: 'keys' | 'subjects') =>
    new EventKeys(raw, {
      kind,
      exclusive: (work) => db.connection().execute(async () => work()),
      synchronous: 'FULL',
      tailKeys: options.tailKeys ?? 1_000_000,
      ...(options.hash === undefined ? {} : { hash: options.hash }),
      ...(options.sweepMin === undefined ? {} : { sweepMin: options.sweepMin }),
    });
  const keys = index('keys');
  const subjects = index('subjects');
  /** Stops both indexes (merges, sweeps, the filter's build), then the connection. */
  const close = async () => {
    await keys.stop();
    await subjects.stop();
    await db.destroy();
  };
  return { raw, db, keys, subjects, close, writer: sqliteEventWriter(db, raw, { keys, subjects }, options.walSync) };
}

/**
 * A SQLite file at the schema before migration `below`, with one product and a statement that stores an event the
 * way the server of that time did (`insert.run(externalId, subjectId)`), for the tests of the migrations that come
 * after. `migrateAll` then runs the rest (`upTo`: only those below it).
 */
export async function fileBefore(file: string, below: number) {
  const raw = new BetterSqlite3(file);
  registerEventKeyFunction(raw);
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
  await migrate(
    db,
    'sqlite',
    migrations.filter((m) => m.version < below),
  );
  const productId = uuidv7();
  raw
    .prepare('INSERT INTO products (id, name, created_at) VALUES (?, ?, ?)')
    .run(productId, 'old', new Date().toISOString());
  const statement = raw.prepare(
    `INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties)
     VALUES (?, ?, 'api', ?, 'order', 'placed', 'order_placed', 'preferred', 'user', ?, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', '{}')`,
  );
  const insert = (externalId: string | null, subjectId = 'u1') =>
    statement.run(uuidv7(), productId, externalId, subjectId);
  const migrateAll = (upTo?: number) =>
    migrate(db, 'sqlite', upTo === undefined ? migrations : migrations.filter((m) => m.version < upTo));
  return { raw, db, productId, insert, migrateAll };
}
