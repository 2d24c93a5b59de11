// Contract §1 "Admin": products and keys over /admin/v1, the operator token, and the API being
// absent when INLET_ADMIN_TOKEN is unset.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

const UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

let ctx: TestContext;

before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

function admin(method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown, headers = adminHeaders()) {
  return ctx.app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
}

describe('products', () => {
  it('POST /admin/v1/products → 201 { data: { id, name, created_at, retention } }', async () => {
    const res = await admin('POST', '/admin/v1/products', { name: 'Acme Inc' });
    assert.equal(res.statusCode, 201, res.body);
    const { data } = res.json();
    assert.deepEqual(Object.keys(data).sort(), ['created_at', 'id', 'name', 'retention']);
    // governance.md §4: a new product keeps its events forever.
    assert.deepEqual(data.retention, { events_days: null });
    assert.equal(data.name, 'Acme Inc');
    assert.equal(typeof data.id, 'string');
    assert.match(data.created_at, UTC_MS);
  });

  it('GET /admin/v1/products lists the created products', async () => {
    const created = (await admin('POST', '/admin/v1/products', { name: 'Listed' })).json().data;
    const res = await admin('GET', '/admin/v1/products');
    assert.equal(res.statusCode, 200);
    const list = res.json().data as Array<{ id: string; name: string; created_at: string }>;
    assert.ok(Array.isArray(list));
    assert.deepEqual(
      list.find((p) => p.id === created.id),
      created,
    );
  });

  for (const [why, body] of [
    ['missing name', {}],
    ['empty name', { name: '' }],
    ['blank name', { name: '   ' }],
    ['name not a string', { name: 42 }],
    ['unknown field', { name: 'x', plan: 'pro' }],
  ] as const) {
    it(`400 validation_error for ${why}`, async () => {
      const res = await admin('POST', '/admin/v1/products', body);
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(problemOf(res).code, 'validation_error');
    });
  }
});

describe('keys', () => {
  let productId: string;
  before(async () => {
    productId = (await admin('POST', '/admin/v1/products', { name: 'Keys' })).json().data.id;
  });

  it('POST /admin/v1/products/{id}/keys → 201 with id, kind, key, prefix, name, created_at, expires_at', async () => {
    const expiresAt = '2099-01-01T01:00:00+01:00';
    const res = await admin('POST', `/admin/v1/products/${productId}/keys`, {
      kind: 'reports',
      name: 'dashboard',
      expires_at: expiresAt,
    });
    assert.equal(res.statusCode, 201, res.body);
    const { data } = res.json();
    for (const field of ['id', 'kind', 'key', 'prefix', 'name', 'created_at', 'expires_at'])
      assert.ok(field in data, `${field} missing`);
    assert.equal(data.kind, 'reports');
    assert.match(data.key, /^inlet_rp_[0-9A-Za-z]{32,}$/);
    assert.ok(data.key.startsWith(data.prefix));
    assert.ok(data.prefix.length < data.key.length);
    assert.equal(data.name, 'dashboard');
    assert.match(data.created_at, UTC_MS);
    assert.equal(data.expires_at, '2099-01-01T00:00:00.000Z');
  });

  it('name and expires_at are optional (null)', async () => {
    const res = await admin('POST', `/admin/v1/products/${productId}/keys`, { kind: 'events' });
    assert.equal(res.statusCode, 201);
    assert.equal(res.json().data.name, null);
    assert.equal(res.json().data.expires_at, null);
    assert.match(res.json().data.key, /^inlet_ev_/);
  });

  it('GET /admin/v1/products/{id}/keys lists the keys of that product only, without secrets', async () => {
    const other = (await admin('POST', '/admin/v1/products', { name: 'Other' })).json().data.id;
    const mine = (await admin('POST', `/admin/v1/products/${productId}/keys`, { kind: 'events', name: 'mine' })).json()
      .data;
    const theirs = (await admin('POST', `/admin/v1/products/${other}/keys`, { kind: 'events' })).json().data;
    const res = await admin('GET', `/admin/v1/products/${productId}/keys`);
    assert.equal(res.statusCode, 200);
    const list = res.json().data as Array<Record<string, unknown>>;
    const listed = list.find((k) => k.id === mine.id);
    assert.ok(listed);
    assert.equal(listed.prefix, mine.prefix);
    assert.equal(listed.kind, 'events');
    assert.equal(listed.name, 'mine');
    assert.equal(listed.revoked_at, null);
    assert.equal('key' in listed, false);
    assert.equal(res.body.includes(mine.key), false);
    assert.equal(
      list.some((k) => k.id === theirs.id),
      false,
    );
  });

  for (const [why, body] of [
    ['missing kind', {}],
    ['unknown kind', { kind: 'admin' }],
    ['expires_at not RFC 3339', { kind: 'events', expires_at: 'tomorrow' }],
    ['expires_at without offset', { kind: 'events', expires_at: '2099-01-01T00:00:00' }],
    ['expires_at impossible date', { kind: 'events', expires_at: '2099-02-30T00:00:00Z' }],
    ['expires_at in the past', { kind: 'events', expires_at: '2020-01-01T00:00:00Z' }],
    ['unknown field', { kind: 'events', scopes: ['all'] }],
  ] as const) {
    it(`400 validation_error for ${why}`, async () => {
      const res = await admin('POST', `/admin/v1/products/${productId}/keys`, body);
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
    });
  }

  it('404 not_found for keys of an unknown product (create and list)', async () => {
    const create = await admin('POST', '/admin/v1/products/prd_doesnotexist/keys', { kind: 'events' });
    assert.equal(create.statusCode, 404, create.body);
    assert.equal(problemOf(create).code, 'not_found');
    const list = await admin('GET', '/admin/v1/products/prd_doesnotexist/keys');
    assert.equal(list.statusCode, 404);
    assert.equal(problemOf(list).code, 'not_found');
    const usage = await admin('GET', '/admin/v1/products/prd_doesnotexist/legacy_usage');
    assert.equal(usage.statusCode, 404);
  });

  it('DELETE /admin/v1/keys/{id} → 204 with no body; the key stops working; the listing shows revoked_at', async () => {
    const created = (await admin('POST', `/admin/v1/products/${productId}/keys`, { kind: 'events' })).json().data;
    const event = { subject_type: 'user', subject_id: 'u', event_type: 'a', action: 'b' };
    assert.equal(
      (await ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(created.key), payload: event }))
        .statusCode,
      201,
    );
    const res = await admin('DELETE', `/admin/v1/keys/${created.id}`);
    assert.equal(res.statusCode, 204);
    assert.equal(res.body, '');
    assert.equal(
      (await ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(created.key), payload: event }))
        .statusCode,
      401,
    );
    const listed = (
      (await admin('GET', `/admin/v1/products/${productId}/keys`)).json().data as Array<{
        id: string;
        revoked_at: string | null;
      }>
    ).find((k) => k.id === created.id);
    assert.match(listed?.revoked_at ?? '', UTC_MS);
  });

  it('DELETE of an unknown key → 404 not_found', async () => {
    const res = await admin('DELETE', '/admin/v1/keys/key_doesnotexist');
    assert.equal(res.statusCode, 404);
    assert.equal(problemOf(res).code, 'not_found');
  });
});

