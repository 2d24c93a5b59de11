// Contract §3: problem+json for every error kind, JSON-only bodies, gzip with limits on the
// decompressed size, X-Request-Id on every response, nothing internal in a body.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

let ctx: TestContext;
let product: { id: string; eventsKey: string; reportsKey: string };

before(async () => {
  ctx = await createTestApp();
  product = await ctx.product('http');
});
after(async () => ctx.close());

const event = { subject_type: 'user', subject_id: 'u', event_type: 'project', action: 'created' };

function raw(url: string, body: string | Buffer, headers: Record<string, string> = {}) {
  return ctx.app.inject({
    method: 'POST',
    url,
    headers: { ...bearer(product.eventsKey), 'content-type': 'application/json', ...headers },
    payload: body,
  });
}

describe('problem+json on every error kind', () => {
  it('404 not_found for an unknown route, with the RFC 9457 shape', async () => {
    const res = await ctx.app.inject({ method: 'GET', url: '/api/v3/nothing' });
    assert.equal(res.statusCode, 404);
    const problem = problemOf(res);
    assert.equal(problem.code, 'not_found');
    assert.equal(problem.type, 'urn:inlet:problem:not_found');
    assert.equal(problem.request_id, res.headers['x-request-id']);
  });

  for (const url of ['/api/v2/events/%', '/admin/v1/products/%ZZ/keys']) {
    it(`400 problem+json with X-Request-Id for a malformed URL (${url})`, async () => {
      const res = await ctx.app.inject({
        method: 'POST',
        url,
        headers: { ...bearer(product.eventsKey), 'x-request-id': 'bad-url-1' },
        payload: event,
      });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(problemOf(res).code, 'validation_error');
      assert.equal(res.headers['x-request-id'], 'bad-url-1');
    });
  }

  it('404 for a known path with the wrong method', async () => {
    const res = await ctx.app.inject({ method: 'GET', url: '/api/v2/events' });
    assert.ok([404, 405].includes(res.statusCode));
    problemOf(res);
  });

  for (const url of ['/api/v1/events', '/api/v2/events', '/api/v2/events/batch']) {
    it(`${url}: 400 invalid_json for a body that is not JSON`, async () => {
      const res = await raw(url, '{"subject_type": "user",');
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(problemOf(res).code, 'invalid_json');
    });

    it(`${url}: 400 invalid_json for an empty body`, async () => {
      const res = await raw(url, '');
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(problemOf(res).code, 'invalid_json');
    });

    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'application/xml',
      'multipart/form-data; boundary=x',
    ]) {
      it(`${url}: 415 unsupported_media_type for ${type}`, async () => {
        const res = await raw(url, JSON.stringify(event), { 'content-type': type });
        assert.equal(res.statusCode, 415, res.body);
        assert.equal(problemOf(res).code, 'unsupported_media_type');
      });
    }

    it(`${url}: 415 for a body without Content-Type`, async () => {
      const res = await ctx.app.inject({
        method: 'POST',
        url,
        headers: bearer(product.eventsKey),
        payload: Buffer.from(JSON.stringify(event)),
      });
      assert.equal(res.statusCode, 415, res.body);
      assert.equal(problemOf(res).code, 'unsupported_media_type');
    });
  }

  it('accepts a charset parameter on application/json', async () => {
    for (const type of ['application/json; charset=utf-8', 'application/json;charset=UTF-8', 'Application/JSON']) {
      const res = await raw('/api/v2/events', JSON.stringify(event), { 'content-type': type });
      assert.equal(res.statusCode, 201, `${type}: ${res.body}`);
    }
  });

  it('415 for a JSON body in another charset than UTF-8', async () => {
    const res = await raw('/api/v2/events', JSON.stringify(event), {
      'content-type': 'application/json; charset=latin1',
    });
    assert.equal(res.statusCode, 415, res.body);
    assert.match(problemOf(res).detail, /latin1/);
  });

  it('400 validation_error (not "invalid JSON") for __proto__ and constructor.prototype keys', async () => {
    for (const body of [
      '{"__proto__":{"x":1},"subject_type":"user","subject_id":"u","event":"a.b"}',
      '{"properties":{"constructor":{"prototype":{"x":1}}},"subject_type":"user","subject_id":"u","event":"a.b"}',
    ]) {
      const res = await raw('/api/v2/events', body);
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.match(problem.detail, /__proto__/);
    }
  });

  it('413 payload_too_large for a single event over 32 KiB', async () => {
    const res = await raw('/api/v2/events', JSON.stringify({ ...event, properties: { blob: 'x'.repeat(33 * 1024) } }));
    assert.equal(res.statusCode, 413, res.body);
    assert.equal(problemOf(res).code, 'payload_too_large');
    const v1 = await raw(
      '/api/v1/events',
      JSON.stringify({
        event_type: 'user_active',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-03-01T12:00:00Z',
        metadata: { blob: 'x'.repeat(33 * 1024) },
      }),
    );
    assert.equal(v1.statusCode, 413);
    assert.equal(problemOf(v1).code, 'payload_too_large');
  });

  it('the error body carries every documented member and nothing internal', async () => {
    const res = await raw('/api/v2/events', JSON.stringify({ ...event, subject_type: 'team' }));
    const problem = problemOf(res);
    assert.equal(problem.status, 400);
    assert.equal(typeof problem.title, 'string');
    assert.equal(typeof problem.detail, 'string');
    assert.ok(Array.isArray(problem.errors));
    assert.doesNotMatch(res.body, /\bat .*\.(ts|js):\d+/);
    assert.equal('stack' in problem, false);
  });

  it('closed storage answers 503 unavailable problem+json without stack trace, SQL text or driver message', async () => {
    const broken = await createTestApp();
    const p = await broken.product('broken');
    await broken.services.storage.close();
    try {
      const res = await broken.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(p.eventsKey),
        payload: event,
      });
      // Storage gone (shutdown, lost database) is "retry later", not a bug (contract §3: unavailable).
      assert.equal(res.statusCode, 503, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'unavailable');
      const admin = await broken.app.inject({ method: 'GET', url: '/admin/v1/products', headers: adminHeaders() });
      assert.equal(admin.statusCode, 503, admin.body);
      assert.equal(problemOf(admin).code, 'unavailable');
      assert.doesNotMatch(res.body, /\bat .*\.(ts|js):\d+/);
      assert.doesNotMatch(res.body, /\b(INSERT|SELECT|UPDATE|DELETE)\b/);
      assert.doesNotMatch(res.body, /inlet_ev_/);
      assert.doesNotMatch(res.body, /destroyed|connection|sqlite|postgres/i);
    } finally {
      await broken.app.close();
      await broken.database.drop();
    }
  });
});

