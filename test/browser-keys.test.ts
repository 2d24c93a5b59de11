// Browser keys (segment-compat "Keys", "CORS"; clarifications §14, §18–19): created with allowed
// origins, usable only for ingest and only from those origins, CORS answered for them alone, a
// per-IP limit, identifiers refused; a secret events key sent by a browser is refused.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { originAllowed, validateAllowedOrigins } from '../src/domain/api-keys.js';

let ctx: TestContext;
let productId: string;
let eventsKey: string;
let browserKey: string;
const APP = 'https://app.example.com';

before(async () => {
  ctx = await createTestApp({ browserRateLimitPerIp: 0 });
  const product = await ctx.product('browser');
  productId = product.id;
  eventsKey = product.eventsKey;
  const created = await ctx.app.inject({
    method: 'POST',
    url: `/admin/v1/products/${productId}/keys`,
    headers: adminHeaders(),
    payload: { kind: 'browser', allowed_origins: [APP, 'https://*.example.org'] },
  });
  assert.equal(created.statusCode, 201, created.body);
  browserKey = created.json().data.key;
  assert.match(browserKey, /^inlet_pk_[0-9A-Za-z]{43}$/);
  assert.deepEqual(created.json().data.allowed_origins, [APP, 'https://*.example.org']);
});
after(async () => ctx.close());

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });
let n = 0;
const mid = () => `bk-${Date.now()}-${++n}`;

describe('allowed origins (domain)', () => {
  const cases: Array<[string, string[], boolean]> = [
    [APP, [APP], true],
    ['https://APP.example.com', [APP], true],
    ['http://app.example.com', [APP], false],
    ['https://app.example.com:8443', [APP], false],
    ['https://a.example.org', ['https://*.example.org'], true],
    ['https://a.b.example.org', ['https://*.example.org'], false],
    ['https://example.org', ['https://*.example.org'], false],
    ['https://evil-example.org', ['https://*.example.org'], false],
  ];
  for (const [origin, allowed, expected] of cases)
    it(`${origin} against ${allowed.join(',')} → ${expected}`, () =>
      assert.equal(originAllowed(origin, allowed), expected));

  it('refuses *, paths, an empty list, and a wildcard without a domain', () => {
    for (const bad of [[], ['*'], ['https://app.example.com/path'], ['app.example.com'], ['https://*.com']])
      assert.equal(validateAllowedOrigins(bad).ok, false, JSON.stringify(bad));
    assert.deepEqual(validateAllowedOrigins(['http://localhost:5173', 'http://127.0.0.1:8080']), {
      ok: true,
      origins: ['http://localhost:5173', 'http://127.0.0.1:8080'],
    });
  });
});

describe('admin API and CLI-facing rules', () => {
  it('a browser key needs allowed origins; other kinds refuse them', async () => {
    const none = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'browser' },
    });
    assert.equal(problemOf(none).code, 'validation_error');
    const star = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'browser', allowed_origins: ['*'] },
    });
    assert.equal(star.statusCode, 400);
    const events = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'events', allowed_origins: [APP] },
    });
    assert.equal(events.statusCode, 400);
  });

  it('PATCH /admin/v1/keys/{id} changes the origins (200, no secret); at once', async () => {
    const created = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'browser', allowed_origins: ['https://old.example.com'] },
    });
    const { id, key } = created.json().data;
    const before = await ctx.app.inject({
      method: 'POST',
      url: '/v1/t',
      headers: { ...basic(key), origin: 'https://new.example.com' },
      payload: { event: 'x', anonymousId: 'a' },
    });
    assert.equal(problemOf(before).code, 'origin_not_allowed');
    const patched = await ctx.app.inject({
      method: 'PATCH',
      url: `/admin/v1/keys/${id}`,
      headers: adminHeaders(),
      payload: { allowed_origins: ['https://new.example.com'] },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.deepEqual(patched.json().data.allowed_origins, ['https://new.example.com']);
    assert.equal(patched.json().data.key, undefined);
    const after = await ctx.app.inject({
      method: 'POST',
      url: '/v1/t',
      headers: { ...basic(key), origin: 'https://new.example.com' },
      payload: { event: 'x', anonymousId: 'a' },
    });
    assert.equal(after.statusCode, 200);
    const notBrowser = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
    });
    const eventsKeyId = notBrowser.json().data.find((k: { kind: string }) => k.kind === 'events').id;
    assert.equal(
      (
        await ctx.app.inject({
          method: 'PATCH',
          url: `/admin/v1/keys/${eventsKeyId}`,
          headers: adminHeaders(),
          payload: { allowed_origins: [APP] },
        })
      ).statusCode,
      400,
    );
  });
});

