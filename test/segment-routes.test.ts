// The Segment-compatible routes (segment-compat.md B) through app.inject: key lookup, any content
// type, gzip, limits (400 payload_too_large), the per-item answer, mapping, dedup by messageId,
// clock-skew correction, identity side effects, settings.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { createTestApp, eventCode, eventProduct, problemOf, storedEvents, type TestContext } from './helpers.js';

let ctx: TestContext;
let key: string;
let productId: string;
before(async () => {
  ctx = await createTestApp();
  const product = await ctx.product('segment');
  key = product.eventsKey;
  productId = product.id;
});
after(async () => ctx.close());

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });
let counter = 0;
const mid = () => `mid-${Date.now()}-${++counter}`;

function post(url: string, payload: unknown, headers: Record<string, string> = basic(key)) {
  return ctx.app.inject({
    method: 'POST',
    url,
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : JSON.stringify(payload),
  });
}

async function stored(messageId: string) {
  const rows = await storedEvents(ctx.services.storage.db, productId)
    .where('source', '=', eventCode('source', 'segment'))
    .where('external_id', '=', messageId)
    .execute();
  return rows;
}

describe('Segment keys', () => {
  it('takes the key from Basic auth, X-Write-Key, the body or the query', async () => {
    const item = () => ({ type: 'track', event: 'Key Test', userId: 'u1', messageId: mid() });
    const viaBasic = await post('/v1/batch', { batch: [item()] });
    const viaHeader = await post('/v1/batch', { batch: [item()] }, { 'x-write-key': key });
    const viaBody = await post('/v1/batch', { batch: [item()], writeKey: key }, {});
    const viaQuery = await post(`/v1/batch?writeKey=${key}`, { batch: [item()] }, {});
    for (const res of [viaBasic, viaHeader, viaBody, viaQuery]) {
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().accepted, 1);
    }
  });

  it('401 without a key or with an unknown one; 403 secret_key_in_browser for an events key sent with an Origin', async () => {
    assert.equal(problemOf(await post('/v1/batch', { batch: [] }, {})).code, 'unauthorized');
    assert.equal((await post('/v1/batch', { batch: [] }, basic('inlet_ev_' + 'x'.repeat(43)))).statusCode, 401);
    const browser = await post(
      '/v1/track',
      { event: 'x', userId: 'u' },
      { ...basic(key), origin: 'https://app.example.com' },
    );
    assert.equal(problemOf(browser).code, 'secret_key_in_browser');
    assert.equal(browser.statusCode, 403);
  });

  it('never stores the write key with the event', async () => {
    const messageId = mid();
    await post('/v1/track', { event: 'Secret', userId: 'u1', messageId, writeKey: key }, {});
    const [row] = await stored(messageId);
    assert.ok(row);
    assert.ok(!JSON.stringify(row).includes(key));
  });
});

