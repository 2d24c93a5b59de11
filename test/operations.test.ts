// Contract §9: health, readiness, Prometheus metrics, OpenAPI 3.1 generated from the request
// schemas, and the docs page.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Fastify from 'fastify';
import { adminHeaders, bearer, createTestApp, dialect, problemOf, type TestContext } from './helpers.js';
import { PROBLEM_MEDIA_TYPE, ProblemSchema, problemResponse } from '../src/http/schemas/common.js';
import { cachedSerializerFactory } from '../src/http/serializer-cache.js';

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
      'inlet_sqlite_event_key_merge_seconds_total',
      'inlet_sqlite_event_key_level_moves_total',
      'inlet_sqlite_event_subject_level_moves_total',
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
        'context',
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

  type Operation = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Every operation of the document: [method, path, operation]. */
  function operations(): Array<[string, string, Operation]> {
    const all: Array<[string, string, Operation]> = [];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>))
      for (const [method, operation] of Object.entries(item))
        if (['get', 'put', 'post', 'delete', 'patch', 'head', 'options'].includes(method))
          all.push([method, path, operation]);
    return all;
  }

  it('documents every 4xx and 5xx answer as application/problem+json with the Problem schema, as the wire has it', () => {
    const wrong: string[] = [];
    let errors = 0;
    for (const [method, path, operation] of operations()) {
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        if (!/^[45]/.test(status)) continue;
        errors++;
        const content = (response as { content?: Record<string, { schema?: { $ref?: string } }> }).content ?? {};
        const types = Object.keys(content);
        if (types.length !== 1 || types[0] !== PROBLEM_MEDIA_TYPE)
          wrong.push(`${method.toUpperCase()} ${path} ${status}: ${types.join(', ') || 'no content'}`);
        else if (content[PROBLEM_MEDIA_TYPE]?.schema?.$ref !== '#/components/schemas/Problem')
          wrong.push(`${method.toUpperCase()} ${path} ${status}: not the Problem schema`);
      }
    }
    assert.ok(errors > 200, `only ${errors} error answers documented`);
    assert.deepEqual(wrong, []);
  });

  it("documents the Segment extras' 404 and every path parameter's 400", () => {
    for (const [method, path] of [
      ['get', '/v1/projects/{key}/settings'],
      ['get', '/sourceConfig'],
      ['get', '/analytics-next/bundles/{file}'],
      ['get', '/analytics.js/v1/{key}/analytics.min.js'],
    ] as const) {
      const responses = doc.paths[path]?.[method]?.responses ?? {};
      assert.ok(responses['404'], `${method} ${path} documents no 404`);
      assert.ok(responses['200'], `${method} ${path} documents no 200`);
    }
    const without = operations()
      .filter(([, path, operation]) => path.includes('{') && operation.responses?.['400'] === undefined)
      .map(([method, path]) => `${method.toUpperCase()} ${path}`);
    assert.deepEqual(without, [], 'operations with a path parameter but no documented 400');
  });

  it('an over-long path parameter is answered 400 problem+json, a documented answer of every such operation', async () => {
    const checked: string[] = [];
    for (const [method, path, operation] of operations()) {
      if (!path.includes('{')) continue;
      // 65 is over the admin ids' maxLength (64), 300 over the router's limit for any parameter.
      for (const length of [65, 300]) {
        const url = path.replace(/\{[^}]+\}/g, 'x'.repeat(length));
        const res = await ctx.app.inject({ method: method.toUpperCase() as 'GET', url, headers: adminHeaders() });
        const where = `${method.toUpperCase()} ${path} with ${length} characters`;
        assert.ok(operation.responses[String(res.statusCode)], `${where}: an undocumented ${res.statusCode}`);
        if (length === 300) assert.equal(res.statusCode, 400, where);
        if (res.statusCode >= 400) problemOf(res);
      }
      checked.push(path);
    }
    assert.ok(checked.length > 30, `only ${checked.length} operations with a path parameter`);
  });

  it('the response schemas still serialise: success bodies by their schema, problem bodies whole', async () => {
    // The same compiler and shapes as the app: a success schema next to problem+json answers.
    const app = Fastify({ schemaController: { compilersFactory: { buildSerializer: cachedSerializerFactory } } });
    app.addSchema(ProblemSchema);
    const schema = {
      response: {
        200: { type: 'object', properties: { data: { type: 'string' } } },
        400: problemResponse('Invalid'),
      },
    };
    app.get('/ok', { schema }, async () => ({ data: 'kept', secret: 'dropped by the 200 schema' }));
    app.get('/problem', { schema }, async (_request, reply) =>
      reply
        .code(400)
        .type(PROBLEM_MEDIA_TYPE)
        .send({ type: 'urn:x', title: 't', status: 400, detail: 'd', code: 'validation_error', extra: [1] }),
    );
    try {
      const ok = await app.inject({ method: 'GET', url: '/ok' });
      assert.equal(ok.body, '{"data":"kept"}');
      const problem = await app.inject({ method: 'GET', url: '/problem' });
      assert.equal(problem.statusCode, 400);
      assert.match(String(problem.headers['content-type']), /^application\/problem\+json/);
      assert.deepEqual(problem.json(), {
        type: 'urn:x',
        title: 't',
        status: 400,
        detail: 'd',
        code: 'validation_error',
        extra: [1],
      });
    } finally {
      await app.close();
    }
    // And in the app: a validation problem keeps its field errors.
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/admin/v1/products',
      headers: adminHeaders(),
      payload: { name: 7 },
    });
    assert.equal(res.statusCode, 400);
    assert.ok((problemOf(res).errors ?? []).length > 0, res.body);
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
