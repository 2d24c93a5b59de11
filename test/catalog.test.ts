// The event catalogue (governance.md §1, §5 "Catalogue"): names, property paths and JSON types with
// counts after a mixed load from every entry point, identify traits, no values kept, sorting, paging
// and prefix, the overflow bounds, and counts that add up across two instances and a restart.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildApp } from '../src/http/app.js';
import {
  adminHeaders,
  bearer,
  createTestApp,
  createTestServices,
  dialect,
  problemOf,
  reusableDatabase,
  type TestContext,
} from './helpers.js';

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });
const SECRET = 'value-that-must-never-be-catalogued';

let ctx: TestContext;
let productId: string;
let key: string;
let keyId: string;
before(async () => {
  ctx = await createTestApp();
  const product = await ctx.product('catalog');
  productId = product.id;
  key = product.eventsKey;
  const keys = await ctx.app.inject({
    method: 'GET',
    url: `/admin/v1/products/${productId}/keys`,
    headers: adminHeaders(),
  });
  keyId = (keys.json().data as Array<{ id: string; kind: string }>).find((k) => k.kind === 'events')!.id;
});
after(async () => ctx.close());

const get = (path: string) =>
  ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${productId}${path}`, headers: adminHeaders() });

describe('event catalogue', () => {
  before(async () => {
    const v2 = (properties: Record<string, unknown>, id: string) =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(key),
        payload: {
          event_type: 'order',
          action: 'completed',
          subject_type: 'user',
          subject_id: 'u1',
          external_id: id,
          properties,
        },
      });
    assert.equal(
      (await v2({ plan: 'pro', amount: 12.5, meta: { source: SECRET, depth: { a: { b: 1 } } } }, 'o1')).statusCode,
      201,
    );
    assert.equal((await v2({ plan: 7, amount: 3, tags: ['x'], gift: null }, 'o2')).statusCode, 201);
    // A duplicate is not stored again, so it is not counted again.
    assert.equal((await v2({ plan: 7, amount: 3, tags: ['x'], gift: null }, 'o2')).statusCode, 200);
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(key),
      payload: {
        events: [
          {
            event: 'order.completed',
            subject_type: 'user',
            subject_id: 'u2',
            properties: { plan: 'free', paid: true },
          },
          { event: 'bad', subject_type: 'user', subject_id: 'u2' },
        ],
      },
    });
    assert.equal(batch.statusCode, 207);
    const v1 = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(key),
      payload: {
        event_type: 'user_signed_up',
        subject_type: 'user',
        subject_id: 'u3',
        occurred_at: '2026-01-01T00:00:00Z',
        metadata: { referrer: 'x' },
      },
    });
    assert.equal(v1.statusCode, 201, v1.body);
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: {
        batch: [
          { type: 'track', event: 'Order Completed', userId: 'u4', messageId: 's1', properties: { plan: 'team' } },
          {
            type: 'identify',
            userId: 'u4',
            messageId: 's2',
            traits: { email: 'a@example.com', age: 40, address: { city: SECRET } },
          },
        ],
      },
    });
    assert.equal(segment.json().accepted, 2, segment.body);
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(key),
      payload: { external_id: 'u5', traits: { email: 'b@example.com', vip: true } },
    });
    assert.equal(identify.statusCode, 201, identify.body);
  });

  it('lists every stored name with counts, first/last seen, sources and keys', async () => {
    const res = await get('/catalog/events?sort=name');
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(
      body.data.map((e: { canonical_name: string; count: number }) => [e.canonical_name, e.count]),
      [
        ['order_completed', 4],
        ['user_identified', 1],
        ['user_signed_up', 1],
      ],
    );
    const order = body.data[0];
    assert.equal(order.event_type, 'order');
    assert.equal(order.action, 'completed');
    assert.deepEqual(order.sources, ['api', 'segment']);
    assert.deepEqual(order.key_ids, [keyId]);
    assert.ok(order.first_seen <= order.last_seen);
    assert.equal(body.meta.overflow, 0);
    assert.equal(body.meta.next_cursor, null);
  });

  it('shows each property path with its observed JSON types and counts, nested to depth 3, and no values', async () => {
    const res = await get('/catalog/events/order_completed');
    assert.equal(res.statusCode, 200, res.body);
    const { data } = res.json();
    const types = Object.fromEntries(
      data.properties.map((p: { path: string; types: Record<string, number> }) => [p.path, p.types]),
    );
    assert.deepEqual(types, {
      amount: { integer: 1, number: 1 },
      gift: { null: 1 },
      meta: { object: 1 },
      'meta.depth': { object: 1 },
      'meta.depth.a': { object: 1 },
      'meta.source': { string: 1 },
      paid: { boolean: 1 },
      plan: { integer: 1, string: 3 },
      tags: { array: 1 },
    });
    assert.equal(data.properties_overflow, 0);
    assert.ok(!res.body.includes(SECRET));
    const traits = await get('/catalog/traits');
    assert.deepEqual(
      Object.fromEntries(
        traits.json().data.map((p: { path: string; types: Record<string, number> }) => [p.path, p.types]),
      ),
      {
        address: { object: 1 },
        'address.city': { string: 1 },
        age: { integer: 1 },
        email: { string: 2 },
        vip: { boolean: 1 },
      },
    );
    // Nothing of any value reached the catalogue's tables.
    for (const table of ['catalog_events', 'catalog_properties', 'catalog_event_origins']) {
      const rows = await ctx.services.storage.db
        .selectFrom(table as 'events')
        .selectAll()
        .execute();
      assert.ok(rows.length > 0);
      assert.ok(!JSON.stringify(rows).includes(SECRET), table);
      assert.ok(!JSON.stringify(rows).includes('example.com'), table);
    }
  });

  it('answers 404 for a name never seen and for an unknown product', async () => {
    assert.equal(problemOf(await get('/catalog/events/never_seen')).code, 'not_found');
    const res = await ctx.app.inject({
      method: 'GET',
      url: '/admin/v1/products/prd_nope/catalog/events',
      headers: adminHeaders(),
    });
    assert.equal(res.statusCode, 404);
    assert.equal(
      (await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${productId}/catalog/events` })).statusCode,
      401,
    );
  });

  it('sorts by count or last_seen, filters by prefix and pages with a cursor', async () => {
    const byCount = (await get('/catalog/events?sort=count'))
      .json()
      .data.map((e: { canonical_name: string }) => e.canonical_name);
    assert.equal(byCount[0], 'order_completed');
    const prefixed = (await get('/catalog/events?prefix=user_'))
      .json()
      .data.map((e: { canonical_name: string }) => e.canonical_name)
      .sort();
    assert.deepEqual(prefixed, ['user_identified', 'user_signed_up']);
    const first = (await get('/catalog/events?sort=name&limit=2')).json();
    assert.equal(first.data.length, 2);
    const second = (await get(`/catalog/events?sort=name&limit=2&cursor=${first.meta.next_cursor}`)).json();
    assert.deepEqual(
      second.data.map((e: { canonical_name: string }) => e.canonical_name),
      ['user_signed_up'],
    );
    assert.equal(second.meta.next_cursor, null);
    assert.equal((await get('/catalog/events?limit=0')).statusCode, 400);
    assert.equal((await get('/catalog/events?sort=size')).statusCode, 400);
  });
});

