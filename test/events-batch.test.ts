// POST /api/v2/events/batch (contract §4, §7): envelope errors, per-element results in order,
// 200 vs 207, in-batch duplicates, oversized elements, pointers, deprecation headers, meta counts,
// and that everything answered created/duplicate is really stored.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

let ctx: TestContext;

before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

function batch(key: string, payload: unknown) {
  return ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events/batch',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
}

const ev = (extra: Record<string, unknown> = {}) => ({
  subject_type: 'user',
  subject_id: 'u_1',
  event_type: 'project',
  action: 'created',
  ...extra,
});

interface Item {
  index: number;
  status: string;
  event?: Record<string, unknown> & { uuid: string };
  error?: ReturnType<typeof problemOf>;
}

describe('batch envelope errors fail the whole request', () => {
  let key: string;
  let productId: string;
  before(async () => {
    const p = await ctx.product('batch-envelope');
    key = p.eventsKey;
    productId = p.id;
  });

  const bad: Array<[string, string]> = [
    ['an array instead of an object', JSON.stringify([ev()])],
    ['a string', '"events"'],
    ['null', 'null'],
    ['events missing', '{}'],
    ['events not an array', JSON.stringify({ events: { 0: ev() } })],
    ['events empty', JSON.stringify({ events: [] })],
    ['an unknown envelope field', JSON.stringify({ events: [ev()], extra: 1 })],
  ];
  for (const [why, payload] of bad) {
    it(`400 for ${why}`, async () => {
      const res = await batch(key, payload);
      assert.equal(res.statusCode, 400, res.body);
      assert.ok(['validation_error', 'invalid_json'].includes(problemOf(res).code));
      assert.equal(await ctx.services.storage.events.count(productId), 0);
    });
  }

  it('413 payload_too_large for 1001 events, nothing stored', async () => {
    const res = await batch(key, { events: Array.from({ length: 1001 }, () => ev()) });
    assert.equal(res.statusCode, 413, res.body);
    assert.equal(problemOf(res).code, 'payload_too_large');
    assert.equal(await ctx.services.storage.events.count(productId), 0);
  });

  it('413 payload_too_large for a body over 5 MiB, nothing stored', async () => {
    const big = 'x'.repeat(6000);
    const events = Array.from({ length: 900 }, () => ev({ properties: { big } }));
    const payload = JSON.stringify({ events });
    assert.ok(Buffer.byteLength(payload) > 5 * 1024 * 1024);
    const res = await batch(key, payload);
    assert.equal(res.statusCode, 413, res.body.slice(0, 300));
    assert.equal(problemOf(res).code, 'payload_too_large');
    assert.equal(await ctx.services.storage.events.count(productId), 0);
  });

  it('exactly 1000 events are accepted', async () => {
    const res = await batch(key, { events: Array.from({ length: 1000 }, (_, i) => ev({ external_id: `k-${i}` })) });
    assert.equal(res.statusCode, 200, res.body.slice(0, 300));
    assert.deepEqual(res.json().meta, { created: 1000, duplicates: 0, rejected: 0 });
    assert.equal(await ctx.services.storage.events.count(productId), 1000);
  });
});