describe('CORS and origins on the Segment routes', () => {
  it('preflight: 204, echoes the origin, names Authorization among the allowed headers', async () => {
    const res = await ctx.app.inject({
      method: 'OPTIONS',
      url: '/v1/t',
      headers: {
        origin: APP,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization,content-type',
      },
    });
    assert.equal(res.statusCode, 204);
    assert.equal(res.headers['access-control-allow-origin'], APP);
    assert.match(String(res.headers['access-control-allow-headers']), /Authorization/);
    assert.equal(res.headers['access-control-max-age'], '86400');
    assert.equal(res.headers['access-control-allow-credentials'], undefined);
  });

  it('an allowed origin gets its own origin back (never *) and Vary: Origin; the event is stored', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/v1/t',
      headers: { origin: APP, 'content-type': 'text/plain' },
      payload: JSON.stringify({ event: 'Clicked', anonymousId: 'anon-b', writeKey: browserKey, messageId: mid() }),
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers['access-control-allow-origin'], APP);
    assert.match(String(res.headers.vary), /Origin/);
    assert.equal(res.json().accepted, 1);
  });

  it('an origin not on the list → 403 origin_not_allowed without CORS grant', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/v1/t',
      headers: { ...basic(browserKey), origin: 'https://evil.example.net' },
      payload: { event: 'Clicked', anonymousId: 'x' },
    });
    assert.equal(res.statusCode, 403);
    assert.equal(problemOf(res).code, 'origin_not_allowed');
    assert.equal(res.headers['access-control-allow-origin'], undefined);
  });

  it('an events key from a browser → 403 secret_key_in_browser (routes and settings)', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: { ...basic(eventsKey), origin: APP },
      payload: { batch: [] },
    });
    assert.equal(problemOf(res).code, 'secret_key_in_browser');
    const v2 = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { ...bearer(eventsKey), origin: APP },
      payload: { event: 'a.b', subject_type: 'user', subject_id: 'u' },
    });
    assert.equal(problemOf(v2).code, 'secret_key_in_browser');
    const settings = await ctx.app.inject({
      method: 'GET',
      url: `/v1/projects/${eventsKey}/settings`,
      headers: { origin: APP },
    });
    assert.equal(problemOf(settings).code, 'secret_key_in_browser');
    const browserSettings = await ctx.app.inject({
      method: 'GET',
      url: `/v1/projects/${browserKey}/settings`,
      headers: { origin: APP },
    });
    assert.equal(browserSettings.statusCode, 200);
    assert.equal(browserSettings.headers['access-control-allow-origin'], APP);
  });

  it('identify through a browser key: the e-mail stays a trait, context.ip is filled in', async () => {
    const messageId = mid();
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/v1/i',
      headers: { ...basic(browserKey), origin: APP },
      payload: { userId: 'bk-user', traits: { email: 'victim@example.com' }, messageId },
    });
    assert.equal(res.json().accepted, 1);
    const user = await ctx.services.identity.getUser(productId, 'bk-user', 5);
    assert.deepEqual(user.user.identifiers, {});
    assert.equal(user.user.traits.email, 'victim@example.com');
    const [event] = await ctx.services.storage.events.listBySubjects(productId, 'user', ['bk-user'], 1);
    assert.equal(event?.context?.ip, '127.0.0.1');
  });
});