describe('Segment bodies', () => {
  it('parses JSON under any content type, none, and gzip', async () => {
    const body = (m: string) => JSON.stringify({ batch: [{ type: 'track', event: 'Ct', userId: 'u1', messageId: m }] });
    const plain = await post('/v1/batch', body(mid()), { ...basic(key), 'content-type': 'text/plain' });
    const form = await post('/v1/batch', gzipSync(body(mid())), {
      ...basic(key),
      'content-type': 'application/x-www-form-urlencoded',
      'content-encoding': 'gzip',
    });
    const none = await ctx.app.inject({ method: 'POST', url: '/v1/batch', headers: basic(key), payload: body(mid()) });
    for (const res of [plain, form, none]) assert.equal(res.statusCode, 200, res.body);
  });

  it('400 for a body that is not JSON or not an object; 400 payload_too_large over the limits', async () => {
    assert.equal(problemOf(await post('/v1/batch', '{nope')).status, 400);
    assert.equal(problemOf(await post('/v1/batch', '[1]')).status, 400);
    const big = await post('/v1/track', { event: 'Big', userId: 'u1', properties: { blob: 'x'.repeat(33 * 1024) } });
    assert.equal(big.statusCode, 400);
    assert.equal(problemOf(big).code, 'payload_too_large');
    const tooMany = await post('/v1/batch', {
      batch: Array.from({ length: 2501 }, () => ({ type: 'track', event: 'x', userId: 'u' })),
    });
    assert.equal(problemOf(tooMany).code, 'payload_too_large');
    assert.equal(tooMany.statusCode, 400);
    const huge = await post('/v1/batch', {
      batch: [{ type: 'track', event: 'x', userId: 'u', properties: { blob: 'x'.repeat(5 * 1024 * 1024) } }],
    });
    assert.equal(huge.statusCode, 400);
    assert.equal(problemOf(huge).code, 'payload_too_large');
  });

  it('a partly bad batch is 200: good items stored, bad ones rejected one by one, every item counted once', async () => {
    const good = mid();
    const res = await post('/v1/batch', {
      batch: [
        { type: 'track', event: 'Order Completed', userId: 'u1', messageId: good, properties: { total: 3 } },
        { type: 'track', event: 'No One', messageId: mid() },
        { type: 'track', event: '!!!', userId: 'u1', messageId: mid() },
        {
          type: 'track',
          event: 'Too Big',
          userId: 'u1',
          messageId: mid(),
          properties: { blob: 'x'.repeat(33 * 1024) },
        },
        { type: 'track', event: 'Far Future', userId: 'u1', messageId: mid(), timestamp: '2999-01-01T00:00:00Z' },
        { type: 'bogus', userId: 'u1', messageId: mid() },
        { type: 'track', event: 'Order Completed', userId: 'u1', messageId: good },
      ],
    });
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.equal(body.success, true);
    assert.equal(body.accepted, 1);
    assert.equal(body.duplicates, 1);
    assert.deepEqual(
      body.rejected.map((r: { index: number; code: string }) => [r.index, r.code]),
      [
        [1, 'missing_identity'],
        [2, 'invalid_event_name'],
        [3, 'payload_too_large'],
        [4, 'invalid_timestamp'],
        [5, 'validation_error'],
      ],
    );
  });
});