describe('admin authentication', () => {
  const routes: Array<[string, 'GET' | 'POST' | 'DELETE', string, unknown]> = [
    ['create product', 'POST', '/admin/v1/products', { name: 'x' }],
    ['list products', 'GET', '/admin/v1/products', undefined],
    ['create key', 'POST', '/admin/v1/products/prd_x/keys', { kind: 'events' }],
    ['list keys', 'GET', '/admin/v1/products/prd_x/keys', undefined],
    ['revoke key', 'DELETE', '/admin/v1/keys/key_x', undefined],
    ['legacy usage', 'GET', '/admin/v1/products/prd_x/legacy_usage', undefined],
  ];
  for (const [name, method, url, body] of routes) {
    it(`${name}: 401 with WWW-Authenticate for a missing, wrong or API-key token`, async () => {
      const p = await ctx.product(`admin-auth ${name}`);
      for (const headers of [
        {},
        { authorization: 'Bearer wrong-token-0123456789abcdef' },
        { authorization: `Basic ${Buffer.from('admin:test-admin-token-0123456789abcdef').toString('base64')}` },
        bearer(p.eventsKey),
        { authorization: 'Bearer test-admin-token-0123456789abcdeF' },
      ]) {
        const res = await admin(method, url, body, headers as Record<string, string>);
        assert.equal(res.statusCode, 401, `${JSON.stringify(headers)}: ${res.body}`);
        assert.equal(problemOf(res).code, 'unauthorized');
        assert.equal(res.headers['www-authenticate'], 'Bearer');
        assert.equal(res.body.includes('test-admin-token'), false, 'no token in the body');
      }
    });
  }

  it('nothing is created by an unauthenticated request', async () => {
    const before = (await admin('GET', '/admin/v1/products')).json().data.length;
    await admin('POST', '/admin/v1/products', { name: 'sneaky' }, { authorization: 'Bearer nope' });
    assert.equal((await admin('GET', '/admin/v1/products')).json().data.length, before);
  });
});

describe('admin API disabled', () => {
  let off: TestContext;
  before(async () => {
    off = await createTestApp({ adminToken: undefined });
  });
  after(async () => off.close());

  it('every admin route is 404 when INLET_ADMIN_TOKEN is unset, whatever token is sent', async () => {
    for (const [method, url] of [
      ['POST', '/admin/v1/products'],
      ['GET', '/admin/v1/products'],
      ['POST', '/admin/v1/products/p/keys'],
      ['GET', '/admin/v1/products/p/keys'],
      ['DELETE', '/admin/v1/keys/k'],
    ] as const) {
      for (const headers of [{}, adminHeaders(), { authorization: 'Bearer undefined' }]) {
        const res = await off.app.inject({
          method,
          url,
          headers,
          ...(method === 'POST' ? { payload: { name: 'x', kind: 'events' } } : {}),
        });
        assert.equal(res.statusCode, 404, `${method} ${url}: ${res.body}`);
        assert.equal(problemOf(res).code, 'not_found');
      }
    }
  });

  it('the event routes still work', async () => {
    const { key } = await off.services.keys.createKey((await off.services.keys.createProduct('p')).id, {
      kind: 'events',
    });
    const res = await off.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(key),
      payload: { subject_type: 'user', subject_id: 'u', event_type: 'a', action: 'b' },
    });
    assert.equal(res.statusCode, 201);
  });
});
