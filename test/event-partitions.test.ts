// The event store's idempotency promise (contract §4) at the storage port, on both dialects, and the
// PostgreSQL layout behind it: monthly partitions of `events`, a default partition, the idempotency
// key in `event_dedup`, retention by dropping months, keys ready for Citus.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import {
  dropEventPartitionsBefore,
  ensureEventPartitions,
  listEventPartitions,
} from '../src/storage/postgres/event-partitions.js';
import { prefixedId } from '../src/domain/ids.js';
import type { EventInsert } from '../src/storage/types.js';
import { dialect, testDatabase, type TestDatabase } from './helpers.js';
import { eventRow } from './event-rows.js';

function event(
  productId: string,
  externalId: string | null,
  receivedAt: string,
  extra: Partial<EventInsert> = {},
): EventInsert {
  return eventRow(productId, externalId, {
    eventType: 'project',
    action: 'created',
    canonicalName: 'project_created',
    occurredAt: receivedAt,
    receivedAt,
    properties: { n: Math.random() },
    ...extra,
  });
}

/** YYYY-MM of the UTC month `offset` months from now. */
function monthOf(offset: number): { name: string; start: string } {
  const now = new Date();
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + offset, 1));
  return { name: `events_p${start.toISOString().slice(0, 7).replace('-', '_')}`, start: start.toISOString() };
}

async function open(database: TestDatabase): Promise<OpenedStorage> {
  return openStorage(database.databaseUrl, {
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
    postgresPoolSize: 4,
  });
}

describe(`event store idempotency (${dialect})`, () => {
  const database = testDatabase();
  let storage: OpenedStorage;
  let other: OpenedStorage;
  const productId = prefixedId('prd');

  before(async () => {
    storage = await open(database);
    // A second handle on the same database stands for a second instance.
    other = await open(database);
    await storage.products.create({ id: productId, name: 'Acme', createdAt: new Date().toISOString() });
  });
  after(async () => {
    await other.close();
    await storage.close();
    await database.drop();
  });

  it('a retry months later is a duplicate answered with the original record (no time window)', async () => {
    const first = event(productId, 'order-1', '2024-01-15T10:00:00.000Z');
    const [created] = await storage.events.insertMany([first]);
    assert.equal(created!.status, 'created');
    const retry = event(productId, 'order-1', new Date().toISOString(), { subjectId: 'someone-else' });
    const [outcome] = await storage.events.insertMany([retry]);
    assert.equal(outcome!.status, 'duplicate');
    assert.equal(outcome!.event.id, first.id);
    assert.equal(outcome!.event.subjectId, 'u1');
    assert.equal(outcome!.event.receivedAt, first.receivedAt);
    assert.deepEqual(outcome!.event.properties, first.properties);
    assert.equal(await storage.events.get(productId, retry.id), undefined, 'the retry is not stored');
  });

  it('in one call, a later row with the same key is a duplicate of the earlier; null external ids never collide', async () => {
    const now = new Date().toISOString();
    const rows = [
      event(productId, 'batch-a', now),
      event(productId, null, now),
      event(productId, 'batch-a', now),
      event(productId, null, now),
    ];
    const outcomes = await storage.events.insertMany(rows);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'created', 'duplicate', 'created'],
    );
    assert.equal(outcomes[2]!.event.id, rows[0]!.id);
  });

  it('the same key under another product or source is a different event', async () => {
    const otherProduct = prefixedId('prd');
    await storage.products.create({ id: otherProduct, name: 'Other', createdAt: new Date().toISOString() });
    const now = new Date().toISOString();
    const outcomes = await storage.events.insertMany([
      event(productId, 'shared', now),
      event(otherProduct, 'shared', now),
      event(productId, 'shared', now, { source: 'import' }),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'created', 'created'],
    );
  });

  it('concurrent writers through two handles store exactly one event per key', { timeout: 60_000 }, async () => {
    const keys = Array.from({ length: 50 }, (_, i) => `race-${i}`);
    const now = new Date().toISOString();
    // Every key is sent 4 times, split over both handles, each handle in two groups of opposite key
    // order (the order in which writers claim keys must not matter).
    const groups = [storage, other, storage, other].map((handle, g) => {
      const ordered = g % 2 === 0 ? keys : [...keys].reverse();
      return handle.events.insertMany(ordered.map((key) => event(productId, key, now)));
    });
    const results = (await Promise.all(groups)).flat();
    const created = results.filter((o) => o.status === 'created');
    assert.equal(created.length, keys.length, 'one created per key');
    const idByKey = new Map<string, Set<string>>();
    for (const outcome of results) {
      const ids = idByKey.get(outcome.event.externalId!) ?? new Set();
      ids.add(outcome.event.id);
      idByKey.set(outcome.event.externalId!, ids);
    }
    for (const [key, ids] of idByKey) assert.equal(ids.size, 1, `every answer for ${key} names one event`);
    for (const outcome of created) assert.ok(await other.events.get(productId, outcome.event.id));
  });
});