describe('Segment mapping', () => {
  it('track: normalised name, split, source segment, messageId as external_id, context and original kept', async () => {
    const messageId = mid();
    const res = await post('/v1/batch', {
      batch: [
        {
          type: 'track',
          event: 'Order Completed',
          userId: 'u7',
          anonymousId: 'a7',
          messageId,
          properties: { total: 10 },
          context: { library: { name: 'x' } },
          integrations: { All: true },
        },
      ],
      context: { ip: '1.2.3.4', library: { name: 'batch' } },
    });
    assert.equal(res.json().accepted, 1);
    const event = (await ctx.services.storage.events.listBySubjects(productId, 'user', ['u7'], 10)).find(
      (e) => e.externalId === messageId,
    )!;
    assert.equal(event.eventType, 'order');
    assert.equal(event.action, 'completed');
    assert.equal(event.canonicalName, 'order_completed');
    assert.equal(event.source, 'segment');
    assert.deepEqual(event.properties, { total: 10 });
    assert.deepEqual(event.context, { ip: '1.2.3.4', library: { name: 'x' } });
    assert.equal(event.original?.event, 'Order Completed');
    assert.equal(event.original?.anonymousId, 'a7');
    assert.deepEqual(event.original?.integrations, { All: true });
  });

  it("a track's properties and its own context are stored as the JSON text they arrived in, and read back as the same values", async () => {
    const [plain, merged] = [mid(), mid()];
    const properties = '{"price":1.50,"path":"a\\/b","big":12345678901234567890}';
    const context = '{"library":{"name":"x","version":"1.0"},"locale":"de-DE"}';
    const body =
      `{"batch":[{"type":"track","event":"Bought","userId":"u9","messageId":"${plain}","properties":${properties},"context":${context}},` +
      `{"type":"page","userId":"u9","messageId":"${merged}","name":"Home","properties":${properties}}],"sentAt":"2026-01-01T00:00:00Z"}`;
    assert.equal((await post('/v1/batch', body)).json().accepted, 2);
    const [row] = await stored(plain);
    const [page] = await stored(merged);
    if (typeof row!.properties === 'string') {
      // SQLite keeps the text: the sender's, not a second serialisation (`1.50`, `\/`, every digit).
      assert.equal(row!.properties, properties);
      assert.equal(row!.context, context);
      // A page's properties gain its name: those are serialised.
      assert.equal(page!.properties, JSON.stringify({ ...JSON.parse(properties), name: 'Home' }));
    }
    const event = (await ctx.services.storage.events.listBySubjects(productId, 'user', ['u9'], 10)).find(
      (e) => e.externalId === plain,
    )!;
    assert.deepEqual(event.properties, JSON.parse(properties));
    assert.deepEqual(event.context, JSON.parse(context));
    // A native event beside them has no context and no original: SQL NULL, not a JSON null.
    const native = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { authorization: `Bearer ${key}` },
      payload: { event_type: 'order', action: 'paid', subject_type: 'user', subject_id: 'u9', external_id: mid() },
    });
    assert.equal(native.statusCode, 201, native.body);
    const nulls = await ctx.services.storage.db
      .selectFrom('events')
      .select([
        sql<number>`count(*)`.as('n'),
        sql<number>`sum(CASE WHEN context IS NULL AND original IS NULL THEN 1 ELSE 0 END)`.as('none'),
      ])
      .where('product_id', '=', eventProduct(productId))
      .where('source', '=', eventCode('source', 'api'))
      .executeTakeFirstOrThrow();
    assert.equal(Number(nulls.none), Number(nulls.n));
    assert.ok(Number(nulls.n) >= 1);
  });

  for (const [name, type, action] of [
    ['Login', 'login', 'tracked'],
    ['Step 2', 'step_2', 'tracked'],
    ['2fa enabled', 'e_2fa', 'enabled'],
    ['orderCompleted', 'order', 'completed'],
  ] as const) {
    it(`track "${name}" → ${type} / ${action}`, async () => {
      const messageId = mid();
      await post('/v1/track', { event: name, userId: 'names', messageId });
      const [row] = await stored(messageId);
      assert.equal(row?.event_type, type);
      assert.equal(row?.action, action);
    });
  }

  it('page, screen, group, identify and alias become events; identify and alias change users; a retry is a duplicate', async () => {
    const ids = { page: mid(), screen: mid(), group: mid(), identify: mid(), alias: mid() };
    const res = await post('/v1/batch', {
      batch: [
        {
          type: 'page',
          name: 'Home',
          category: 'Docs',
          anonymousId: 'anon-1',
          messageId: ids.page,
          properties: { path: '/' },
        },
        {
          type: 'identify',
          userId: 'user-1',
          anonymousId: 'anon-1',
          traits: { email: 'Ada@Example.com', plan: 'pro' },
          messageId: ids.identify,
        },
        { type: 'screen', name: 'Main', userId: 'user-1', messageId: ids.screen },
        { type: 'group', groupId: 'acct-1', userId: 'user-1', traits: { name: 'Acme' }, messageId: ids.group },
        { type: 'alias', previousId: 'old-id', userId: 'user-1', messageId: ids.alias },
      ],
    });
    assert.deepEqual(res.json(), { success: true, accepted: 5, duplicates: 0, rejected: [], warnings: [] });
    const rows = Object.fromEntries(
      await Promise.all(Object.entries(ids).map(async ([k, m]) => [k, (await stored(m))[0]!])),
    );
    assert.deepEqual([rows.page.event_type, rows.page.action], ['page', 'viewed']);
    assert.deepEqual(
      typeof rows.page.properties === 'string' ? JSON.parse(rows.page.properties) : rows.page.properties,
      { path: '/', name: 'Home', category: 'Docs' },
    );
    assert.equal(rows.page.subject_id, 'anon-1');
    assert.deepEqual([rows.screen.event_type, rows.screen.action], ['screen', 'viewed']);
    assert.deepEqual(
      [rows.group.subject_type, rows.group.subject_id, rows.group.event_type, rows.group.action],
      ['account', 'acct-1', 'group', 'identified'],
    );
    assert.deepEqual([rows.identify.event_type, rows.identify.action], ['user', 'identified']);
    assert.deepEqual([rows.alias.event_type, rows.alias.action], ['user', 'aliased']);

    const user = await ctx.services.identity.getUser(productId, 'user-1', 10);
    assert.deepEqual(user.user.aliases.sort(), ['anon-1', 'old-id']);
    assert.equal(user.user.traits.plan, 'pro');
    assert.equal(user.user.identifiers.email, 'ada@example.com');
    // The anonymous page view is found through the user.
    assert.ok(user.events.some((e) => e.externalId === ids.page));

    const again = await post('/v1/batch', {
      batch: [{ type: 'page', name: 'Home', anonymousId: 'anon-1', messageId: ids.page }],
    });
    assert.deepEqual(again.json(), { success: true, accepted: 0, duplicates: 1, rejected: [], warnings: [] });
  });

  it("identify traits in context.traits (RudderStack's browser SDK) count as traits; top-level ones win", async () => {
    const messageId = mid();
    const res = await post('/v1/identify', {
      userId: 'rudder-ctx',
      anonymousId: 'anon-rudder',
      context: { traits: { plan: 'team', email: 'R@Example.com' } },
      traits: { plan: 'pro' },
      messageId,
    });
    assert.equal(res.json().accepted, 1);
    const user = await ctx.services.identity.getUser(productId, 'rudder-ctx', 10);
    assert.deepEqual(user.user.traits, { plan: 'pro', email: 'R@Example.com' });
    assert.equal(user.user.identifiers.email, 'r@example.com');
    const [row] = await stored(messageId);
    assert.deepEqual(typeof row!.properties === 'string' ? JSON.parse(row!.properties) : row!.properties, {
      plan: 'pro',
      email: 'R@Example.com',
    });
  });

  it('an item without messageId gets a deterministic id: the same raw retry is a duplicate', async () => {
    const item = {
      type: 'track',
      event: 'No Id',
      userId: 'u-noid',
      timestamp: '2026-01-01T00:00:00Z',
      properties: { n: Math.random() },
    };
    assert.equal((await post('/v1/batch', { batch: [item] })).json().accepted, 1);
    assert.equal((await post('/v1/batch', { batch: [item] })).json().duplicates, 1);
  });

  it('clock skew: occurred_at = received_at − (sentAt − timestamp); without sentAt the timestamp as sent', async () => {
    const skewed = mid();
    const plain = mid();
    const sentAt = new Date(Date.now() + 3_600_000).toISOString(); // the device clock is an hour ahead
    const timestamp = new Date(Date.now() + 3_600_000 - 60_000).toISOString(); // it happened a minute ago
    await post('/v1/batch', {
      batch: [{ type: 'track', event: 'Skew', userId: 'u', messageId: skewed, timestamp }],
      sentAt,
    });
    await post('/v1/track', { event: 'Plain', userId: 'u', messageId: plain, timestamp: '2020-05-01T10:00:00.000Z' });
    const [a] = await stored(skewed);
    const delta = Date.now() - new Date(a!.occurred_at).getTime();
    assert.ok(delta > 55_000 && delta < 70_000, `expected about a minute ago, got ${delta} ms`);
    const [b] = await stored(plain);
    assert.equal(new Date(b!.occurred_at as string).toISOString(), '2020-05-01T10:00:00.000Z');
  });

  it('a conflicting implicit link is a warning; the event is stored and accepted', async () => {
    await post('/v1/batch', {
      batch: [{ type: 'identify', userId: 'owner-a', anonymousId: 'shared-anon', messageId: mid() }],
    });
    const res = await post('/v1/batch', { batch: [{ type: 'identify', userId: 'merged-b', messageId: mid() }] });
    assert.equal(res.json().accepted, 1);
    // shared-anon is an alias of owner-a; linking it to owner-b conflicts.
    const conflict = await post('/v1/batch', {
      batch: [{ type: 'track', event: 'Clicked', userId: 'merged-b', anonymousId: 'shared-anon', messageId: mid() }],
    });
    const body = conflict.json();
    assert.equal(body.accepted, 1);
    assert.equal(body.warnings[0].code, 'identity_conflict');
  });

  it('a group call carrying both ids links the visitor to the user, not to the group', async () => {
    const res = await post('/v1/batch', {
      batch: [{ type: 'group', groupId: 'gl-group', userId: 'gl-user', anonymousId: 'gl-anon', messageId: mid() }],
    });
    assert.equal(res.json().accepted, 1, res.body);
    assert.deepEqual((await ctx.services.identity.getUser(productId, 'gl-user', 1)).user.aliases, ['gl-anon']);
    await assert.rejects(ctx.services.identity.getUser(productId, 'gl-group', 1), /No user/);
  });
});