describe('gzip request bodies', () => {
  it('a gzip body is accepted', async () => {
    const res = await raw('/api/v2/events', gzipSync(JSON.stringify(event)), { 'content-encoding': 'gzip' });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().data.canonical_name, 'project_created');
  });

  it('a gzip batch is accepted', async () => {
    const res = await raw('/api/v2/events/batch', gzipSync(JSON.stringify({ events: [event, event] })), {
      'content-encoding': 'gzip',
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().meta.created, 2);
  });

  it('the 32 KiB event limit applies to the decompressed size', async () => {
    const body = JSON.stringify({ ...event, properties: { blob: 'x'.repeat(40 * 1024) } });
    const compressed = gzipSync(body);
    assert.ok(compressed.length < 32 * 1024);
    const res = await raw('/api/v2/events', compressed, { 'content-encoding': 'gzip' });
    assert.equal(res.statusCode, 413, res.body);
    assert.equal(problemOf(res).code, 'payload_too_large');
  });

  it('the 5 MiB body limit applies to the decompressed size (a small zip bomb is refused)', async () => {
    const body = JSON.stringify({ events: [{ ...event, properties: { blob: 'x'.repeat(6 * 1024 * 1024) } }] });
    const compressed = gzipSync(body);
    assert.ok(compressed.length < 100 * 1024);
    const res = await raw('/api/v2/events/batch', compressed, { 'content-encoding': 'gzip' });
    assert.equal(res.statusCode, 413, res.body);
    assert.equal(problemOf(res).code, 'payload_too_large');
  });

  it('a corrupt gzip body → 400 problem', async () => {
    const good = gzipSync(JSON.stringify(event));
    for (const payload of [Buffer.from('not gzip at all'), good.subarray(0, good.length - 8)]) {
      const res = await raw('/api/v2/events', payload, { 'content-encoding': 'gzip' });
      assert.equal(res.statusCode, 400, res.body);
      assert.equal(problemOf(res).code, 'invalid_json');
    }
  });

  it('an unsupported content encoding → 415', async () => {
    const res = await raw('/api/v2/events', Buffer.from(JSON.stringify(event)), { 'content-encoding': 'br' });
    assert.equal(res.statusCode, 415, res.body);
    assert.equal(problemOf(res).code, 'unsupported_media_type');
  });
});

describe('X-Request-Id', () => {
  const routes: Array<{ name: string; request: () => Promise<import('fastify').LightMyRequestResponse> }> = [];
  before(() => {
    routes.push(
      { name: 'success', request: () => raw('/api/v2/events', JSON.stringify(event)) },
      { name: '400', request: () => raw('/api/v2/events', '{') },
      { name: '401', request: () => ctx.app.inject({ method: 'POST', url: '/api/v2/events', payload: event }) },
      { name: '404', request: () => ctx.app.inject({ method: 'GET', url: '/nope' }) },
      { name: 'healthz', request: () => ctx.app.inject({ method: 'GET', url: '/healthz' }) },
      {
        name: 'admin',
        request: () => ctx.app.inject({ method: 'GET', url: '/admin/v1/products', headers: adminHeaders() }),
      },
    );
  });

  it('is on every response, generated when the client sent none, and different per request', async () => {
    const ids = new Set<string>();
    for (const route of routes) {
      const res = await route.request();
      const id = res.headers['x-request-id'];
      assert.equal(typeof id, 'string', `${route.name} lacks X-Request-Id`);
      assert.ok((id as string).length >= 8);
      ids.add(id as string);
      if (res.statusCode >= 400) assert.equal(problemOf(res).request_id, id);
    }
    assert.equal(ids.size, routes.length);
  });

  it('echoes a sane client id, on success and on error', async () => {
    const ok = await raw('/api/v2/events', JSON.stringify(event), { 'x-request-id': 'client-req_123.abc:def' });
    assert.equal(ok.headers['x-request-id'], 'client-req_123.abc:def');
    const bad = await raw('/api/v2/events', '{', { 'x-request-id': 'client-err-1' });
    assert.equal(bad.headers['x-request-id'], 'client-err-1');
    assert.equal(problemOf(bad).request_id, 'client-err-1');
  });

  for (const [why, id] of [
    ['300 characters', 'a'.repeat(300)],
    ['spaces', 'my request id'],
    ['quotes and angle brackets', '<script>"x"</script>'],
    ['newline-like control characters', 'abc\tdef'],
  ] as const) {
    it(`replaces an insane client id (${why})`, async () => {
      const res = await raw('/api/v2/events', JSON.stringify(event), { 'x-request-id': id });
      const sent = res.headers['x-request-id'];
      assert.equal(typeof sent, 'string');
      assert.notEqual(sent, id);
      assert.match(sent as string, /^[A-Za-z0-9._:-]{8,128}$/);
    });
  }
});
