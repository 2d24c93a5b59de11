// Contract §9: health, readiness, Prometheus metrics, OpenAPI 3.1 generated from the request
// schemas, and the docs page.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearer, createTestApp, dialect, problemOf, type TestContext } from './helpers.js';

let ctx: TestContext;

before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

describe('health and readiness', () => {
  it('GET /healthz → 200 without authentication', async () => {
    const res = await ctx.app.inject({ method: 'GET', url: '/healthz' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { data: { status: 'ok' } });
  });

  it('GET /readyz → 200 while storage is reachable', async () => {
    const res = await ctx.app.inject({ method: 'GET', url: '/readyz' });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().data.status, 'ready');
  });

  it('GET /readyz → 503 unavailable once storage is closed; /healthz stays 200', async () => {
    const other = await createTestApp();
    try {
      await other.services.storage.close();
      const res = await other.app.inject({ method: 'GET', url: '/readyz' });
      assert.equal(res.statusCode, 503, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'unavailable');
      assert.doesNotMatch(res.body, /\bat .*\.(ts|js):\d+/);
      assert.equal((await other.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    } finally {
      await other.app.close();
      await other.database.drop();
    }
  });
});

describe('GET /metrics', () => {
  /** Sum of the samples of `name` whose labels include `labels`. */
  function sample(text: string, name: string, labels: Record<string, string>): number {
    let sum = 0;
    for (const line of text.split('\n')) {
      if (!line.startsWith(`${name}{`)) continue;
      const labelText = line.slice(name.length + 1, line.lastIndexOf('}'));
      const parsed = Object.fromEntries([...labelText.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
      if (Object.entries(labels).every(([k, v]) => parsed[k] === v))
        sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return sum;
  }

  it('on SQLite: inlet_sqlite_event_keys_in_memory counts the keys of stored events with an external_id, once each; inlet_sqlite_event_subjects_in_memory every stored event', async () => {
    const p = await ctx.product('event-keys-metrics');
    const gauge = async (name: string) => {
      const text = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
      const line = text.split('\n').find((l) => l.startsWith(`${name} `));
      return line === undefined ? undefined : Number(line.split(' ')[1]);
    };
    const held = () => gauge('inlet_sqlite_event_keys_in_memory');
    const before = await held();
    const subjectsBefore = await gauge('inlet_sqlite_event_subjects_in_memory');
    if (dialect === 'postgres') {
      assert.equal(before, undefined, 'PostgreSQL keeps event_dedup: no such metric');
      assert.equal(subjectsBefore, undefined, 'nor a subject index');
      return;
    }
    const base = { subject_type: 'user', subject_id: 'u', event_type: 'a', action: 'b' };
    const post = (payload: object) =>
      ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(p.eventsKey), payload });
    assert.equal((await post({ ...base, external_id: 'k1' })).statusCode, 201);
    assert.equal((await post({ ...base, external_id: 'k1' })).statusCode, 200);
    assert.equal((await post({ ...base, external_id: 'k2' })).statusCode, 201);
    assert.equal((await post(base)).statusCode, 201);
    assert.equal(await held(), before! + 2);
    assert.equal(await gauge('inlet_sqlite_event_subjects_in_memory'), subjectsBefore! + 3);
    const metrics = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
    for (const name of [
      'inlet_sqlite_event_key_merges_total',
      'inlet_sqlite_event_keys_swept_total',
      'inlet_sqlite_event_key_sweep_seconds_total',
      'inlet_sqlite_event_subject_merges_total',
      'inlet_sqlite_event_subject_merge_seconds_total',
      'inlet_sqlite_event_subjects_swept_total',
      'inlet_sqlite_event_subject_sweep_seconds_total',
      'inlet_sqlite_event_key_maintenance_busy_seconds_total',
      'inlet_sqlite_event_subject_maintenance_busy_seconds_total',
    ]) {
      assert.match(metrics, new RegExp(`# TYPE ${name} counter`));
    }
    assert.match(metrics, /# TYPE inlet_sqlite_event_key_filter_bytes gauge/);
  });

  it('is Prometheus text; inlet_events_total moves by endpoint, format and outcome; the latency histogram is there', async () => {
    const p = await ctx.product('metrics');
    const read = async () => {
      const res = await ctx.app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/plain/);
      return res.body;
    };
    const before = await read();
    const post = (url: string, payload: unknown) =>
      ctx.app.inject({ method: 'POST', url, headers: bearer(p.eventsKey), payload: payload as object });
    const base = { subject_type: 'user', subject_id: 'u' };
    await post('/api/v2/events', { ...base, event_type: 'a', action: 'b', external_id: 'm1' });
    await post('/api/v2/events', { ...base, event_type: 'a', action: 'b', external_id: 'm1' });
    await post('/api/v2/events', { ...base, event: 'a.b' });
    await post('/api/v2/events', { ...base, event_type: 'a_b' });
    await post('/api/v1/events', { ...base, event_type: 'user_active', occurred_at: '2026-03-01T12:00:00Z' });
    await post('/api/v2/events/batch', {
      events: [
        { ...base, event_type: 'a', action: 'b' },
        { ...base, event_type: 'BAD', action: 'b' },
      ],
    });
    // Rejected single events count as rejected, whether a field rule or a name rule refused them.
    await post('/api/v2/events', { ...base, subject_type: 'team', event_type: 'a', action: 'b' });
    await post('/api/v2/events', { ...base, event: 'nodot' });
    await post('/api/v1/events', { ...base, event_type: 'user_active' });
    await post('/api/v1/events', { ...base, event_type: 'project_created', occurred_at: '2026-03-01T12:00:00Z' });
    const after = await read();
    assert.match(after, /# TYPE inlet_events_total counter/);
    const delta = (labels: Record<string, string>) =>
      sample(after, 'inlet_events_total', labels) - sample(before, 'inlet_events_total', labels);
    assert.equal(delta({ endpoint: 'v2', format: 'preferred', outcome: 'created' }), 1);
    assert.equal(delta({ endpoint: 'v2', format: 'preferred', outcome: 'duplicate' }), 1);
    assert.equal(delta({ endpoint: 'v2', format: 'unified', outcome: 'created' }), 1);
    assert.equal(delta({ endpoint: 'v2', format: 'legacy', outcome: 'created' }), 1);
    assert.equal(delta({ endpoint: 'v1', format: 'v1', outcome: 'created' }), 1);
    assert.equal(delta({ endpoint: 'batch', format: 'preferred', outcome: 'created' }), 1);
    assert.equal(delta({ endpoint: 'batch', outcome: 'rejected' }), 1);
    assert.equal(delta({ endpoint: 'v2', outcome: 'rejected' }), 2);
    assert.equal(delta({ endpoint: 'v1', outcome: 'rejected' }), 2);
    assert.match(after, /# TYPE inlet_http_request_duration_seconds histogram/);
    assert.ok(
      sample(after, 'inlet_http_request_duration_seconds_count', {
        route: '/api/v2/events',
        method: 'POST',
        status: '201',
      }) >= 2,
    );
    assert.match(after, /inlet_http_request_duration_seconds_bucket\{[^}]*le="\+Inf"/);
  });
});

describe('OpenAPI and docs', () => {
  let doc: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  before(async () => {
    const res = await ctx.app.inject({ method: 'GET', url: '/openapi.json' });
    assert.equal(res.statusCode, 200);
    doc = res.json();
  });

  it('is OpenAPI 3.1', () => {
    assert.match(doc.openapi, /^3\.1\./);
    assert.equal(typeof doc.info.title, 'string');
  });

  const documented: Array<[string, string, boolean]> = [
    ['post', '/api/v1/events', true],
    ['post', '/api/v2/events', true],
    ['post', '/api/v2/events/batch', true],
    ['post', '/api/v2/identify', true],
    ['post', '/api/v2/alias', true],
    ['post', '/admin/v1/products', true],
    ['get', '/admin/v1/products', false],
    ['post', '/admin/v1/products/{product_id}/keys', true],
    ['get', '/admin/v1/products/{product_id}/keys', false],
    ['delete', '/admin/v1/keys/{key_id}', false],
    ['get', '/admin/v1/products/{product_id}/legacy_usage', false],
    ['get', '/healthz', false],
    ['get', '/readyz', false],
    ['get', '/metrics', false],
  ];
  for (const [method, path, hasBody] of documented) {
    it(`documents ${method.toUpperCase()} ${path}${hasBody ? ' with its request schema' : ''}`, () => {
      const operation = doc.paths?.[path]?.[method];
      assert.ok(operation, `${method} ${path} missing from ${Object.keys(doc.paths ?? {}).join(', ')}`);
      assert.ok(operation.responses && Object.keys(operation.responses).length > 0);
      if (hasBody)
        assert.ok(operation.requestBody?.content?.['application/json']?.schema, `${path} has no request schema`);
    });
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  function resolve(schema: Record<string, any>): Record<string, any> {
    if (typeof schema.$ref !== 'string') return schema;
    const name = schema.$ref.replace('#/components/schemas/', '');
    const target = doc.components?.schemas?.[name];
    assert.ok(target, `dangling $ref ${schema.$ref}`);
    return resolve(target);
  }

  it('the request schemas are the validating ones: v2 lists every field and forbids unknown ones', () => {
    const schema = resolve(doc.paths['/api/v2/events'].post.requestBody.content['application/json'].schema);
    assert.deepEqual(
      Object.keys(schema.properties).sort(),
      [
        'action',
        'event',
        'event_type',
        'external_id',
        'metadata',
        'occurred_at',
        'properties',
        'subject_id',
        'subject_type',
      ].sort(),
    );
    assert.equal(schema.additionalProperties, false);
    assert.deepEqual([...schema.required].sort(), ['subject_id', 'subject_type']);
    const v1 = resolve(doc.paths['/api/v1/events'].post.requestBody.content['application/json'].schema);
    assert.deepEqual([...v1.required].sort(), ['event_type', 'occurred_at', 'subject_id', 'subject_type']);
    const batch = resolve(doc.paths['/api/v2/events/batch'].post.requestBody.content['application/json'].schema);
    assert.equal(batch.properties.events.type, 'array');
    const item = resolve(batch.properties.events.items);
    assert.ok(item.properties.subject_type);
  });

  it('every $ref points at a defined component', () => {
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"([^"]+)"/g)].map((m) => m[1]!);
    for (const ref of refs) {
      assert.match(ref, /^#\/components\/schemas\//);
      assert.ok(doc.components.schemas[ref.replace('#/components/schemas/', '')], `dangling ${ref}`);
    }
  });

  it('GET /docs serves an HTML page', async () => {
    let res = await ctx.app.inject({ method: 'GET', url: '/docs' });
    if (res.statusCode >= 300 && res.statusCode < 400)
      res = await ctx.app.inject({ method: 'GET', url: String(res.headers.location) });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /text\/html/);
    assert.match(res.body, /<html/i);
  });
});