describe('batch results', () => {
  it('all valid: 200, one created result per element in request order, meta counts', async () => {
    const p = await ctx.product('batch-ok');
    const res = await batch(p.eventsKey, {
      events: [
        ev({ external_id: 'a' }),
        ev({ event: 'billing.invoice_paid', event_type: undefined, action: undefined }),
        ev({ action: 'archived' }),
      ].map(clean),
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { data: Item[]; meta: Record<string, number> };
    assert.deepEqual(
      body.data.map((d) => [d.index, d.status]),
      [
        [0, 'created'],
        [1, 'created'],
        [2, 'created'],
      ],
    );
    assert.deepEqual(body.meta, { created: 3, duplicates: 0, rejected: 0 });
    assert.equal(body.data[0]!.event!.external_id, 'a');
    assert.equal(body.data[1]!.event!.canonical_name, 'billing_invoice_paid');
    assert.equal(body.data[2]!.event!.action, 'archived');
    assert.equal(body.data[0]!.error, undefined);
    assert.equal(res.headers['deprecation'], undefined);
    assert.equal(res.headers['sunset'], undefined);
    for (const item of body.data) assert.ok(await ctx.services.storage.events.get(p.id, item.event!.uuid));
    assert.equal(await ctx.services.storage.events.count(p.id), 3);
  });

  it('partly invalid: 207, rejected elements carry a problem with pointers like /events/3/action, the rest are stored', async () => {
    const p = await ctx.product('batch-mixed');
    const events = [
      ev({ external_id: 'm-0' }),
      ev({ subject_type: 'team' }),
      42,
      ev({ action: 'Bad-Action' }),
      ev({ ocurred_at: '2026-03-01T12:00:00Z' }),
      ev({ occurred_at: '2026-02-30T00:00:00Z' }),
      ev({ external_id: 'm-6' }),
    ];
    const res = await batch(p.eventsKey, { events });
    assert.equal(res.statusCode, 207, res.body);
    const body = res.json() as { data: Item[]; meta: Record<string, number> };
    assert.deepEqual(
      body.data.map((d) => d.index),
      [0, 1, 2, 3, 4, 5, 6],
    );
    assert.deepEqual(
      body.data.map((d) => d.status),
      ['created', 'rejected', 'rejected', 'rejected', 'rejected', 'rejected', 'created'],
    );
    assert.deepEqual(body.meta, { created: 2, duplicates: 0, rejected: 5 });
    const pointers = (i: number) => body.data[i]!.error!.errors?.map((e) => e.pointer) ?? [];
    assert.ok(pointers(1).includes('/events/1/subject_type'), JSON.stringify(body.data[1]));
    assert.ok(pointers(2).includes('/events/2'), JSON.stringify(body.data[2]));
    assert.ok(pointers(3).includes('/events/3/action'), JSON.stringify(body.data[3]));
    assert.ok(pointers(4).includes('/events/4/ocurred_at'), JSON.stringify(body.data[4]));
    assert.ok(pointers(5).includes('/events/5/occurred_at'), JSON.stringify(body.data[5]));
    for (const i of [1, 2, 3, 4, 5]) {
      const error = body.data[i]!.error!;
      assert.equal(error.code, 'validation_error');
      assert.equal(error.status, 400);
      for (const field of ['type', 'title', 'detail']) assert.ok(field in error, `${field} in element problem`);
      assert.equal(body.data[i]!.event, undefined);
    }
    assert.equal(await ctx.services.storage.events.count(p.id), 2);
  });

  it('everything rejected is still 207 with per-element errors (not an envelope error)', async () => {
    const p = await ctx.product('batch-all-bad');
    const res = await batch(p.eventsKey, { events: [{}, { subject_type: 'user' }] });
    assert.equal(res.statusCode, 207, res.body);
    assert.deepEqual(res.json().meta, { created: 0, duplicates: 0, rejected: 2 });
  });

  it('an in-batch duplicate is reported as duplicate of the earlier element; an earlier stored event as its original', async () => {
    const p = await ctx.product('batch-dups');
    const single = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: ev({ external_id: 'stored-before', properties: { v: 'original' } }),
    });
    assert.equal(single.statusCode, 201);
    const res = await batch(p.eventsKey, {
      events: [
        ev({ external_id: 'dup', properties: { v: 1 } }),
        ev({ external_id: 'dup', properties: { v: 2 }, action: 'deleted' }),
        ev({ external_id: 'stored-before', properties: { v: 'retry' } }),
        ev({ external_id: 'dup', properties: { v: 3 } }),
      ],
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { data: Item[]; meta: Record<string, number> };
    assert.deepEqual(
      body.data.map((d) => d.status),
      ['created', 'duplicate', 'duplicate', 'duplicate'],
    );
    assert.deepEqual(body.meta, { created: 1, duplicates: 3, rejected: 0 });
    assert.deepEqual(body.data[1]!.event, body.data[0]!.event);
    assert.deepEqual(body.data[3]!.event, body.data[0]!.event);
    assert.deepEqual(body.data[2]!.event, single.json().data);
    assert.equal(await ctx.services.storage.events.count(p.id), 2);
    const stored = await ctx.services.storage.events.get(p.id, body.data[0]!.event!.uuid);
    assert.deepEqual(stored?.properties, { v: 1 });
  });

  it('a rejected element does not claim its external_id', async () => {
    const p = await ctx.product('batch-reject-claim');
    const res = await batch(p.eventsKey, {
      events: [ev({ external_id: 'x', action: 'BAD' }), ev({ external_id: 'x' })],
    });
    assert.equal(res.statusCode, 207);
    assert.deepEqual(
      res.json().data.map((d: Item) => d.status),
      ['rejected', 'created'],
    );
  });

  it('an element with a value no backend-neutral store can hold (U+0000) is rejected alone', async () => {
    const p = await ctx.product('batch-nul');
    const res = await batch(p.eventsKey, {
      events: [ev({ external_id: 'n-0' }), ev({ properties: { x: 'a\u0000' } }), ev({ external_id: 'n-2' })],
    });
    assert.equal(res.statusCode, 207, res.body);
    const body = res.json() as { data: Item[] };
    assert.deepEqual(
      body.data.map((d) => d.status),
      ['created', 'rejected', 'created'],
    );
    assert.ok(
      body.data[1]!.error!.errors?.some((e) => e.pointer === '/events/1/properties/x'),
      JSON.stringify(body.data[1]),
    );
    assert.equal(await ctx.services.storage.events.count(p.id), 2);
  });

  it('an oversized element (> 32 KiB of JSON) is rejected with payload_too_large, the rest are stored', async () => {
    const p = await ctx.product('batch-oversized');
    const res = await batch(p.eventsKey, {
      events: [
        ev({ external_id: 'small-1' }),
        ev({ properties: { blob: 'x'.repeat(33 * 1024) } }),
        ev({ external_id: 'small-2' }),
      ],
    });
    assert.equal(res.statusCode, 207, res.body.slice(0, 500));
    const body = res.json() as { data: Item[]; meta: Record<string, number> };
    assert.deepEqual(
      body.data.map((d) => d.status),
      ['created', 'rejected', 'created'],
    );
    assert.equal(body.data[1]!.error!.code, 'payload_too_large');
    assert.equal(body.data[1]!.error!.status, 413);
    assert.deepEqual(body.meta, { created: 2, duplicates: 0, rejected: 1 });
    assert.equal(await ctx.services.storage.events.count(p.id), 2);
  });

  it('an element just under 32 KiB is accepted', async () => {
    const p = await ctx.product('batch-just-fits');
    const element = ev({ properties: { blob: '' } });
    const room = 32 * 1024 - Buffer.byteLength(JSON.stringify(element));
    const res = await batch(p.eventsKey, { events: [ev({ properties: { blob: 'x'.repeat(room) } })] });
    assert.equal(res.statusCode, 200, res.body.slice(0, 300));
  });

  it('legacy elements are accepted and the deprecation headers are sent once', async () => {
    const p = await ctx.product('batch-legacy');
    const res = await batch(p.eventsKey, {
      events: [
        ev(),
        clean(ev({ event_type: 'user_signed_up', action: undefined })),
        clean(ev({ event_type: 'team_created', action: undefined })),
      ],
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers['deprecation'], 'true');
    assert.equal(res.headers['sunset'], '2026-09-01');
    const items = res.json().data as Item[];
    assert.equal(items[1]!.event!.event_type, 'user');
    assert.equal(items[1]!.event!.canonical_name, 'user_signed_up');
    const usage = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/legacy_usage`,
      headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' },
    });
    const names = (usage.json().data as Array<{ event_name: string }>).map((r) => r.event_name).sort();
    assert.deepEqual(names, ['team_created', 'user_signed_up']);
  });

  it('with legacy flat input switched off, legacy elements are rejected with 410 problems and the rest stored', async () => {
    const strict = await createTestApp({ legacyFlat: 'reject' });
    try {
      const p = await strict.product('batch-strict');
      const res = await strict.app.inject({
        method: 'POST',
        url: '/api/v2/events/batch',
        headers: bearer(p.eventsKey),
        payload: { events: [ev(), clean(ev({ event_type: 'user_signed_up', action: undefined }))] },
      });
      assert.equal(res.statusCode, 207, res.body);
      const items = res.json().data as Item[];
      assert.equal(items[0]!.status, 'created');
      assert.equal(items[1]!.status, 'rejected');
      assert.equal(items[1]!.error!.code, 'legacy_format_removed');
      assert.equal(items[1]!.error!.status, 410);
      assert.match(items[1]!.error!.detail, /"action":\s*"signed_up"/);
      assert.equal(await strict.services.storage.events.count(p.id), 1);
    } finally {
      await strict.close();
    }
  });

  it('concurrent batches sharing external_ids: every key stored once, every answer consistent with storage', async () => {
    const p = await ctx.product('batch-concurrent');
    const responses = await Promise.all(
      Array.from({ length: 8 }, (_, b) =>
        batch(p.eventsKey, {
          events: Array.from({ length: 50 }, (_, i) => ev({ external_id: `c-${(i + b * 7) % 60}`, properties: { b } })),
        }),
      ),
    );
    const byKey = new Map<string, string>();
    let created = 0;
    for (const res of responses) {
      assert.equal(res.statusCode, 200, res.body.slice(0, 300));
      for (const item of res.json().data as Item[]) {
        if (item.status === 'created') created++;
        const known = byKey.get(item.event!.external_id as string);
        if (known !== undefined) assert.equal(item.event!.uuid, known);
        else byKey.set(item.event!.external_id as string, item.event!.uuid);
      }
    }
    assert.equal(created, byKey.size);
    assert.equal(await ctx.services.storage.events.count(p.id), byKey.size);
    for (const uuid of byKey.values()) assert.ok(await ctx.services.storage.events.get(p.id, uuid), `${uuid} stored`);
  });
});

describe('large concurrent batches (commits over 2000 rows)', () => {
  it('three concurrent batches of 1000 with overlapping external_ids: each key stored once, answers agree with storage', async () => {
    const p = await ctx.product('batch-large-concurrent');
    const responses = await Promise.all(
      [0, 500, 1000].map((offset) =>
        batch(p.eventsKey, { events: Array.from({ length: 1000 }, (_, i) => ev({ external_id: `L-${offset + i}` })) }),
      ),
    );
    const uuidByKey = new Map<string, string>();
    let created = 0;
    for (const res of responses) {
      assert.equal(res.statusCode, 200, res.body.slice(0, 300));
      for (const item of res.json().data as Item[]) {
        if (item.status === 'created') created++;
        const key = item.event!.external_id as string;
        const known = uuidByKey.get(key);
        if (known === undefined) uuidByKey.set(key, item.event!.uuid);
        else assert.equal(item.event!.uuid, known, key);
      }
    }
    assert.equal(uuidByKey.size, 2000);
    assert.equal(created, 2000);
    assert.equal(await ctx.services.storage.events.count(p.id), 2000);
  });
});

function clean<T extends Record<string, unknown>>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

describe('configured limits are the ones enforced', () => {
  let small: TestContext;
  let key: string;
  before(async () => {
    small = await createTestApp({ maxBatchEvents: 3, maxEventBytes: 512, maxBodyBytes: 4096 });
    key = (await small.product('small-limits')).eventsKey;
  });
  after(async () => small.close());

  const send = (url: string, payload: unknown) =>
    small.app.inject({ method: 'POST', url, headers: bearer(key), payload: payload as object });

  it('a batch over maxBatchEvents → 413; at the limit → 200', async () => {
    assert.equal((await send('/api/v2/events/batch', { events: [ev(), ev(), ev(), ev()] })).statusCode, 413);
    assert.equal((await send('/api/v2/events/batch', { events: [ev(), ev(), ev()] })).statusCode, 200);
  });

  it('an element over maxEventBytes is rejected alone; a single event over it → 413', async () => {
    const res = await send('/api/v2/events/batch', { events: [ev(), ev({ properties: { blob: 'x'.repeat(600) } })] });
    assert.equal(res.statusCode, 207);
    assert.equal(res.json().data[1].error.code, 'payload_too_large');
    const single = await send('/api/v2/events', ev({ properties: { blob: 'x'.repeat(600) } }));
    assert.equal(single.statusCode, 413);
    assert.equal(problemOf(single).code, 'payload_too_large');
  });

  it('an element whose size bound is over maxEventBytes is measured exactly: under it, stored; over it, refused', async () => {
    // 40 small numbers: the bound counts each as the longest number JSON can write, far more than the 512 bytes
    // allowed, while the element's JSON is about 400 bytes. A second, just over the limit, is refused with its size.
    const numbers = Array.from({ length: 40 }, (_, i) => i % 10);
    const under = ev({ external_id: 'bound-under', properties: { n: numbers } });
    const underBytes = Buffer.byteLength(JSON.stringify(under));
    assert.ok(underBytes <= 512, String(underBytes));
    const over = ev({ external_id: 'bound-over', properties: { n: numbers, pad: 'x'.repeat(513 - underBytes) } });
    const overBytes = Buffer.byteLength(JSON.stringify(over));
    assert.ok(overBytes > 512, String(overBytes));
    const res = await send('/api/v2/events/batch', { events: [under, over] });
    assert.equal(res.statusCode, 207, res.body);
    const body = res.json() as { data: Item[] };
    assert.equal(body.data[0]!.status, 'created', res.body);
    assert.deepEqual(body.data[0]!.event!.properties, { n: numbers });
    assert.equal(body.data[1]!.error!.code, 'payload_too_large');
    assert.equal(body.data[1]!.error!.detail, `Event 1 is ${overBytes} bytes of JSON; one event may be at most 512.`);
  });

  it('a body over maxBodyBytes → 413', async () => {
    const res = await send('/api/v2/events/batch', {
      events: [ev({ properties: { blob: 'x'.repeat(400) } }), ev({ properties: { blob: 'x'.repeat(5000) } })],
    });
    assert.equal(res.statusCode, 413);
    assert.equal(problemOf(res).code, 'payload_too_large');
  });
});
