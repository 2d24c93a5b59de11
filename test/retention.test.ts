// Retention (governance.md §4, the test of §5): per product `retention.events_days` through the admin
// API; the background task deletes exactly the events received before the limit, in batches, while
// ingest runs, and nothing of a product without a limit; one instance at a time (a lease); a metric of
// rows deleted and of the oldest event kept. On PostgreSQL whole monthly partitions are dropped when every
// product with rows in them allows it, without queueing ingest behind a long reader.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pg from 'pg';
import { uuidv7 } from '../src/domain/ids.js';
import { createMetrics } from '../src/services/metrics.js';
import { createRetentionService } from '../src/services/retention-service.js';
import type { EventInsert } from '../src/storage/types.js';
import { eventRow } from './event-rows.js';
import {
  adminHeaders,
  bearer,
  createTestApp,
  dialect,
  eventProduct,
  postgresUrl,
  problemOf,
  type TestContext,
} from './helpers.js';

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp({ retentionIntervalMs: 0 });
});
after(async () => ctx.close());

const DAY = 86_400_000;

function stored(productId: string, receivedAt: string, externalId: string): EventInsert {
  return eventRow(productId, externalId, {
    id: uuidv7(Date.parse(receivedAt)),
    subjectId: 'u-ret',
    occurredAt: receivedAt,
    receivedAt,
  });
}

async function seed(productId: string, count: number, receivedAt: string, prefix: string): Promise<void> {
  for (let at = 0; at < count; at += 500) {
    const rows = Array.from({ length: Math.min(500, count - at) }, (_, i) =>
      stored(productId, receivedAt, `${prefix}-${at + i}`),
    );
    await ctx.services.storage.events.insertMany(rows);
  }
}

async function countEvents(productId: string, before?: string): Promise<number> {
  let query = ctx.services.storage.db
    .selectFrom('events')
    .select((eb) => eb.fn.countAll().as('n'))
    .where('product_id', '=', eventProduct(productId));
  // SQLite stores event times as milliseconds (migration 853).
  if (before !== undefined) query = query.where('received_at', '<', dialect === 'sqlite' ? Date.parse(before) : before);
  return Number((await query.executeTakeFirstOrThrow()).n);
}

const patch = (productId: string, payload: unknown) =>
  ctx.app.inject({
    method: 'PATCH',
    url: `/admin/v1/products/${productId}`,
    headers: adminHeaders(),
    payload: payload as object,
  });

describe('retention settings', () => {
  it('PATCH sets and clears retention.events_days; the product shows it in GET /products', async () => {
    const product = await ctx.product('settings');
    const set = await patch(product.id, { retention: { events_days: 30 } });
    assert.equal(set.statusCode, 200, set.body);
    assert.deepEqual(set.json().data.retention, { events_days: 30 });
    const listed = (await ctx.app.inject({ method: 'GET', url: '/admin/v1/products', headers: adminHeaders() })).json()
      .data;
    assert.deepEqual(listed.find((p: { id: string }) => p.id === product.id).retention, { events_days: 30 });
    assert.deepEqual((await patch(product.id, { retention: { events_days: null } })).json().data.retention, {
      events_days: null,
    });
  });

  it('refuses 0, fractions and unknown fields with 400 naming the field; 404 for an unknown product', async () => {
    const product = await ctx.product('bad-settings');
    for (const events_days of [0, 1.5, '30']) {
      const res = await patch(product.id, { retention: { events_days } });
      assert.equal(res.statusCode, 400, JSON.stringify(events_days));
      assert.ok(
        problemOf(res).errors?.some((e) => e.pointer.startsWith('/retention/events_days')),
        res.body,
      );
    }
    assert.equal((await patch(product.id, { retention: { events_days: 3 }, name: 'x' })).statusCode, 400);
    assert.equal((await patch('prd_nope', { retention: { events_days: 3 } })).statusCode, 404);
  });
});

