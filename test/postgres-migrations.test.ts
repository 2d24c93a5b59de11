// Several instances starting at once on one fresh PostgreSQL schema: every migration is applied
// exactly once and every instance starts (ARCHITECTURE "Scaling out"; migrate.ts's advisory lock).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { migrations } from '../src/storage/migrations/index.js';
import { migrate } from '../src/storage/migrate.js';
import { postgresSettings } from '../src/storage/postgres/connection-url.js';
import { ConfigError, loadConfig } from '../src/config.js';
import type { EventRecord } from '../src/storage/types.js';
import { eventRow } from './event-rows.js';
import { dialect, testDatabase, type TestDatabase } from './helpers.js';

const skip = dialect === 'postgres' ? false : 'PostgreSQL only: concurrent migrations need a shared server database';

describe('migrations under concurrency (PostgreSQL)', { skip }, () => {
  let database: TestDatabase;
  const opened: OpenedStorage[] = [];
  before(() => {
    database = testDatabase();
  });
  after(async () => {
    await Promise.all(opened.map((storage) => storage.close()));
    await database?.drop();
  });

  it(
    'six instances opening one fresh schema at once all succeed and apply each migration once',
    { timeout: 60_000 },
    async () => {
      const instances = 6;
      // Half name the schema in the URL, half through the option: both spellings reach one schema.
      const results = await Promise.allSettled(
        Array.from({ length: instances }, (_, i) =>
          i % 2 === 0
            ? openStorage(`${database.databaseUrl}?schema=${database.postgresSchema}`, { postgresPoolSize: 2 })
            : openStorage(database.databaseUrl, { postgresSchema: database.postgresSchema!, postgresPoolSize: 2 }),
        ),
      );
      for (const result of results) if (result.status === 'fulfilled') opened.push(result.value);
      const failures = results.flatMap((result) => (result.status === 'rejected' ? [String(result.reason)] : []));
      assert.deepEqual(failures, [], 'every instance opens');

      const appliedBy = new Map<number, number>();
      for (const storage of opened) {
        for (const { version } of storage.migration!.applied) appliedBy.set(version, (appliedBy.get(version) ?? 0) + 1);
      }
      const expected = migrations.map((m) => m.version);
      assert.deepEqual(
        [...appliedBy.keys()].sort((a, b) => a - b),
        expected,
        'every migration applied by some instance',
      );
      assert.ok(
        [...appliedBy.values()].every((count) => count === 1),
        `each applied by exactly one instance: ${JSON.stringify([...appliedBy])}`,
      );

      const rows = await opened[0]!.db.selectFrom('inlet_migrations').select('version').orderBy('version').execute();
      assert.deepEqual(
        rows.map((row) => Number(row.version)),
        expected,
        'one row per migration',
      );
      for (const storage of opened) assert.equal(storage.migration!.current, Math.max(...expected));
    },
  );

  it('the schema named in the URL is the one the tables live in', async () => {
    const storage = opened[0]!;
    const found = await sql<{
      schema: string;
    }>`SELECT table_schema AS schema FROM information_schema.tables WHERE table_name = 'inlet_migrations' AND table_schema = current_schema()`.execute(
      storage.db,
    );
    assert.deepEqual(found.rows, [{ schema: database.postgresSchema }]);
  });

  it("libpq's options=-c search_path=… in the URL reaches the same schema", async () => {
    const url = `${database.databaseUrl}?options=${encodeURIComponent(`-c search_path=${database.postgresSchema}`)}`;
    const storage = await openStorage(url, { postgresPoolSize: 1 });
    opened.push(storage);
    assert.deepEqual(storage.migration!.applied, [], 'already migrated: the schema is the same');
    const found = await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(storage.db);
    assert.deepEqual(found.rows, [{ schema: database.postgresSchema }]);
  });
});