describe('catalogue bounds', () => {
  it('a property path longer than 256 characters is counted as overflow, not catalogued (and the flush still works)', async () => {
    const long = 'k'.repeat(3000);
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(key),
      payload: { event: 'long.keys', subject_type: 'user', subject_id: 'u', properties: { [long]: 1, short: 2 } },
    });
    assert.equal(res.statusCode, 201, res.body);
    const detail = (await get('/catalog/events/long_keys')).json().data;
    assert.deepEqual(
      detail.properties.map((p: { path: string }) => p.path),
      ['short'],
    );
    assert.equal(detail.properties_overflow, 1);
  });

  it('past INLET_CATALOG_MAX_EVENTS names and INLET_CATALOG_MAX_PROPERTIES paths, counts overflow and shows it', async () => {
    const small = await createTestApp({ catalogMaxEvents: 2, catalogMaxProperties: 3 });
    try {
      const product = await small.product('bounded');
      const send = (events: unknown[]) =>
        small.app.inject({
          method: 'POST',
          url: '/api/v2/events/batch',
          headers: bearer(product.eventsKey),
          payload: { events },
        });
      const ev = (name: string, properties: Record<string, unknown>) => ({
        event: name,
        subject_type: 'user',
        subject_id: 'u',
        properties,
      });
      await send([ev('a.one', { p1: 1, p2: 2 }), ev('a.one', { p1: 1 })]);
      // Flushed between requests: the bound is decided against what is stored.
      await small.services.governance.catalog.flush();
      await send([
        ev('a.one', { p3: 'x', p4: 'y', p5: 'z' }),
        ev('b.two', {}),
        ev('c.three', {}),
        ev('d.four', {}),
        ev('d.four', {}),
      ]);
      const list = (
        await small.app.inject({
          method: 'GET',
          url: `/admin/v1/products/${product.id}/catalog/events?sort=name`,
          headers: adminHeaders(),
        })
      ).json();
      assert.deepEqual(
        list.data.map((e: { canonical_name: string }) => e.canonical_name),
        ['a_one', 'b_two'],
      );
      assert.equal(list.meta.overflow, 3); // c_three once, d_four twice
      const detail = (
        await small.app.inject({
          method: 'GET',
          url: `/admin/v1/products/${product.id}/catalog/events/a_one`,
          headers: adminHeaders(),
        })
      ).json().data;
      assert.equal(detail.properties.length, 3);
      assert.equal(detail.properties_overflow, 2);
      assert.equal(detail.count, 3);
    } finally {
      await small.close();
    }
  });
});