describe('retention: exactly the older events removed while ingest runs', () => {
  it('deletes every event received before the limit, keeps the rest and everything ingested meanwhile', async () => {
    const limited = await ctx.product('limited');
    const unlimited = await ctx.product('unlimited');
    const now = Date.now();
    const old = new Date(now - 40 * DAY).toISOString();
    const recent = new Date(now - 29 * DAY).toISOString();
    const oldCount = ctx.services.storage.capabilities.deletePacing.max * 2 + 345; // several batches whatever their size
    await seed(limited.id, oldCount, old, 'old');
    await seed(limited.id, 300, recent, 'recent');
    await seed(unlimited.id, 100, old, 'other');
    // Statistics as autovacuum keeps them on a live table (the seeding above was a bulk import).
    if (dialect === 'postgres') await sql`ANALYZE events`.execute(ctx.services.storage.db);
    assert.equal((await patch(limited.id, { retention: { events_days: 30 } })).statusCode, 200);

    let stop = false;
    let ingested = 0;
    const sender = (async () => {
      while (!stop) {
        const res = await ctx.app.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(limited.eventsKey),
          payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'live' },
        });
        assert.equal(res.statusCode, 201);
        ingested++;
        // A steady stream, not a spin: a spinning sender starves the pass of the event loop, its batches
        // shrink to the minimum and the test burns CPU for seconds.
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 30));
    const pass = await ctx.services.retention.runOnce();
    stop = true;
    await sender;
    assert.ok(ingested > 0, 'ingest ran during the pass');

    assert.equal(pass.ran, true);
    assert.equal(pass.deleted[limited.id], oldCount);
    const cutoff = new Date(now - 30 * DAY).toISOString();
    assert.equal(await countEvents(limited.id, cutoff), 0, 'nothing older than the limit is left');
    assert.equal(
      await countEvents(limited.id),
      300 + ingested,
      'the newer events and every one ingested meanwhile are kept',
    );
    assert.equal(await countEvents(unlimited.id), 100, 'a product without a limit keeps everything');

    const metrics = await ctx.services.metrics.registry.getSingleMetricAsString('inlet_retention_deleted_events_total');
    assert.match(metrics, new RegExp(`product_id="${limited.id}"} ${oldCount}\\b`));
    const oldest = await ctx.services.metrics.registry.getSingleMetricAsString(
      'inlet_retention_oldest_event_timestamp_seconds',
    );
    assert.match(oldest, new RegExp(`product_id="${limited.id}"} ${Date.parse(recent) / 1000}\\b`));

    // The idempotency keys went with the events: a retry of a deleted event's external_id is stored anew.
    const retry = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(limited.eventsKey),
      payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'u-ret', external_id: 'old-7' },
    });
    assert.equal(retry.statusCode, 201);
    const kept = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(limited.eventsKey),
      payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'u-ret', external_id: 'recent-7' },
    });
    assert.equal(kept.statusCode, 200, 'a kept event still deduplicates');
  });

  it('one instance at a time: a second runner does nothing while the first holds the lease, whatever its clock', async () => {
    const other = createRetentionService(ctx.services.storage, createMetrics({ defaultMetrics: false }), {
      intervalMs: 0,
      holder: 'other-instance',
    });
    const first = await ctx.services.retention.runOnce();
    assert.equal(first.ran, true);
    assert.deepEqual(await other.runOnce(), { deleted: {}, ran: false, dropped: [], kept: [] });
    // The lease is judged on the database's clock: an instance whose own clock runs past the lease's end does not
    // take it over either.
    const ahead = createRetentionService(ctx.services.storage, createMetrics({ defaultMetrics: false }), {
      intervalMs: 0,
      holder: 'instance-ahead',
      now: () => Date.now() + 10 * 60_000,
    });
    assert.deepEqual(await ahead.runOnce(), { deleted: {}, ran: false, dropped: [], kept: [] });
  });
});

const postgresOnly =
  dialect === 'postgres'
    ? false
    : 'PostgreSQL only: events is partitioned by month there (on SQLite the batch deletes above are all there is)';