const postgresOnly = dialect === 'postgres' ? false : 'PostgreSQL only: partitions and event_dedup exist on PostgreSQL';

describe('events partitions and retention (PostgreSQL)', { skip: postgresOnly }, () => {
  let database: TestDatabase;
  let storage: OpenedStorage;
  const productId = prefixedId('prd');

  before(async () => {
    database = testDatabase();
    storage = await open(database);
    await storage.products.create({ id: productId, name: 'Acme', createdAt: new Date().toISOString() });
  });
  after(async () => {
    await storage?.close();
    await database?.drop();
  });

  async function partitionOf(id: string): Promise<string | undefined> {
    const result = await sql<{
      name: string;
    }>`SELECT tableoid::regclass::text AS name FROM events WHERE id = ${id}::uuid`.execute(storage.db);
    return result.rows[0]?.name;
  }

  it('events is partitioned by month: this month and 3 ahead exist, plus a default partition', async () => {
    const names = (await listEventPartitions(storage.db)).map((p) => p.name);
    for (const offset of [0, 1, 2, 3])
      assert.ok(names.includes(monthOf(offset).name), `${monthOf(offset).name} in ${names.join(', ')}`);
    const partitions = await listEventPartitions(storage.db);
    assert.equal(partitions.find((p) => p.name === 'events_default')?.bounds, 'DEFAULT');
    const now = event(productId, null, new Date().toISOString());
    await storage.events.insertMany([now]);
    assert.equal(await partitionOf(now.id), monthOf(0).name);
  });

  it('an event no partition covers is stored in the default partition, and moves out when its month is created', async () => {
    const month = monthOf(6);
    const late = event(productId, 'far-future', new Date(Date.parse(month.start) + 86_400_000).toISOString());
    assert.equal((await storage.events.insertMany([late]))[0]!.status, 'created');
    assert.equal(await partitionOf(late.id), 'events_default');

    assert.equal(await ensureEventPartitions(storage.db, 6), 3, 'months +4, +5 and +6 are created');
    assert.equal(await partitionOf(late.id), month.name);
    assert.equal(await ensureEventPartitions(storage.db, 6), 0, 'a second run has nothing to do');
    const [retry] = await storage.events.insertMany([event(productId, 'far-future', new Date().toISOString())]);
    assert.equal(retry!.status, 'duplicate');
    assert.equal(retry!.event.id, late.id);
  });

  it(
    'several instances maintaining partitions at once all succeed and create each month once',
    { timeout: 60_000 },
    async () => {
      const counts = await Promise.all(Array.from({ length: 5 }, () => ensureEventPartitions(storage.db, 9)));
      assert.equal(
        counts.reduce((a, b) => a + b, 0),
        3,
        'months +7, +8 and +9 created once in all',
      );
      const names = (await listEventPartitions(storage.db)).map((p) => p.name);
      assert.equal(new Set(names).size, names.length);
      for (const offset of [7, 8, 9]) assert.ok(names.includes(monthOf(offset).name));
    },
  );

  it('a time-range read touches only the partitions of that range', async () => {
    const from = monthOf(1).start;
    const to = monthOf(2).start;
    const plan = await sql<{
      'QUERY PLAN': string;
    }>`EXPLAIN SELECT count(*) FROM events WHERE product_id = ${productId} AND received_at >= ${from}::timestamptz AND received_at < ${to}::timestamptz`.execute(
      storage.db,
    );
    const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
    assert.match(text, new RegExp(monthOf(1).name));
    for (const other of [monthOf(0).name, monthOf(2).name, 'events_default'])
      assert.doesNotMatch(text, new RegExp(`\\b${other}\\b`));
  });

  it('retention drops whole old months with their idempotency keys; newer events and keys stay', async () => {
    await sql`CREATE TABLE events_p2020_01 PARTITION OF events FOR VALUES FROM ('2020-01-01 00:00:00+00') TO ('2020-02-01 00:00:00+00')`.execute(
      storage.db,
    );
    const january = event(productId, 'old-jan', '2020-01-10T00:00:00.000Z');
    const march = event(productId, 'old-mar', '2020-03-10T00:00:00.000Z');
    const june = event(productId, 'kept-jun', '2020-06-20T00:00:00.000Z');
    const recent = event(productId, 'recent', new Date().toISOString());
    await storage.events.insertMany([january, march, june, recent]);
    assert.equal(await partitionOf(january.id), 'events_p2020_01');
    assert.equal(await partitionOf(march.id), 'events_default');

    assert.deepEqual(await dropEventPartitionsBefore(storage.db, '2020-06-15T12:00:00Z'), ['events_p2020_01']);
    assert.equal(await storage.events.get(productId, january.id), undefined);
    assert.equal(await storage.events.get(productId, march.id), undefined);
    assert.ok(await storage.events.get(productId, june.id), 'June is after the cutoff month');

    const keys = await sql<{
      external_id: string;
    }>`SELECT e.external_id FROM unnest(ARRAY['old-jan', 'old-mar', 'kept-jun', 'recent']) AS e(external_id)
        WHERE EXISTS (SELECT 1 FROM event_dedup WHERE product_id = ${productId} AND key_hash = inlet_event_dedup_key('api', e.external_id))
        ORDER BY e.external_id`.execute(storage.db);
    assert.deepEqual(
      keys.rows.map((row) => row.external_id),
      ['kept-jun', 'recent'],
    );

    const outcomes = await storage.events.insertMany([
      event(productId, 'old-jan', new Date().toISOString()),
      event(productId, 'recent', new Date().toISOString()),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'duplicate'],
      'a dropped event is stored anew; a kept one is still a duplicate',
    );
    assert.equal(outcomes[1]!.event.id, recent.id);
  });

  it('every primary and unique key of a distributable table starts with product_id (Citus)', async () => {
    // products and api_keys are Citus reference tables (a key is looked up by its hash before its
    // product is known); inlet_migrations, background_leases and installation_secrets (migration 700: a
    // background task's lease, the erasure HMAC key) stay on the coordinator.
    const referenceOrLocal = ['products', 'api_keys', 'inlet_migrations', 'background_leases', 'installation_secrets'];
    const keys = await sql<{ table_name: string; index_name: string; first_column: string }>`
      SELECT t.relname AS table_name, i.relname AS index_name, a.attname AS first_column
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
       WHERE (x.indisunique OR x.indisprimary)
         AND t.relnamespace = current_schema()::regnamespace
         AND NOT t.relispartition`.execute(storage.db);
    assert.ok(keys.rows.some((row) => row.table_name === 'event_dedup'));
    const offending = keys.rows.filter(
      (row) => !referenceOrLocal.includes(row.table_name) && row.first_column !== 'product_id',
    );
    assert.deepEqual(offending, []);
  });
});
