// Contract §1: API keys and authentication. The shared route table (auth-cases.ts) runs the same
// security cases on every write route; below, the key format, storage of hashes only, listings
// without secrets, last_used_at, and product isolation.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { adminHeaders, bearer, createTestApp, type TestContext } from './helpers.js';
import { describeAuth, WRITE_ROUTES } from './auth-cases.js';

let ctx: TestContext;

before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

for (const route of WRITE_ROUTES) describeAuth(route, () => ctx);

describe('API keys', () => {
  it('have the format inlet_ev_ / inlet_rp_ followed by at least 32 base62 characters, each one different', async () => {
    const p = await ctx.product('format');
    assert.match(p.eventsKey, /^inlet_ev_[0-9A-Za-z]{32,}$/);
    assert.match(p.reportsKey, /^inlet_rp_[0-9A-Za-z]{32,}$/);
    assert.notEqual(p.eventsKey.slice(9), p.reportsKey.slice(9));
    const more = await Promise.all(
      Array.from({ length: 20 }, () =>
        ctx.app.inject({
          method: 'POST',
          url: `/admin/v1/products/${p.id}/keys`,
          headers: adminHeaders(),
          payload: { kind: 'events' },
        }),
      ),
    );
    const keys = more.map((r) => r.json().data.key as string);
    assert.equal(new Set(keys).size, keys.length);
    // ≥ 190 bits: 32 base62 characters carry 190.5 bits; the alphabet really is base62.
    const alphabet = new Set(keys.join('').replace(/inlet_ev_/g, ''));
    assert.ok(alphabet.size > 40, `only ${alphabet.size} distinct characters`);
  });

  it('only the SHA-256 and a short prefix are stored: the plain key appears nowhere in the row', async () => {
    const p = await ctx.product('hash-only');
    for (const key of [p.eventsKey, p.reportsKey]) {
      const hash = createHash('sha256').update(key).digest('hex');
      const rows = await sql<Record<string, unknown>>`SELECT * FROM api_keys WHERE product_id = ${p.id}`.execute(
        ctx.services.storage.db,
      );
      assert.equal(rows.rows.length, 2);
      const row = rows.rows.find((r) => r.key_hash === hash);
      assert.ok(row, 'a row holds the SHA-256 of the key');
      const text = JSON.stringify(rows.rows);
      assert.equal(text.includes(key), false, 'plain key stored');
      assert.equal(text.includes(key.slice(9)), false, 'secret part stored');
      assert.ok(key.startsWith(String(row.prefix)));
      assert.ok(String(row.prefix).length < 20, 'prefix is short');
    }
  });

  it('list endpoints never return the secret', async () => {
    const p = await ctx.product('list-no-secret');
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/keys`,
      headers: adminHeaders(),
    });
    assert.equal(res.statusCode, 200);
    assert.equal(res.body.includes(p.eventsKey), false);
    assert.equal(res.body.includes(p.reportsKey), false);
    assert.equal(res.body.includes(p.eventsKey.slice(20)), false);
    for (const key of res.json().data as Array<Record<string, unknown>>) {
      assert.equal('key' in key, false);
      assert.equal('key_hash' in key, false);
    }
  });

  it('last_used_at is null until the key is used, then set', async () => {
    const p = await ctx.product('last-used');
    const list = async () =>
      (await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${p.id}/keys`, headers: adminHeaders() })).json()
        .data as Array<{ kind: string; last_used_at: string | null }>;
    assert.ok((await list()).every((k) => k.last_used_at === null));
    const before = new Date(Date.now() - 1000).toISOString();
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: { subject_type: 'user', subject_id: 'u', event_type: 'a', action: 'b' },
    });
    assert.equal(res.statusCode, 201);
    // The write is off the request path: wait for it (bounded), polling the admin API.
    let events: { last_used_at: string | null } | undefined;
    for (let i = 0; i < 200; i++) {
      events = (await list()).find((k) => k.kind === 'events');
      if (events?.last_used_at) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(events?.last_used_at, 'last_used_at set');
    assert.ok(events.last_used_at >= before);
    assert.equal((await list()).find((k) => k.kind === 'reports')?.last_used_at, null, 'the unused key stays null');
  });
});

describe('last_used_at is coarse', () => {
  it('many requests with one key cause at most one last_used_at write', async () => {
    const p = await ctx.product('coarse');
    const store = ctx.services.storage.apiKeys;
    const touch = store.touch.bind(store);
    const touched: string[] = [];
    store.touch = async (usages) => {
      touched.push(...usages.map((u) => u.id));
      await touch(usages);
    };
    try {
      for (let i = 0; i < 20; i++) {
        const res = await ctx.app.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(p.eventsKey),
          payload: { subject_type: 'user', subject_id: 'u', event_type: 'a', action: 'b' },
        });
        assert.equal(res.statusCode, 201);
      }
      await ctx.services.keys.close(); // flushes pending bookkeeping (idempotent, keeps the service usable)
      assert.equal(touched.length, 1, JSON.stringify(touched));
    } finally {
      store.touch = touch;
    }
  });
});

describe('product isolation', () => {
  it("a key of product A never sees or dedups against product B's events", async () => {
    const a = await ctx.product('iso-a');
    const b = await ctx.product('iso-b');
    const body = { subject_type: 'user', subject_id: 'u', event_type: 'iso', action: 'test', external_id: 'same-id' };
    const inB = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(b.eventsKey),
      payload: { ...body, properties: { from: 'b' } },
    });
    const inA = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(a.eventsKey),
      payload: { ...body, properties: { from: 'a' } },
    });
    assert.equal(inB.statusCode, 201);
    assert.equal(inA.statusCode, 201, 'not a replay of B’s event');
    assert.deepEqual(inA.json().data.properties, { from: 'a' });
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(a.eventsKey),
      payload: { events: [{ ...body, external_id: 'b-only' }] },
    });
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(b.eventsKey),
      payload: { ...body, external_id: 'b-only' },
    });
    assert.equal(batch.json().data[0].status, 'created');
    assert.equal(await ctx.services.storage.events.get(a.id, inB.json().data.uuid), undefined);
    assert.equal(await ctx.services.storage.events.get(b.id, inA.json().data.uuid), undefined);
    assert.equal(await ctx.services.storage.events.count(a.id), 2);
    assert.equal(await ctx.services.storage.events.count(b.id), 2);
  });

  it('events are stored under the product of the key that sent them', async () => {
    const a = await ctx.product('owner-a');
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(a.eventsKey),
      payload: {
        event_type: 'user_active',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-03-01T12:00:00Z',
      },
    });
    const stored = await ctx.services.storage.events.get(a.id, res.json().data.uuid);
    assert.equal(stored?.productId, a.id);
  });
});