describe('retention drops whole monthly partitions (PostgreSQL)', { skip: postgresOnly }, () => {
  let pctx: TestContext;
  let limited: { id: string; eventsKey: string };
  let longer: { id: string; eventsKey: string };
  let keeper: { id: string; eventsKey: string };
  const recent = new Date(Date.now() - DAY).toISOString();

  before(async () => {
    if (postgresOnly) return;
    pctx = await createTestApp({ retentionIntervalMs: 0 });
    limited = await pctx.product('limited-30');
    longer = await pctx.product('limited-60');
    keeper = await pctx.product('keeps-everything');
    for (const month of ['2021_01', '2021_02', '2021_03']) await createMonth(month);
    for (const [product, days] of [
      [limited, 30],
      [longer, 60],
    ] as const) {
      assert.equal(
        (
          await pctx.app.inject({
            method: 'PATCH',
            url: `/admin/v1/products/${product.id}`,
            headers: adminHeaders(),
            payload: { retention: { events_days: days } },
          })
        ).statusCode,
        200,
      );
    }
  });
  after(async () => pctx?.close());

  /** A monthly partition as inlet_ensure_event_partitions makes them, for a month long past. */
  async function createMonth(month: string): Promise<void> {
    const [year, m] = month.split('_').map(Number) as [number, number];
    const from = new Date(Date.UTC(year, m - 1, 1)).toISOString();
    const to = new Date(Date.UTC(year, m, 1)).toISOString();
    await sql`CREATE TABLE ${sql.table(`events_p${month}`)} PARTITION OF events FOR VALUES FROM (${sql.lit(from)}) TO (${sql.lit(to)})`.execute(
      pctx.services.storage.db,
    );
  }
  const seedIn = async (productId: string, count: number, receivedAt: string, prefix: string) => {
    for (let at = 0; at < count; at += 500) {
      const rows = Array.from({ length: Math.min(500, count - at) }, (_, i) =>
        stored(productId, receivedAt, `${prefix}-${at + i}`),
      );
      await pctx.services.storage.events.insertMany(rows);
    }
  };
  const partitionExists = async (name: string) =>
    (
      await sql<{
        n: number;
      }>`SELECT count(*)::int AS n FROM pg_class WHERE relname = ${name} AND relnamespace = current_schema()::regnamespace`.execute(
        pctx.services.storage.db,
      )
    ).rows[0]!.n === 1;
  const rowsOf = async (productId: string, from?: string, to?: string) => {
    let query = pctx.services.storage.db
      .selectFrom('events')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('product_id', '=', productId);
    if (from !== undefined) query = query.where('received_at', '>=', from);
    if (to !== undefined) query = query.where('received_at', '<', to);
    return Number((await query.executeTakeFirstOrThrow()).n);
  };
  const keysOf = async (productId: string, before: string) =>
    (
      await sql<{
        n: number;
      }>`SELECT count(*)::int AS n FROM event_dedup WHERE product_id = ${productId} AND received_at < ${before}::timestamptz`.execute(
        pctx.services.storage.db,
      )
    ).rows[0]!.n;
  /** Single events through the HTTP route while `during` runs; answers how many and the slowest. */
  async function ingestDuring<T>(
    productKey: string,
    during: () => Promise<T>,
  ): Promise<{ result: T; sent: number; slowestMs: number }> {
    let stop = false;
    let sent = 0;
    let slowestMs = 0;
    const sender = (async () => {
      while (!stop) {
        const started = performance.now();
        const res = await pctx.app.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(productKey),
          payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'live' },
        });
        slowestMs = Math.max(slowestMs, performance.now() - started);
        assert.equal(res.statusCode, 201, res.body);
        sent++;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 20));
    let result: T;
    try {
      result = await during();
    } finally {
      stop = true;
      await sender;
    }
    return { result, sent, slowestMs };
  }

  it("drops a month whose rows are past every present product's limit, counts its rows, keeps a month another product keeps", async () => {
    await seedIn(
      limited.id,
      ctx.services.storage.capabilities.deletePacing.max + 700,
      '2021-01-10T10:00:00.000Z',
      'jan',
    );
    await seedIn(longer.id, 300, '2021-01-20T10:00:00.000Z', 'jan-longer');
    await seedIn(limited.id, 50, '2021-03-05T10:00:00.000Z', 'mar');
    await seedIn(keeper.id, 5, '2021-03-06T10:00:00.000Z', 'mar-keeper');
    await seedIn(limited.id, 20, recent, 'recent');
    await seedIn(longer.id, 3, recent, 'recent-longer');

    const metrics = createMetrics({ defaultMetrics: false });
    const retention = createRetentionService(pctx.services.storage, metrics, {
      intervalMs: 0,
      holder: 'partition-test',
    });
    const { result: pass, sent } = await ingestDuring(limited.eventsKey, () => retention.runOnce());
    await retention.close();
    assert.ok(sent > 0, 'ingest went on during the pass');

    assert.deepEqual(
      pass.dropped,
      ['events_p2021_01', 'events_p2021_02'],
      'January (two limited products) and the empty February',
    );
    assert.deepEqual(
      pass.kept.filter((k) => k.name.startsWith('events_p2021')),
      [{ name: 'events_p2021_03', reason: 'refused' }],
    );
    assert.equal(await partitionExists('events_p2021_01'), false, 'the partition table is gone');
    assert.equal(await partitionExists('events_p2021_03'), true, 'March holds rows of a product without a limit');
    assert.deepEqual(pass.deleted, {
      [limited.id]: ctx.services.storage.capabilities.deletePacing.max + 700 + 50,
      [longer.id]: 300,
    });

    // March: the limited product's rows went in batches, the other product's stayed.
    assert.equal(await rowsOf(limited.id, undefined, new Date(Date.now() - 30 * DAY).toISOString()), 0);
    assert.equal(await rowsOf(keeper.id), 5);
    assert.equal(await rowsOf(limited.id), 20 + sent);
    assert.equal(await rowsOf(longer.id), 3);

    const deleted = await metrics.registry.getSingleMetricAsString('inlet_retention_deleted_events_total');
    assert.match(
      deleted,
      new RegExp(`product_id="${limited.id}"} ${ctx.services.storage.capabilities.deletePacing.max + 750}\\b`),
    );
    assert.match(deleted, new RegExp(`product_id="${longer.id}"} 300\\b`));
    const oldest = await metrics.registry.getSingleMetricAsString('inlet_retention_oldest_event_timestamp_seconds');
    assert.match(oldest, new RegExp(`product_id="${limited.id}"} ${Date.parse(recent) / 1000}\\b`));
    assert.match(oldest, new RegExp(`product_id="${longer.id}"} ${Date.parse(recent) / 1000}\\b`));
    const drops = await metrics.registry.getSingleMetricAsString('inlet_retention_partition_drops_total');
    assert.match(drops, /outcome="dropped"} 2\b/);

    // Idempotency keys: those of dropped and deleted events are gone (a retry is stored anew), those of
    // the product that keeps its events are kept (a retry is still a duplicate).
    assert.equal(await keysOf(limited.id, '2021-04-01T00:00:00Z'), 0);
    assert.equal(await keysOf(longer.id, '2021-04-01T00:00:00Z'), 0);
    assert.equal(await keysOf(keeper.id, '2021-04-01T00:00:00Z'), 5);
    const now = new Date().toISOString();
    const outcomes = await pctx.services.storage.events.insertMany([
      stored(limited.id, now, 'jan-3'),
      stored(keeper.id, now, 'mar-keeper-2'),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'duplicate'],
    );
  });

  it('gives up the drop quickly behind a long reader, trims the month with batch deletes, and ingest goes on', async () => {
    await createMonth('2021_05');
    await seedIn(limited.id, 400, '2021-05-15T10:00:00.000Z', 'may');
    // Another session reads `events` in a long transaction (an export, say): DROP TABLE would need ACCESS
    // EXCLUSIVE, and while it waited every insert would queue behind it.
    const reader = new pg.Client({ connectionString: postgresUrl });
    await reader.connect();
    try {
      await reader.query(`SET search_path TO ${pctx.database.postgresSchema}`);
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM events');
      const metrics = createMetrics({ defaultMetrics: false });
      const retention = createRetentionService(pctx.services.storage, metrics, {
        intervalMs: 0,
        holder: 'lock-test',
        dropLockTimeoutMs: 200,
      });
      const started = performance.now();
      const { result: pass, sent, slowestMs } = await ingestDuring(limited.eventsKey, () => retention.runOnce());
      const tookMs = performance.now() - started;
      await retention.close();

      assert.deepEqual(
        pass.kept.find((k) => k.name === 'events_p2021_05'),
        { name: 'events_p2021_05', reason: 'lock_timeout' },
      );
      assert.equal(await partitionExists('events_p2021_05'), true);
      assert.equal(
        await rowsOf(limited.id, '2021-05-01T00:00:00Z', '2021-06-01T00:00:00Z'),
        0,
        'the batch deletes trimmed May',
      );
      assert.equal(pass.deleted[limited.id], 400);
      assert.match(
        await metrics.registry.getSingleMetricAsString('inlet_retention_partition_drops_total'),
        /outcome="lock_timeout"} 1\b/,
      );
      assert.ok(sent > 0, 'ingest went on');
      // Generous bounds for a loaded machine; without lock_timeout the pass and the inserts would wait for
      // the reader (here: for ever).
      assert.ok(tookMs < 10_000, `the pass gave up the drop quickly (${tookMs.toFixed(0)} ms)`);
      assert.ok(slowestMs < 5_000, `no insert waited long behind the drop (slowest ${slowestMs.toFixed(0)} ms)`);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
    }
    // The reader gone, the next pass drops the (now empty) month.
    const retention = createRetentionService(pctx.services.storage, createMetrics({ defaultMetrics: false }), {
      intervalMs: 0,
      holder: 'lock-test-2',
    });
    const pass = await retention.runOnce();
    await retention.close();
    assert.ok(pass.dropped.includes('events_p2021_05'), JSON.stringify(pass));
    assert.equal(await partitionExists('events_p2021_05'), false);
  });
});