describe('the migration lock is per schema (PostgreSQL)', { skip }, () => {
  it("an instance of one schema opens while another schema's migrator holds its lock; one of the same schema waits", async () => {
    const held = testDatabase();
    const other = testDatabase();
    // The migrator of `held` as an older instance holding it mid-run: its session holds the schema's lock.
    const holder = await openStorage(held.databaseUrl, { postgresSchema: held.postgresSchema!, migrate: false });
    const opened: OpenedStorage[] = [];
    try {
      await holder.db.connection().execute(async (conn) => {
        await sql`SELECT pg_advisory_lock(7243001, hashtext(${held.postgresSchema!}))`.execute(conn);
        try {
          const started = Date.now();
          opened.push(
            await openStorage(other.databaseUrl, { postgresSchema: other.postgresSchema!, postgresPoolSize: 1 }),
          );
          assert.ok(Date.now() - started < 20_000, 'the other schema did not wait for the lock');
          let sameDone = false;
          const same = openStorage(held.databaseUrl, {
            postgresSchema: held.postgresSchema!,
            postgresPoolSize: 1,
          }).then((storage) => {
            sameDone = true;
            opened.push(storage);
          });
          await new Promise((resolve) => setTimeout(resolve, 500));
          assert.equal(sameDone, false, 'an instance of the same schema waits for its migrator');
          await sql`SELECT pg_advisory_unlock(7243001, hashtext(${held.postgresSchema!}))`.execute(conn);
          await same;
          assert.equal(sameDone, true);
        } finally {
          await sql`SELECT pg_advisory_unlock_all()`.execute(conn);
        }
      });
    } finally {
      await Promise.all(opened.map((storage) => storage.close()));
      await holder.close();
      await held.drop();
      await other.drop();
    }
  });
});

/**
 * A schema migrated to just before `version`, filled by `fill` as the older release left it, then opened (and so
 * migrated across `version`) as the new release opens it.
 */
async function upgradedAcross(
  database: TestDatabase,
  version: number,
  fill: (before: OpenedStorage) => Promise<void>,
): Promise<OpenedStorage> {
  const before = await openStorage(database.databaseUrl, {
    postgresSchema: database.postgresSchema!,
    postgresPoolSize: 1,
    migrate: false,
  });
  try {
    await migrate(
      before.db,
      'postgres',
      migrations.filter((m) => m.version < version),
    );
    await fill(before);
  } finally {
    await before.close();
  }
  return openStorage(database.databaseUrl, { postgresSchema: database.postgresSchema!, postgresPoolSize: 1 });
}

describe('migration 805: event JSON columns from jsonb to json (PostgreSQL)', { skip }, () => {
  let database: TestDatabase;
  let storage: OpenedStorage | undefined;
  after(async () => {
    await storage?.close();
    await database?.drop();
  });

  it('events stored as jsonb before it read back with the same values', async () => {
    database = testDatabase();
    storage = await upgradedAcross(database, 805, async (before) => {
      await before.products.create({ id: 'prd_m805', name: 'm805', createdAt: new Date().toISOString() });
      await sql`INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id,
                                    occurred_at, received_at, properties, context, original)
                VALUES ('0190a0a0-0000-7000-8000-000000000001', 'prd_m805', 'segment', 'old-1', 'page', 'viewed', 'page_viewed', 'preferred', 'user', 'u1',
                        now(), now(), '{"zeta": 1, "a": {"n": 1.50, "s": "é\\"x"}}'::jsonb, '{"ip": "127.0.0.1"}'::jsonb, '{"type": "track"}'::jsonb)`.execute(
        before.db,
      );
    });
    assert.deepEqual(
      storage.migration!.applied.map((m) => m.version).filter((v) => v === 805),
      [805],
    );
    const types = await sql<{ column_name: string; data_type: string }>`
      SELECT column_name, data_type FROM information_schema.columns
       WHERE table_schema = current_schema() AND table_name = 'events' AND column_name IN ('properties', 'context', 'original') ORDER BY column_name`.execute(
      storage.db,
    );
    assert.deepEqual(types.rows, [
      { column_name: 'context', data_type: 'json' },
      { column_name: 'original', data_type: 'json' },
      { column_name: 'properties', data_type: 'json' },
    ]);
    const old = await storage.events.get('prd_m805', '0190a0a0-0000-7000-8000-000000000001');
    assert.deepEqual(old?.properties, { zeta: 1, a: { n: 1.5, s: 'é"x' } });
    assert.deepEqual(old?.context, { ip: '127.0.0.1' });
    assert.deepEqual(old?.original, { type: 'track' });
  });
});

