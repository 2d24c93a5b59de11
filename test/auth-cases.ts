// Shared authentication cases (contract §1), reused by every route that takes an API key.
// A route is described once (method, url, a valid body and the key kind it needs); `authCases`
// registers the same security tests for it. Every write route of contract §1 is in WRITE_ROUTES; the
// reports route adds itself by calling `describeAuth` with its own description (kind 'reports').
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { LightMyRequestResponse } from 'fastify';
import { generateKey } from '../src/domain/api-keys.js';
import { prefixedId } from '../src/domain/ids.js';
import { adminHeaders, bearer, problemOf, type TestContext } from './helpers.js';

export interface KeyedRoute {
  name: string;
  method: 'GET' | 'POST';
  url: string;
  /** A body that the route accepts with a valid key (for GET, undefined). */
  body?: () => unknown;
  /** The key kind the route needs. */
  kind: 'events' | 'reports';
  /** Status of a successful request with the right key. */
  okStatus: number[];
}

export const WRITE_ROUTES: KeyedRoute[] = [
  {
    name: 'POST /api/v1/events',
    method: 'POST',
    url: '/api/v1/events',
    body: () => ({
      event_type: 'user_active',
      subject_type: 'user',
      subject_id: 'u_auth',
      occurred_at: '2026-03-01T12:00:00Z',
    }),
    kind: 'events',
    okStatus: [201],
  },
  {
    name: 'POST /api/v2/events',
    method: 'POST',
    url: '/api/v2/events',
    body: () => ({ event_type: 'auth', action: 'checked', subject_type: 'user', subject_id: 'u_auth' }),
    kind: 'events',
    okStatus: [201],
  },
  {
    name: 'POST /api/v2/events/batch',
    method: 'POST',
    url: '/api/v2/events/batch',
    body: () => ({ events: [{ event_type: 'auth', action: 'checked', subject_type: 'user', subject_id: 'u_auth' }] }),
    kind: 'events',
    okStatus: [200],
  },
  {
    name: 'POST /api/v2/identify',
    method: 'POST',
    url: '/api/v2/identify',
    body: () => ({ external_id: 'auth-user', traits: { plan: 'pro' } }),
    kind: 'events',
    okStatus: [200, 201],
  },
  {
    name: 'POST /api/v2/alias',
    method: 'POST',
    url: '/api/v2/alias',
    body: () => ({ from_external_id: 'auth-anonymous-1', to_external_id: 'auth-user' }),
    kind: 'events',
    okStatus: [200],
  },
];

export function send(
  ctx: TestContext,
  route: KeyedRoute,
  headers: Record<string, string>,
): Promise<LightMyRequestResponse> {
  const body = route.body?.();
  return ctx.app.inject({
    method: route.method,
    url: route.url,
    headers,
    ...(body === undefined ? {} : { payload: body as object }),
  });
}

function assertUnauthorized(res: LightMyRequestResponse, label: string): void {
  assert.equal(res.statusCode, 401, `${label}: ${res.body}`);
  assert.equal(res.headers['www-authenticate'], 'Bearer', label);
  assert.equal(problemOf(res).code, 'unauthorized', label);
}

/**
 * Registers the security cases of contract §1 for one route. `getCtx` returns the shared app of the
 * calling test file (created in its `before`).
 */
