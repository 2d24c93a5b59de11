// Distributable by product (issue 16, docs/scaling-out.md "Distributing with Citus"): every primary key and
// unique constraint of every table starts with product_id, so Citus can hash-distribute the tables by
// product_id and co-locate a product's rows — or the table is one of the listed exceptions, with the reason.
// Reads the schema after all migrations, on both backends.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import type { OpenedStorage } from '../src/storage/connect.js';
import { RATE_LIMIT_TABLE } from '../src/services/rate-limiter.js';
import { dialect, openReusableStorage } from './helpers.js';

/** Tables whose keys need not start with product_id, and why. Keep this short. */
const EXCEPTIONS: Record<string, string> = {
  products: 'Citus reference table: it is the product itself (key id), small, copied to every node',
  api_keys: 'Citus reference table: a key is looked up by its hash before its product is known',
  inlet_migrations: 'local table on the coordinator: schema versions, not product data',
  background_leases: 'local table on the coordinator: one row per background task (retention), not product data',
  installation_secrets: 'local table on the coordinator: the installation HMAC key (erasure), not product data',
  [RATE_LIMIT_TABLE]:
    'rate-limit windows keyed by API key id, created by rate-limiter-flexible; local table on the coordinator (or use INLET_RATE_LIMIT_STORE=redis)',
};
/** Tables of the SQLite schema only (a SQLite file is never distributed; PostgreSQL keeps `event_dedup`). */
const SQLITE_ONLY: Record<string, string> = {
  event_keys: 'SQLite only: idempotency keys by hash (storage/sqlite/event-keys.ts); the hash covers the product',
  event_keys_recent:
    'SQLite only: the recent level of event_keys, which merges write into and which moves into event_keys',
  event_keys_by_position: 'SQLite only: the same keys by event position, how a sweep finds a deleted row’s key',
  event_keys_gone: 'SQLite only: positions of deleted events whose keys a sweep has yet to remove',
  event_keys_state: 'SQLite only: one row (the hash seed and how far the keys and subjects are merged)',
  event_subjects:
    'SQLite only: events by subject, (hash of product and subject id, position) (storage/sqlite/event-keys.ts); the hash covers the product',
  event_subjects_recent:
    'SQLite only: the recent level of event_subjects, which merges write into and which moves into event_subjects',
  event_subjects_by_position:
    'SQLite only: the same entries by event position, how a sweep finds a deleted row’s entry',
  event_subjects_gone: 'SQLite only: positions of deleted events whose subject entries a sweep has yet to remove',
  product_numbers: 'SQLite only: the number each product is stored as in `events` (migration 854)',
  key_numbers: 'SQLite only: the number each API key is stored as in `events` (migration 854)',
  event_names: 'SQLite only: the number each event name is stored as in `events` (migration 855)',
};
const exceptions = dialect === 'sqlite' ? { ...EXCEPTIONS, ...SQLITE_ONLY } : EXCEPTIONS;

interface Key {
  table: string;
  key: string;
  columns: string[];
}

async function keysOf(storage: OpenedStorage): Promise<Key[]> {
  if (dialect === 'postgres') {
    const { rows } = await sql<{ table_name: string; index_name: string; columns: string[] }>`
      SELECT t.relname AS table_name, i.relname AS index_name,
             array(SELECT a.attname::text FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n)
                     JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.n) AS columns
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
       WHERE (x.indisunique OR x.indisprimary)
         AND t.relnamespace = current_schema()::regnamespace
         AND NOT t.relispartition`.execute(storage.db);
    return rows.map((row) => ({ table: row.table_name, key: row.index_name, columns: row.columns }));
  }
  const tables = await sql<{
    name: string;
  }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`.execute(storage.db);
  const keys: Key[] = [];
  for (const { name } of tables.rows) {
    const indexes = await sql<{
      name: string;
      unique: number;
      origin: string;
    }>`SELECT name, "unique", origin FROM pragma_index_list(${name})`.execute(storage.db);
    for (const index of indexes.rows.filter((i) => i.unique === 1)) {
      const columns = await sql<{
        name: string;
      }>`SELECT name FROM pragma_index_info(${index.name}) ORDER BY seqno`.execute(storage.db);
      keys.push({ table: name, key: index.name, columns: columns.rows.map((c) => c.name) });
    }
    // A rowid table's INTEGER PRIMARY KEY has no index: read it from the table's columns.
    const pk = await sql<{
      name: string;
      pk: number;
    }>`SELECT name, pk FROM pragma_table_info(${name}) WHERE pk > 0 ORDER BY pk`.execute(storage.db);
    if (pk.rows.length > 0 && !indexes.rows.some((i) => i.origin === 'pk'))
      keys.push({ table: name, key: `${name} primary key`, columns: pk.rows.map((c) => c.name) });
  }
  return keys;
}

describe('every key starts with product_id (distributable by product)', () => {
  let storage: OpenedStorage;
  let close: (() => Promise<void>) | undefined;

  before(async () => {
    ({ storage, close } = await openReusableStorage());
  });
  after(async () => close?.());

  it('no primary key or unique constraint outside the listed exceptions lacks a leading product_id', async () => {
    const keys = await keysOf(storage);
    assert.ok(
      keys.some((k) => k.table === 'events'),
      'the schema was read',
    );
    // SQLite only: events' rowid is the commit position (migrations/event-positions.ts); SQLite is one node,
    // and on PostgreSQL the events key still starts with product_id.
    // The same for identity_messages (migrations/destinations.ts), which share that order on SQLite.
    const sqlitePosition = (k: Key) =>
      dialect === 'sqlite' &&
      (k.table === 'events' || k.table === 'identity_messages') &&
      k.columns.join() === 'position';
    const offending = keys.filter(
      (k) => exceptions[k.table] === undefined && k.columns[0] !== 'product_id' && !sqlitePosition(k),
    );
    assert.deepEqual(
      offending.map((k) => `${k.table}.${k.key} (${k.columns.join(', ')})`),
      [],
      'a new table or key must start with product_id, or be added to EXCEPTIONS with the reason',
    );
  });

  it('every exception that is a migrated table still exists (no stale entries)', async () => {
    const tables = new Set((await keysOf(storage)).map((k) => k.table));
    for (const table of Object.keys(exceptions)) {
      if (table === RATE_LIMIT_TABLE) continue; // created by the shared rate limiter at start-up, not by migrations
      assert.ok(tables.has(table), `${table} is listed as an exception but has no keys`);
    }
  });
});