describe('Segment extras', () => {
  it('settings point the SDK here, with metrics off; unknown keys are 404', async () => {
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/v1/projects/${key}/settings`,
      headers: { host: 'inlet.test:3000' },
    });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['cache-control'], 'public, max-age=300');
    assert.deepEqual(res.json().integrations['Segment.io'], {
      apiKey: key,
      apiHost: 'inlet.test:3000/v1',
      protocol: 'http',
    });
    assert.equal(res.json().metrics.sampleRate, 0);
    assert.equal(
      (await ctx.app.inject({ method: 'GET', url: `/v1/projects/inlet_ev_${'x'.repeat(43)}/settings` })).statusCode,
      404,
    );
    const rudder = await ctx.app.inject({ method: 'GET', url: `/sourceConfig/?writeKey=${key}` });
    assert.equal(rudder.json().source.enabled, true);
  });

  it('never redirects, with or without a trailing slash; /v1/m answers 200', async () => {
    const res = await post('/v1/batch/', { batch: [{ type: 'track', event: 'Slash', userId: 'u', messageId: mid() }] });
    assert.equal(res.statusCode, 200);
    assert.equal((await post('/v1/m', { series: [] })).statusCode, 200);
  });
});

describe('analytics.js served from Inlet (clarifications §25)', () => {
  it('serves the standalone build and its chunks with long-cache headers; nothing else from that folder', async () => {
    const standalone = await ctx.app.inject({ method: 'GET', url: `/analytics.js/v1/${key}/analytics.min.js` });
    assert.equal(standalone.statusCode, 200);
    assert.match(String(standalone.headers['content-type']), /javascript/);
    assert.match(String(standalone.headers['cache-control']), /max-age=\d+/);
    const chunk = /analytics-next\/bundles\//.test(standalone.body);
    assert.ok(chunk, 'the loader fetches its chunks under /analytics-next/bundles/');
    const { readdirSync } = await import('node:fs');
    const { createRequire } = await import('node:module');
    const { dirname, join } = await import('node:path');
    const dist = join(
      dirname(createRequire(import.meta.url).resolve('@segment/analytics-next/package.json')),
      'dist',
      'umd',
    );
    const bundle = readdirSync(dist).find((f) => /\.bundle\.[0-9a-f]+\.js$/.test(f))!;
    const res = await ctx.app.inject({ method: 'GET', url: `/analytics-next/bundles/${bundle}` });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['cache-control']), /immutable/);
    assert.equal(
      (await ctx.app.inject({ method: 'GET', url: '/analytics-next/bundles/..%2Fpackage.json' })).statusCode,
      404,
    );
    assert.equal(
      (await ctx.app.inject({ method: 'GET', url: '/analytics-next/bundles/standalone.js.map' })).statusCode,
      404,
    );
  });
});