describe('catalogue across instances', () => {
  // SQLite has one writing instance (README): there the two "instances" are one, still under concurrent batches.
  it(`${dialect === 'postgres' ? 'two instances on one database' : 'one instance'}, concurrent batches: counts add up exactly, and survive a restart`, async () => {
    const database = reusableDatabase();
    const a = await createTestServices({ catalogFlushMs: 50 }, database);
    const appA = await buildApp(a.services, { logger: false });
    const b =
      dialect === 'postgres'
        ? await createTestServices({ catalogFlushMs: 50 }, { ...database, drop: async () => {} })
        : a;
    const appB = dialect === 'postgres' ? await buildApp(b.services, { logger: false }) : appA;
    try {
      const created = await appA.inject({
        method: 'POST',
        url: '/admin/v1/products',
        headers: adminHeaders(),
        payload: { name: 'multi' },
      });
      const id = created.json().data.id as string;
      const keyRes = await appA.inject({
        method: 'POST',
        url: `/admin/v1/products/${id}/keys`,
        headers: adminHeaders(),
        payload: { kind: 'events' },
      });
      const k = keyRes.json().data.key as string;
      const batch = (n: number) => ({
        events: Array.from({ length: n }, (_, i) => ({
          event: 'page.viewed',
          subject_type: 'user',
          subject_id: `u${i}`,
          properties: { path: '/x', n: i },
        })),
      });
      const sends = [];
      for (let round = 0; round < 10; round++) {
        sends.push(
          appA.inject({ method: 'POST', url: '/api/v2/events/batch', headers: bearer(k), payload: batch(50) }),
        );
        sends.push(
          appB.inject({ method: 'POST', url: '/api/v2/events/batch', headers: bearer(k), payload: batch(50) }),
        );
      }
      for (const res of await Promise.all(sends)) assert.equal(res.statusCode, 200, res.body);
      await Promise.all([a.services.governance.catalog.flush(), b.services.governance.catalog.flush()]);
      const read = async () =>
        (
          await appA.inject({
            method: 'GET',
            url: `/admin/v1/products/${id}/catalog/events/page_viewed`,
            headers: adminHeaders(),
          })
        ).json().data;
      const detail = await read();
      assert.equal(detail.count, 1000);
      assert.deepEqual(
        Object.fromEntries(
          detail.properties.map((p: { path: string; types: Record<string, number> }) => [p.path, p.types]),
        ),
        { n: { integer: 1000 }, path: { string: 1000 } },
      );
      // B stops (flushing what it holds), a new instance opens the same database: nothing lost or doubled.
      await appB.inject({ method: 'POST', url: '/api/v2/events/batch', headers: bearer(k), payload: batch(7) });
      if (dialect === 'postgres') {
        await appB.close();
        await b.services.close();
      } else {
        await appA.close();
        await a.services.close();
      }
      const c = await createTestServices({}, { ...database, drop: async () => {} });
      try {
        const detailC = await c.services.governance.catalog.getEvent(id, 'page_viewed');
        assert.equal(detailC?.event.count, 1007);
      } finally {
        await c.services.close();
      }
      if (dialect === 'postgres') assert.equal((await read()).count, 1007);
    } finally {
      await appA.close();
      await appB.close().catch(() => {});
      await a.close();
      await b.services.close().catch(() => {});
    }
  });
});