describe('migration 851: idempotency keys as a digest (PostgreSQL)', { skip }, () => {
  let database: TestDatabase;
  let storage: OpenedStorage | undefined;
  after(async () => {
    await storage?.close();
    await database?.drop();
  });

  it('keys stored before it still make their retries duplicates; the digest tells sources apart', async () => {
    database = testDatabase();
    const old = eventRow('prd_m851', 'old-1', { source: 'segment' });
    storage = await upgradedAcross(database, 851, async (before) => {
      await before.products.create({ id: 'prd_m851', name: 'm851', createdAt: new Date().toISOString() });
      // As the writer stored a key before 851: its text in the key's columns.
      await sql`INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id,
                                    occurred_at, received_at, properties)
                VALUES (${old.id}::uuid, 'prd_m851', 'segment', 'old-1', 'order', 'placed', 'order_placed', 'preferred', 'user', 'u1',
                        ${old.occurredAt}::timestamptz, ${old.receivedAt}::timestamptz, '{}')`.execute(before.db);
      await sql`INSERT INTO event_dedup (product_id, source, external_id, event_id, received_at)
                VALUES ('prd_m851', 'segment', 'old-1', ${old.id}::uuid, ${old.receivedAt}::timestamptz)`.execute(
        before.db,
      );
    });
    assert.ok(storage.migration!.applied.some((m) => m.version === 851));
    const columns = await sql<{ column_name: string }>`
      SELECT column_name FROM information_schema.columns
       WHERE table_schema = current_schema() AND table_name = 'event_dedup' ORDER BY ordinal_position`.execute(
      storage.db,
    );
    assert.deepEqual(
      columns.rows.map((row) => row.column_name),
      ['product_id', 'key_hash', 'event_id', 'received_at'],
    );
    const outcomes = await storage.events.insertMany([
      eventRow('prd_m851', 'old-1', { source: 'segment' }),
      eventRow('prd_m851', 'old-1'),
      eventRow('prd_m851', 'new-1'),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['duplicate', 'created', 'created'],
    );
    assert.equal(outcomes[0]!.event.id, old.id);
    const retried = await storage.events.insertMany([eventRow('prd_m851', 'new-1')]);
    assert.deepEqual(
      retried.map((o) => [o.status, o.event.id]),
      [['duplicate', outcomes[2]!.event.id]],
    );
  });
});

describe('migration 857: event name formats as numbers (PostgreSQL)', { skip }, () => {
  let database: TestDatabase;
  let storage: OpenedStorage | undefined;
  after(async () => {
    await storage?.close();
    await database?.drop();
  });

  it('converts every stored format, reads every event back as before, stores new ones as numbers', async () => {
    database = testDatabase();
    const formats = ['preferred', 'segment', 'unified', 'legacy', 'v1'];
    let before: EventRecord[] = [];
    storage = await upgradedAcross(database, 857, async (old) => {
      await old.products.create({ id: 'prd_m857', name: 'm857', createdAt: new Date().toISOString() });
      for (const [i, format] of formats.entries()) {
        const row = eventRow('prd_m857', `old-${i}`);
        // As the writer stored them before 857: the format's text.
        await sql`INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id,
                                      occurred_at, received_at, properties)
                  VALUES (${row.id}::uuid, 'prd_m857', 'api', ${row.externalId}, 'order', 'placed', 'order_placed', ${format}, 'user', 'u1',
                          ${row.occurredAt}::timestamptz, ${row.receivedAt}::timestamptz, '{"n": 1}')`.execute(old.db);
        await sql`INSERT INTO event_dedup (product_id, key_hash, event_id, received_at)
                  VALUES ('prd_m857', inlet_event_dedup_key('api', ${row.externalId}), ${row.id}::uuid, ${row.receivedAt}::timestamptz)`.execute(
          old.db,
        );
      }
      before = (await old.events.page({ productId: 'prd_m857', filter: {}, limit: 10, order: 'asc', jsonText: true }))
        .events;
    });
    assert.ok(storage.migration!.applied.some((m) => m.version === 857));
    assert.deepEqual(
      before.map((e) => e.nameFormat),
      formats,
    );
    const stored = async () =>
      (
        await sql<{ name_format: number; type: string }>`SELECT name_format, pg_typeof(name_format)::text AS type
                                                          FROM events ORDER BY tx, seq`.execute(storage!.db)
      ).rows;
    assert.deepEqual(
      await stored(),
      formats.map((_, code) => ({ name_format: code, type: 'smallint' })),
    );
    const after857 = await storage.events.page({
      productId: 'prd_m857',
      filter: {},
      limit: 10,
      order: 'asc',
      jsonText: true,
    });
    assert.deepEqual(after857.events, before);
    const outcomes = await storage.events.insertMany([
      eventRow('prd_m857', 'old-3'),
      eventRow('prd_m857', 'new-1', { nameFormat: 'unified' }),
    ]);
    assert.deepEqual(
      outcomes.map((o) => [o.status, o.event.nameFormat]),
      [
        ['duplicate', 'legacy'],
        ['created', 'unified'],
      ],
    );
    assert.deepEqual((await stored()).at(-1), { name_format: 2, type: 'smallint' });
    const read = await storage.events.get('prd_m857', outcomes[1]!.event.id);
    assert.equal(read?.nameFormat, 'unified');
  });
});

describe('schema selection in the database URL', () => {
  it('takes ?schema= out of the URL and keeps the other parameters', () => {
    const settings = postgresSettings('postgres://u@h:5432/db?schema=inlet_a&sslmode=disable');
    assert.equal(settings.schema, 'inlet_a');
    assert.equal(settings.sslMode, 'disable');
    assert.deepEqual(settings.hosts, [{ host: 'h', port: 5432 }]);
    assert.equal(postgresSettings('postgres://u@h/db').schema, undefined);
  });

  it('refuses names that are not plain identifiers, and two different schemas', () => {
    assert.throws(() => postgresSettings('postgres://u@h/db?schema=a;drop'), /invalid PostgreSQL schema name/);
    assert.throws(() => postgresSettings('postgres://u@h/db?schema=Upper'), /invalid PostgreSQL schema name/);
    assert.throws(() => postgresSettings('postgres://u@h/db?schema=a&schema=b'), /more than once/);
    assert.throws(() => postgresSettings('postgres://u@h/db?schema=a', 'b'), /two PostgreSQL schemas/);
  });

  it('a bad schema in INLET_DATABASE_URL stops start-up with a message naming the variable', () => {
    assert.throws(
      () => loadConfig({ INLET_DATABASE_URL: 'postgres://u@h/db?schema=Bad-Name' }),
      (error: unknown) =>
        error instanceof ConfigError && /INLET_DATABASE_URL.*invalid PostgreSQL schema name/.test(error.message),
    );
    assert.equal(
      loadConfig({ INLET_DATABASE_URL: 'postgres://u@h/db?schema=inlet' }).databaseUrl,
      'postgres://u@h/db?schema=inlet',
    );
  });

  it('INLET_PG_POOL_SIZE sets the pool size per instance (default 10, at least 1)', () => {
    assert.equal(loadConfig({}).postgresPoolSize, 10);
    assert.equal(loadConfig({ INLET_PG_POOL_SIZE: '25' }).postgresPoolSize, 25);
    assert.throws(() => loadConfig({ INLET_PG_POOL_SIZE: '0' }), /INLET_PG_POOL_SIZE must be between 1 and 1000/);
    assert.throws(() => loadConfig({ INLET_PG_POOL_SIZE: 'ten' }), /INLET_PG_POOL_SIZE must be a whole number/);
  });
});
