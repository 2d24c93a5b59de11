// Retention (governance.md §4, the test of §5): per product `retention.events_days` through the admin
// API; the background task deletes exactly the events received before the limit, in batches, while
// ingest runs, and nothing of a product without a limit; one instance at a time (a lease); a metric of
// rows deleted and of the oldest event kept.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { uuidv7 } from '../src/domain/ids.js';
import { createMetrics } from '../src/services/metrics.js';
import { createRetentionService } from '../src/services/retention-service.js';
import { GENTLE_DEFAULTS } from '../src/services/gentle-batches.js';
import type { EventInsert } from '../src/storage/types.js';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp({ retentionIntervalMs: 0 });
});
after(async () => ctx.close());

const DAY = 86_400_000;

function stored(productId: string, receivedAt: string, externalId: string): EventInsert {
  return {
    id: uuidv7(Date.parse(receivedAt)),
    productId,
    source: 'api',
    externalId,
    eventType: 'page',
    action: 'viewed',
    canonicalName: 'page_viewed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: 'u-ret',
    occurredAt: receivedAt,
    receivedAt,
    properties: {},
    propertiesJson: '{}',
    apiKeyId: null,
  };
}

async function seed(productId: string, count: number, receivedAt: string, prefix: string): Promise<void> {
  for (let at = 0; at < count; at += 500) {
    const rows = Array.from({ length: Math.min(500, count - at) }, (_, i) => stored(productId, receivedAt, `${prefix}-${at + i}`));
    await ctx.services.storage.events.insertMany(rows);
  }
}

async function countEvents(productId: string, before?: string): Promise<number> {
  let query = ctx.services.storage.db.selectFrom('events').select((eb) => eb.fn.countAll().as('n')).where('product_id', '=', productId);
  if (before !== undefined) query = query.where('received_at', '<', before);
  return Number((await query.executeTakeFirstOrThrow()).n);
}

const patch = (productId: string, payload: unknown) =>
  ctx.app.inject({ method: 'PATCH', url: `/admin/v1/products/${productId}`, headers: adminHeaders(), payload: payload as object });

describe('retention settings', () => {
  it('PATCH sets and clears retention.events_days; the product shows it in GET /products', async () => {
    const product = await ctx.product('settings');
    const set = await patch(product.id, { retention: { events_days: 30 } });
    assert.equal(set.statusCode, 200, set.body);
    assert.deepEqual(set.json().data.retention, { events_days: 30 });
    const listed = (await ctx.app.inject({ method: 'GET', url: '/admin/v1/products', headers: adminHeaders() })).json().data;
    assert.deepEqual(listed.find((p: { id: string }) => p.id === product.id).retention, { events_days: 30 });
    assert.deepEqual((await patch(product.id, { retention: { events_days: null } })).json().data.retention, { events_days: null });
  });

  it('refuses 0, fractions and unknown fields with 400 naming the field; 404 for an unknown product', async () => {
    const product = await ctx.product('bad-settings');
    for (const events_days of [0, 1.5, '30']) {
      const res = await patch(product.id, { retention: { events_days } });
      assert.equal(res.statusCode, 400, JSON.stringify(events_days));
      assert.ok(problemOf(res).errors?.some((e) => e.pointer.startsWith('/retention/events_days')), res.body);
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
    const oldCount = GENTLE_DEFAULTS.max * 2 + 345; // several batches whatever their size
    await seed(limited.id, oldCount, old, 'old');
    await seed(limited.id, 300, recent, 'recent');
    await seed(unlimited.id, 100, old, 'other');
    assert.equal((await patch(limited.id, { retention: { events_days: 30 } })).statusCode, 200);

    let stop = false;
    let ingested = 0;
    const sender = (async () => {
      while (!stop) {
        const res = await ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(limited.eventsKey), payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'live' } });
        assert.equal(res.statusCode, 201);
        ingested++;
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
    assert.equal(await countEvents(limited.id), 300 + ingested, 'the newer events and every one ingested meanwhile are kept');
    assert.equal(await countEvents(unlimited.id), 100, 'a product without a limit keeps everything');

    const metrics = await ctx.services.metrics.registry.getSingleMetricAsString('inlet_retention_deleted_events_total');
    assert.match(metrics, new RegExp(`product_id="${limited.id}"} ${oldCount}\\b`));
    const oldest = await ctx.services.metrics.registry.getSingleMetricAsString('inlet_retention_oldest_event_timestamp_seconds');
    assert.match(oldest, new RegExp(`product_id="${limited.id}"} ${Date.parse(recent) / 1000}\\b`));

    // The idempotency keys went with the events: a retry of a deleted event's external_id is stored anew.
    const retry = await ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(limited.eventsKey), payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'u-ret', external_id: 'old-7' } });
    assert.equal(retry.statusCode, 201);
    const kept = await ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(limited.eventsKey), payload: { event: 'page_viewed', subject_type: 'user', subject_id: 'u-ret', external_id: 'recent-7' } });
    assert.equal(kept.statusCode, 200, 'a kept event still deduplicates');
  });

  it('one instance at a time: a second runner does nothing while the first holds the lease', async () => {
    const other = createRetentionService(ctx.services.storage, createMetrics({ defaultMetrics: false }), { intervalMs: 0, holder: 'other-instance' });
    const first = await ctx.services.retention.runOnce();
    assert.equal(first.ran, true);
    assert.deepEqual(await other.runOnce(), { deleted: {}, ran: false });
  });
});