export function describeAuth(route: KeyedRoute, getCtx: () => TestContext): void {
  describe(`${route.name}: authentication`, () => {
    let ctx: TestContext;
    let product: { id: string; eventsKey: string; reportsKey: string };
    const rightKey = () => (route.kind === 'events' ? product.eventsKey : product.reportsKey);
    const wrongKey = () => (route.kind === 'events' ? product.reportsKey : product.eventsKey);

    before(async () => {
      ctx = getCtx();
      product = await ctx.product(`auth ${route.name}`);
    });

    it('succeeds with a valid key of the right kind', async () => {
      const res = await send(ctx, route, bearer(rightKey()));
      assert.ok(route.okStatus.includes(res.statusCode), `${res.statusCode} ${res.body}`);
    });

    it('401 with WWW-Authenticate: Bearer when the header is missing', async () => {
      assertUnauthorized(await send(ctx, route, {}), 'missing');
    });

    for (const [why, header] of [
      ['empty', ''],
      ['Basic scheme', 'Basic dXNlcjpwYXNz'],
      ['scheme only', 'Bearer'],
      ['scheme and blank', 'Bearer   '],
      ['two tokens', 'Bearer inlet_ev_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa extra'],
      ['no scheme', 'inlet_ev_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'],
    ] as const) {
      it(`401 for a malformed header (${why})`, async () => {
        assertUnauthorized(await send(ctx, route, { authorization: header }), why);
      });
    }

    it('401 for the valid key sent without its scheme', async () => {
      assertUnauthorized(await send(ctx, route, { authorization: rightKey() }), 'no scheme');
    });

    it('401 for an unknown key of the right shape, and for garbage', async () => {
      const unknown = generateKey(route.kind).key;
      assertUnauthorized(await send(ctx, route, bearer(unknown)), 'unknown');
      assertUnauthorized(await send(ctx, route, bearer('not-a-key')), 'garbage');
      // A real key with one character changed.
      const key = rightKey();
      const tampered = key.slice(0, -1) + (key.endsWith('a') ? 'b' : 'a');
      const res = await send(ctx, route, bearer(tampered));
      assertUnauthorized(res, 'tampered');
      assert.equal(res.body.includes(tampered.slice(9)), false, 'the presented secret is not echoed');
    });

    it('401 for the admin token used as an API key', async () => {
      assertUnauthorized(await send(ctx, route, adminHeaders()), 'admin token');
    });

    it('403 forbidden for a valid key of the wrong kind', async () => {
      const res = await send(ctx, route, bearer(wrongKey()));
      assert.equal(res.statusCode, 403, res.body);
      assert.equal(res.body.includes(wrongKey().slice(9)), false, 'the presented secret is not echoed');
      assert.equal(problemOf(res).code, 'forbidden');
      assert.equal(res.headers['www-authenticate'], undefined);
    });

    it('401 once the key is revoked through the admin API, at once, on the same app', async () => {
      const created = await ctx.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${product.id}/keys`,
        headers: adminHeaders(),
        payload: { kind: route.kind },
      });
      const { id, key } = created.json().data as { id: string; key: string };
      const ok = await send(ctx, route, bearer(key));
      assert.ok(route.okStatus.includes(ok.statusCode), ok.body);
      const revoked = await ctx.app.inject({ method: 'DELETE', url: `/admin/v1/keys/${id}`, headers: adminHeaders() });
      assert.equal(revoked.statusCode, 204);
      assertUnauthorized(await send(ctx, route, bearer(key)), 'revoked');
    });

    it('401 for an expired key', async () => {
      const generated = generateKey(route.kind);
      await ctx.services.storage.apiKeys.create({
        id: prefixedId('key'),
        productId: product.id,
        kind: route.kind,
        name: 'expired',
        prefix: generated.prefix,
        keyHash: generated.hash,
        createdAt: new Date(Date.now() - 3_600_000).toISOString(),
        expiresAt: new Date(Date.now() - 1000).toISOString(),
        revokedAt: null,
        lastUsedAt: null,
      });
      assertUnauthorized(await send(ctx, route, bearer(generated.key)), 'expired');
    });

    it('a key that expires shortly works until then and is refused after', async () => {
      // The key service's clock moves forward instead of the test sleeping until the expiry.
      const expiresAt = new Date(ctx.clock.now() + 1000).toISOString();
      const created = await ctx.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${product.id}/keys`,
        headers: adminHeaders(),
        payload: { kind: route.kind, expires_at: expiresAt },
      });
      assert.equal(created.statusCode, 201, created.body);
      const { key } = created.json().data as { key: string };
      const ok = await send(ctx, route, bearer(key));
      assert.ok(route.okStatus.includes(ok.statusCode), ok.body);
      ctx.clock.advance(Math.max(0, Date.parse(expiresAt) - ctx.clock.now()) + 1);
      assertUnauthorized(await send(ctx, route, bearer(key)), 'expired after use');
    });

    it('an auth failure is decided before the body is looked at (invalid body, no key → 401, not 400)', async () => {
      const res = await ctx.app.inject({
        method: route.method,
        url: route.url,
        headers: { 'content-type': 'application/json' },
        payload: route.method === 'GET' ? undefined : '{',
      });
      assertUnauthorized(res, 'invalid body');
    });
  });
}