describe('native routes with a browser key', () => {
  it('POST /api/v2/events from an allowed origin: 201 with CORS; preflight answered', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { ...bearer(browserKey), origin: APP },
      payload: { event: 'page.viewed', subject_type: 'user', subject_id: 'u' },
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.headers['access-control-allow-origin'], APP);
    const pre = await ctx.app.inject({
      method: 'OPTIONS',
      url: '/api/v2/events/batch',
      headers: { origin: APP, 'access-control-request-method': 'POST' },
    });
    assert.equal(pre.statusCode, 204);
  });

  it('never reads, never uses v1, never sets identifiers', async () => {
    assert.equal(
      (
        await ctx.app.inject({
          method: 'GET',
          url: '/api/v2/traffic_reports?from=2026-01-01&to=2026-01-02',
          headers: bearer(browserKey),
        })
      ).statusCode,
      403,
    );
    assert.equal(
      (
        await ctx.app.inject({
          method: 'POST',
          url: '/api/v1/events',
          headers: bearer(browserKey),
          payload: {
            event_type: 'user_active',
            subject_type: 'user',
            subject_id: 'u',
            occurred_at: '2026-01-01T00:00:00Z',
          },
        })
      ).statusCode,
      403,
    );
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(browserKey),
      payload: { external_id: 'squatter', identifiers: { email: 'ceo@example.com' } },
    });
    assert.equal(identify.statusCode, 403);
    assert.equal(problemOf(identify).errors?.[0]?.pointer, '/identifiers');
    const traitsOnly = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(browserKey),
      payload: { external_id: 'fine', traits: { plan: 'x' } },
    });
    assert.equal(traitsOnly.statusCode, 201);
  });
});

describe('per-IP limit of browser keys', () => {
  it('429 with Retry-After once one address exceeds its burst', async () => {
    const limited = await createTestApp({ browserRateLimitPerIp: 1 });
    try {
      const product = await limited.product('limited');
      const created = await limited.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${product.id}/keys`,
        headers: adminHeaders(),
        payload: { kind: 'browser', allowed_origins: [APP] },
      });
      const key = created.json().data.key;
      const statuses: number[] = [];
      let retryAfter: unknown;
      for (let i = 0; i < 4; i++) {
        const res = await limited.app.inject({
          method: 'POST',
          url: '/v1/t',
          headers: { ...basic(key), origin: APP },
          payload: { event: 'x', anonymousId: 'a', messageId: mid() },
        });
        statuses.push(res.statusCode);
        if (res.statusCode === 429) retryAfter = res.headers['retry-after'];
      }
      assert.deepEqual(statuses.slice(0, 2), [200, 200]);
      assert.equal(statuses.at(-1), 429);
      assert.ok(Number(retryAfter) >= 1);
    } finally {
      await limited.close();
    }
  });
});

describe('INLET_TRUST_PROXY', () => {
  it('off: X-Forwarded-For is not believed; on: context.ip and the settings apiHost come from the proxy headers', async () => {
    for (const trust of [false, ['127.0.0.1/32'], 1] as const) {
      const app = await createTestApp({
        trustProxy: trust === false || typeof trust === 'number' ? trust : [...trust],
        browserRateLimitPerIp: 0,
      });
      try {
        const product = await app.product('proxy');
        const created = await app.app.inject({
          method: 'POST',
          url: `/admin/v1/products/${product.id}/keys`,
          headers: adminHeaders(),
          payload: { kind: 'browser', allowed_origins: [APP] },
        });
        const key = created.json().data.key;
        const proxied = {
          origin: APP,
          'x-forwarded-for': '203.0.113.9',
          'x-forwarded-host': 'events.example.com',
          'x-forwarded-proto': 'https',
        };
        await app.app.inject({
          method: 'POST',
          url: '/v1/t',
          headers: { ...basic(key), ...proxied },
          payload: { event: 'Proxied', userId: 'p-user' },
        });
        const [event] = await app.services.storage.events.listBySubjects(product.id, 'user', ['p-user'], 1);
        assert.equal(event?.context?.ip, trust === false ? '127.0.0.1' : '203.0.113.9');
        const settings = await app.app.inject({
          method: 'GET',
          url: `/v1/projects/${key}/settings`,
          headers: { ...proxied, host: 'inner:3000' },
        });
        assert.deepEqual(
          [settings.json().integrations['Segment.io'].apiHost, settings.json().integrations['Segment.io'].protocol],
          trust === false ? ['inner:3000/v1', 'http'] : ['events.example.com/v1', 'https'],
        );
      } finally {
        await app.close();
      }
    }
  });
});

describe('identified users are never merged through a browser key (clarifications §18)', () => {
  const post = (url: string, payload: unknown) =>
    ctx.app.inject({
      method: 'POST',
      url,
      headers: { ...basic(browserKey), origin: APP },
      payload: payload as Record<string, unknown>,
    });

  it('the usual sequence works: an anonymous identify, then identify(userId) links the visitor', async () => {
    assert.equal(
      (await post('/v1/i', { anonymousId: 'v-anon', traits: { plan: 'trial' }, messageId: mid() })).json().accepted,
      1,
    );
    const res = (await post('/v1/i', { userId: 'v-user', anonymousId: 'v-anon', messageId: mid() })).json();
    assert.deepEqual([res.accepted, res.rejected, res.warnings], [1, [], []]);
    assert.ok((await ctx.services.identity.getUser(productId, 'v-user', 1)).user.aliases.includes('v-anon'));
  });

  it('identify and alias joining two identified users are rejected; an implicit link is a warning; the native alias is 403', async () => {
    await post('/v1/i', { userId: 'idf-a', anonymousId: 'idf-anon', messageId: mid() });
    await post('/v1/i', { userId: 'idf-b', messageId: mid() });
    const identify = (await post('/v1/i', { userId: 'idf-b', anonymousId: 'idf-anon', messageId: mid() })).json();
    assert.equal(identify.rejected[0]?.code, 'identified_merge_forbidden');
    const alias = (await post('/v1/a', { userId: 'idf-b', previousId: 'idf-a', messageId: mid() })).json();
    assert.equal(alias.rejected[0]?.code, 'identified_merge_forbidden');
    const track = (
      await post('/v1/t', { event: 'Clicked', userId: 'idf-b', anonymousId: 'idf-a', messageId: mid() })
    ).json();
    assert.deepEqual([track.accepted, track.warnings[0]?.code], [1, 'identity_conflict']);
    const native = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(browserKey),
      payload: { from_external_id: 'idf-a', to_external_id: 'idf-b' },
    });
    assert.equal(native.statusCode, 403);
    assert.equal(problemOf(native).code, 'identified_merge_forbidden');
    // Nothing was merged; an events key from a server still may.
    assert.deepEqual((await ctx.services.identity.getUser(productId, 'idf-b', 1)).user.aliases, []);
    const server = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(eventsKey),
      payload: { from_external_id: 'idf-a', to_external_id: 'idf-b' },
    });
    assert.equal(server.statusCode, 200, server.body);
  });

  it('an anonymous-only identify does not make a user identified', async () => {
    await post('/v1/i', { anonymousId: 'only-anon', traits: { x: 1 }, messageId: mid() });
    await post('/v1/i', { userId: 'only-user', messageId: mid() });
    const res = (await post('/v1/a', { userId: 'only-user', previousId: 'only-anon', messageId: mid() })).json();
    assert.deepEqual([res.accepted, res.rejected], [1, []]);
  });
});
