// POST /api/v2/events (contract §4, §5): record shape, naming formats, field rules, idempotency,
// deprecation headers of the legacy flat form and the operator's switch to refuse it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

let ctx: TestContext;
let product: { id: string; eventsKey: string; reportsKey: string };

before(async () => {
  ctx = await createTestApp();
  product = await ctx.product('v2');
});
after(async () => ctx.close());

function post(payload: unknown, key = product.eventsKey) {
  return ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(key), payload: payload as object });
}

const base = { subject_type: 'user', subject_id: 'u_1' };

describe('POST /api/v2/events: happy paths', () => {
  it('stores a preferred-format event and answers 201 with the full record', async () => {
    const before = Date.now();
    const res = await post({
      ...base,
      event_type: 'project',
      action: 'created',
      occurred_at: '2026-03-01T13:00:00.5+01:00',
      properties: { plan: 'pro', n: 3 },
      external_id: 'v2-happy-1',
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.match(String(res.headers['content-type']), /^application\/json/);
    const { data } = res.json();
    assert.deepEqual(Object.keys(data).sort(), [
      'action',
      'canonical_name',
      'event_type',
      'external_id',
      'key_id',
      'occurred_at',
      'properties',
      'received_at',
      'source',
      'subject_id',
      'subject_type',
      'uuid',
    ]);
    assert.match(data.uuid, UUID_V7);
    // The UUIDv7 timestamp is the time the service assigned it.
    const uuidMillis = parseInt(data.uuid.replace(/-/g, '').slice(0, 12), 16);
    assert.ok(uuidMillis >= before - 5 && uuidMillis <= Date.now() + 5, `uuid time ${uuidMillis}`);
    assert.equal(data.event_type, 'project');
    assert.equal(data.action, 'created');
    assert.equal(data.canonical_name, 'project_created');
    assert.equal(data.source, 'api');
    assert.equal(data.subject_type, 'user');
    assert.equal(data.subject_id, 'u_1');
    assert.equal(data.occurred_at, '2026-03-01T12:00:00.500Z');
    assert.match(data.received_at, UTC_MS);
    assert.ok(Date.parse(data.received_at) >= before - 1000 && Date.parse(data.received_at) <= Date.now() + 1000);
    assert.equal(data.external_id, 'v2-happy-1');
    assert.deepEqual(data.properties, { plan: 'pro', n: 3 });
    assert.equal(res.headers['deprecation'], undefined);
    assert.equal(res.headers['sunset'], undefined);
    assert.equal(res.headers['idempotent-replayed'], undefined);

    const stored = await ctx.services.storage.events.get(product.id, data.uuid);
    assert.ok(stored);
    assert.equal(stored.canonicalName, 'project_created');
    assert.deepEqual(stored.properties, { plan: 'pro', n: 3 });
    assert.equal(stored.occurredAt, '2026-03-01T12:00:00.500Z');
  });

  it('defaults occurred_at to the receive time, properties to {} and external_id to null', async () => {
    const res = await post({ ...base, event_type: 'project', action: 'archived' });
    assert.equal(res.statusCode, 201, res.body);
    const { data } = res.json();
    assert.equal(data.occurred_at, data.received_at);
    assert.match(data.occurred_at, UTC_MS);
    assert.deepEqual(data.properties, {});
    assert.equal(data.external_id, null);
  });

  it('two events without external_id are two events', async () => {
    const first = await post({ ...base, event_type: 'page', action: 'viewed' });
    const second = await post({ ...base, event_type: 'page', action: 'viewed' });
    assert.equal(first.statusCode, 201);
    assert.equal(second.statusCode, 201);
    assert.notEqual(first.json().data.uuid, second.json().data.uuid);
  });

  it('uuids of successive events sort in creation order', async () => {
    const uuids: string[] = [];
    for (let i = 0; i < 5; i++)
      uuids.push((await post({ ...base, event_type: 'order', action: 'placed' })).json().data.uuid);
    assert.deepEqual([...uuids].sort(), uuids);
  });

  for (const [event, eventType, action] of [
    ['billing.invoice_paid', 'billing', 'invoice_paid'],
    ['project:created', 'project', 'created'],
    ['user_signed_up', 'user', 'signed_up'],
  ] as const) {
    it(`unified "${event}" → ${eventType} / ${action}, no deprecation headers`, async () => {
      const res = await post({ ...base, event });
      assert.equal(res.statusCode, 201, res.body);
      const { data } = res.json();
      assert.equal(data.event_type, eventType);
      assert.equal(data.action, action);
      assert.equal(data.canonical_name, `${eventType}_${action}`);
      assert.equal(res.headers['deprecation'], undefined);
      assert.equal(res.headers['sunset'], undefined);
    });
  }

  it('metadata is an alias of properties', async () => {
    const res = await post({ ...base, event_type: 'project', action: 'renamed', metadata: { from: 'a', to: 'b' } });
    assert.equal(res.statusCode, 201, res.body);
    assert.deepEqual(res.json().data.properties, { from: 'a', to: 'b' });
    const stored = await ctx.services.storage.events.get(product.id, res.json().data.uuid);
    assert.deepEqual(stored?.properties, { from: 'a', to: 'b' });
  });

  it('nested properties round-trip unchanged', async () => {
    const properties = { nested: { list: [1, 'two', null, { three: true }] }, unicode: 'žluťoučký 🐎', empty: {} };
    const res = await post({ ...base, event_type: 'doc', action: 'saved', properties });
    assert.equal(res.statusCode, 201);
    assert.deepEqual(res.json().data.properties, properties);
    const stored = await ctx.services.storage.events.get(product.id, res.json().data.uuid);
    assert.deepEqual(stored?.properties, properties);
  });

  for (const subjectType of ['user', 'account', 'subscription']) {
    it(`accepts subject_type "${subjectType}"`, async () => {
      const res = await post({ subject_type: subjectType, subject_id: 's', event_type: 'x', action: 'y' });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(res.json().data.subject_type, subjectType);
    });
  }

  it('counts characters, not UTF-16 units: 255 emoji are 255 characters; 256 are too many', async () => {
    const horse = '🐎';
    const ok = await post({
      ...base,
      subject_id: horse.repeat(255),
      external_id: horse.repeat(255),
      event_type: 'x',
      action: 'y',
    });
    assert.equal(ok.statusCode, 201, ok.body);
    assert.equal(ok.json().data.subject_id, horse.repeat(255));
    const stored = await ctx.services.storage.events.get(product.id, ok.json().data.uuid);
    assert.equal(stored?.subjectId, horse.repeat(255));
    const tooLong = await post({ ...base, subject_id: horse.repeat(256), event_type: 'x', action: 'y' });
    assert.equal(tooLong.statusCode, 400);
    assert.ok(problemOf(tooLong).errors?.some((e) => e.pointer === '/subject_id'));
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(product.eventsKey),
      payload: {
        events: [
          { ...base, subject_id: horse.repeat(255), event_type: 'x', action: 'y' },
          { ...base, subject_id: horse.repeat(256), event_type: 'x', action: 'y' },
        ],
      },
    });
    assert.deepEqual(
      batch.json().data.map((d: { status: string }) => d.status),
      ['created', 'rejected'],
    );
  });

  it('accepts subject_id and external_id of exactly 255 characters', async () => {
    const res = await post({
      ...base,
      subject_id: 's'.repeat(255),
      external_id: 'e'.repeat(255),
      event_type: 'x',
      action: 'y',
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().data.subject_id.length, 255);
  });
});

describe('POST /api/v2/events: validation errors', () => {
  const cases: Array<{ why: string; body: Record<string, unknown>; pointer: string }> = [
    { why: 'missing subject_type', body: { subject_id: 'u', event_type: 'a', action: 'b' }, pointer: '/subject_type' },
    { why: 'missing subject_id', body: { subject_type: 'user', event_type: 'a', action: 'b' }, pointer: '/subject_id' },
    {
      why: 'subject_type outside the enum',
      body: { ...base, subject_type: 'team', event_type: 'a', action: 'b' },
      pointer: '/subject_type',
    },
    {
      why: 'empty subject_id',
      body: { ...base, subject_id: '', event_type: 'a', action: 'b' },
      pointer: '/subject_id',
    },
    {
      why: 'subject_id over 255 characters',
      body: { ...base, subject_id: 's'.repeat(256), event_type: 'a', action: 'b' },
      pointer: '/subject_id',
    },
    {
      why: 'subject_id not a string',
      body: { ...base, subject_id: 42, event_type: 'a', action: 'b' },
      pointer: '/subject_id',
    },
    {
      why: 'empty external_id',
      body: { ...base, external_id: '', event_type: 'a', action: 'b' },
      pointer: '/external_id',
    },
    {
      why: 'external_id over 255 characters',
      body: { ...base, external_id: 'e'.repeat(256), event_type: 'a', action: 'b' },
      pointer: '/external_id',
    },
    {
      why: 'external_id a number',
      body: { ...base, external_id: 7, event_type: 'a', action: 'b' },
      pointer: '/external_id',
    },
    {
      why: 'occurred_at without offset',
      body: { ...base, occurred_at: '2026-03-01T12:00:00', event_type: 'a', action: 'b' },
      pointer: '/occurred_at',
    },
    {
      why: 'impossible date 2026-02-30',
      body: { ...base, occurred_at: '2026-02-30T12:00:00Z', event_type: 'a', action: 'b' },
      pointer: '/occurred_at',
    },
    {
      why: 'occurred_at a number',
      body: { ...base, occurred_at: 1772366400, event_type: 'a', action: 'b' },
      pointer: '/occurred_at',
    },
    {
      why: 'properties an array',
      body: { ...base, properties: [1], event_type: 'a', action: 'b' },
      pointer: '/properties',
    },
    {
      why: 'properties a string',
      body: { ...base, properties: 'x', event_type: 'a', action: 'b' },
      pointer: '/properties',
    },
    { why: 'metadata null', body: { ...base, metadata: null, event_type: 'a', action: 'b' }, pointer: '/metadata' },
    {
      why: 'both properties and metadata',
      body: { ...base, properties: {}, metadata: {}, event_type: 'a', action: 'b' },
      pointer: '/metadata',
    },
    {
      why: 'unknown field (typo ocurred_at)',
      body: { ...base, ocurred_at: '2026-03-01T12:00:00Z', event_type: 'a', action: 'b' },
      pointer: '/ocurred_at',
    },
    {
      why: 'event_type breaking the pattern',
      body: { ...base, event_type: 'Project', action: 'created' },
      pointer: '/event_type',
    },
    {
      why: 'action breaking the pattern',
      body: { ...base, event_type: 'project', action: 'was-created' },
      pointer: '/action',
    },
    {
      why: 'event_type over 64 characters',
      body: { ...base, event_type: 'a'.repeat(65), action: 'b' },
      pointer: '/event_type',
    },
    {
      why: 'action over 64 characters',
      body: { ...base, event_type: 'a', action: 'b'.repeat(65) },
      pointer: '/action',
    },
    { why: 'unified project_board.created', body: { ...base, event: 'project_board.created' }, pointer: '/event' },
    { why: 'unified without separator', body: { ...base, event: 'signup' }, pointer: '/event' },
    {
      why: 'event together with event_type',
      body: { ...base, event: 'project.created', event_type: 'project' },
      pointer: '/event',
    },
    {
      why: 'event together with action',
      body: { ...base, event: 'project.created', action: 'created' },
      pointer: '/event',
    },
    { why: 'action without event_type', body: { ...base, action: 'created' }, pointer: '/event_type' },
    { why: 'no name at all', body: { ...base }, pointer: '/event_type' },
    { why: 'legacy flat without underscore', body: { ...base, event_type: 'signup' }, pointer: '/action' },
  ];
  for (const c of cases) {
    it(`400 validation_error for ${c.why}, pointing at ${c.pointer}`, async () => {
      const countBefore = await ctx.services.storage.events.count(product.id);
      const res = await post(c.body);
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(problem.errors && problem.errors.length > 0, res.body);
      assert.ok(
        problem.errors.some((e) => e.pointer === c.pointer),
        `expected pointer ${c.pointer} in ${res.body}`,
      );
      assert.equal(await ctx.services.storage.events.count(product.id), countBefore, 'nothing stored');
    });
  }

  it('names the unknown field in the detail', async () => {
    const res = await post({ ...base, event_type: 'a', action: 'b', ocurred_at: '2026-03-01T12:00:00Z' });
    assert.match(problemOf(res).detail, /ocurred_at/);
  });

  it('a body that is not an object → 400', async () => {
    for (const payload of ['[]', '"x"', '42', 'null']) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: { ...bearer(product.eventsKey), 'content-type': 'application/json' },
        payload,
      });
      assert.equal(res.statusCode, 400, `${payload}: ${res.body}`);
      assert.ok(['validation_error', 'invalid_json'].includes(problemOf(res).code));
    }
  });
});

describe('POST /api/v2/events: idempotency', () => {
  it('a retry answers 200 with Idempotent-Replayed: true and the original record, even with different content', async () => {
    const first = await post({
      ...base,
      event_type: 'invoice',
      action: 'paid',
      external_id: 'idem-1',
      occurred_at: '2026-03-01T12:00:00Z',
      properties: { amount: 10 },
    });
    assert.equal(first.statusCode, 201);
    const retry = await post({
      subject_type: 'account',
      subject_id: 'other',
      event: 'invoice.refunded',
      external_id: 'idem-1',
      occurred_at: '2026-04-01T12:00:00Z',
      properties: { amount: 99 },
    });
    assert.equal(retry.statusCode, 200, retry.body);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(retry.json().data, first.json().data);
    // The stored event is the first one, unchanged.
    const stored = await ctx.services.storage.events.get(product.id, first.json().data.uuid);
    assert.equal(stored?.action, 'paid');
    assert.deepEqual(stored?.properties, { amount: 10 });
  });

  it('first write wins for every later retry', async () => {
    const first = await post({ ...base, event_type: 'a', action: 'b', external_id: 'idem-many' });
    for (let i = 0; i < 3; i++) {
      const retry = await post({ ...base, event_type: 'a', action: 'c', external_id: 'idem-many' });
      assert.equal(retry.statusCode, 200);
      assert.equal(retry.json().data.uuid, first.json().data.uuid);
    }
  });

  it('a legacy retry of a preferred event is a duplicate too (same product, same source)', async () => {
    const first = await post({ ...base, event_type: 'user', action: 'signed_up', external_id: 'idem-cross-format' });
    const retry = await post({ ...base, event_type: 'user_signed_up', external_id: 'idem-cross-format' });
    assert.equal(first.statusCode, 201);
    assert.equal(retry.statusCode, 200);
    assert.equal(retry.json().data.uuid, first.json().data.uuid);
  });

  it('v1 and v2 share the idempotency scope, in both directions', async () => {
    const v1 = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(product.eventsKey),
      payload: {
        event_type: 'user_active',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-03-01T12:00:00Z',
        external_id: 'shared-1',
      },
    });
    assert.equal(v1.statusCode, 201, v1.body);
    const v2 = await post({ ...base, event_type: 'x', action: 'y', external_id: 'shared-1' });
    assert.equal(v2.statusCode, 200);
    assert.equal(v2.headers['idempotent-replayed'], 'true');
    assert.deepEqual(v2.json().data, v1.json().data);

    const v2first = await post({ ...base, event_type: 'x', action: 'y', external_id: 'shared-2' });
    const v1retry = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(product.eventsKey),
      payload: {
        event_type: 'user_active',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-03-01T12:00:00Z',
        external_id: 'shared-2',
      },
    });
    assert.equal(v1retry.statusCode, 200);
    assert.equal(v1retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(v1retry.json().data, v2first.json().data);
  });

  it('the scope is per product: the same external_id in two products stores two events', async () => {
    const other = await ctx.product('v2-other');
    const a = await post({ ...base, event_type: 'a', action: 'b', external_id: 'per-product' });
    const b = await post({ ...base, event_type: 'a', action: 'b', external_id: 'per-product' }, other.eventsKey);
    assert.equal(a.statusCode, 201);
    assert.equal(b.statusCode, 201);
    assert.notEqual(a.json().data.uuid, b.json().data.uuid);
    assert.equal(
      await ctx.services.storage.events.get(other.id, a.json().data.uuid),
      undefined,
      'product B cannot see A’s event',
    );
    assert.equal(await ctx.services.storage.events.count(other.id), 1);
  });

  it('50 concurrent requests with one external_id: exactly one 201, 49 replays of the same event, one row', async () => {
    const p = await ctx.product('v2-concurrent');
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        post({ ...base, event_type: 'race', action: 'run', external_id: 'race-1', properties: { i } }, p.eventsKey),
      ),
    );
    const created = responses.filter((r) => r.statusCode === 201);
    const replayed = responses.filter((r) => r.statusCode === 200);
    assert.equal(created.length, 1, responses.map((r) => r.statusCode).join(','));
    assert.equal(replayed.length, 49);
    const uuid = created[0]!.json().data.uuid;
    for (const r of replayed) {
      assert.equal(r.headers['idempotent-replayed'], 'true');
      assert.deepEqual(r.json().data, created[0]!.json().data);
    }
    assert.equal(await ctx.services.storage.events.count(p.id), 1);
    assert.ok(await ctx.services.storage.events.get(p.id, uuid));
  });

  it('concurrent requests with distinct external_ids all store', async () => {
    const p = await ctx.product('v2-concurrent-distinct');
    const responses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post({ ...base, event_type: 'race', action: 'run', external_id: `d-${i}` }, p.eventsKey),
      ),
    );
    assert.ok(responses.every((r) => r.statusCode === 201));
    assert.equal(new Set(responses.map((r) => r.json().data.uuid)).size, 40);
    assert.equal(await ctx.services.storage.events.count(p.id), 40);
  });
});

describe('POST /api/v2/events: legacy flat format', () => {
  it('is accepted with exactly Deprecation: true and Sunset: 2026-09-01', async () => {
    const res = await post({ ...base, event_type: 'billing_invoice_paid' });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.headers['deprecation'], 'true');
    assert.equal(res.headers['sunset'], '2026-09-01');
    const { data } = res.json();
    assert.equal(data.event_type, 'billing');
    assert.equal(data.action, 'invoice_paid');
    assert.equal(data.canonical_name, 'billing_invoice_paid');
  });

  it('a legacy duplicate also carries the deprecation headers', async () => {
    await post({ ...base, event_type: 'user_signed_up', external_id: 'legacy-dup' });
    const retry = await post({ ...base, event_type: 'user_signed_up', external_id: 'legacy-dup' });
    assert.equal(retry.statusCode, 200);
    assert.equal(retry.headers['deprecation'], 'true');
    assert.equal(retry.headers['sunset'], '2026-09-01');
  });

  it('legacy usage is visible per key: count, names, last seen', async () => {
    const p = await ctx.product('v2-legacy-usage');
    const started = new Date().toISOString();
    for (let i = 0; i < 3; i++) await post({ ...base, event_type: 'user_signed_up' }, p.eventsKey);
    await post({ ...base, event_type: 'team_created' }, p.eventsKey);
    await post({ ...base, event_type: 'team', action: 'created' }, p.eventsKey); // not legacy
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/legacy_usage`,
      headers: adminHeaders(),
    });
    assert.equal(res.statusCode, 200, res.body);
    const rows = res.json().data as Array<{
      key_id: string;
      key_prefix: string;
      event_name: string;
      count: number;
      last_seen_at: string;
      first_seen_at: string;
    }>;
    const byName = Object.fromEntries(rows.map((r) => [r.event_name, r]));
    assert.deepEqual(Object.keys(byName).sort(), ['team_created', 'user_signed_up']);
    assert.equal(byName.user_signed_up!.count, 3);
    assert.equal(byName.team_created!.count, 1);
    assert.ok(p.eventsKey.startsWith(byName.user_signed_up!.key_prefix));
    assert.ok(byName.user_signed_up!.last_seen_at >= started);
    assert.ok(byName.user_signed_up!.first_seen_at <= byName.user_signed_up!.last_seen_at);

    // Another product does not see this usage.
    const other = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${product.id}/legacy_usage`,
      headers: adminHeaders(),
    });
    assert.ok(
      (other.json().data as Array<{ key_id: string }>).every((r) => r.key_id !== byName.user_signed_up!.key_id),
    );
  });
});

describe('POST /api/v2/events: INLET_LEGACY_FLAT=reject', () => {
  let strict: TestContext;
  let p: { id: string; eventsKey: string };
  before(async () => {
    strict = await createTestApp({ legacyFlat: 'reject' });
    p = await strict.product('strict');
  });
  after(async () => strict.close());

  it('legacy flat input → 410 legacy_format_removed whose detail shows the preferred form; nothing stored', async () => {
    const res = await strict.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: { ...base, event_type: 'billing_invoice_paid' },
    });
    assert.equal(res.statusCode, 410, res.body);
    const problem = problemOf(res);
    assert.equal(problem.code, 'legacy_format_removed');
    assert.match(problem.detail, /"event_type":\s*"billing"/);
    assert.match(problem.detail, /"action":\s*"invoice_paid"/);
    assert.equal(await strict.services.storage.events.count(p.id), 0);
  });

  it('refused legacy requests are still counted', async () => {
    const res = await strict.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/legacy_usage`,
      headers: adminHeaders(),
    });
    const rows = res.json().data as Array<{ event_name: string; count: number }>;
    assert.equal(rows.find((r) => r.event_name === 'billing_invoice_paid')?.count, 1);
  });

  it('preferred, unified and v1 are unaffected', async () => {
    const preferred = await strict.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: { ...base, event_type: 'billing', action: 'invoice_paid' },
    });
    const unified = await strict.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: { ...base, event: 'billing_invoice_paid' },
    });
    const v1 = await strict.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(p.eventsKey),
      payload: {
        event_type: 'user_signed_up',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-03-01T12:00:00Z',
      },
    });
    assert.equal(preferred.statusCode, 201);
    assert.equal(unified.statusCode, 201);
    assert.equal(v1.statusCode, 201);
  });
});

describe('POST /api/v2/events: values every backend can store', () => {
  // PostgreSQL cannot store U+0000 in text or JSONB while SQLite can: the API refuses it on both,
  // with a pointer to the value, instead of a 500 on one backend only.
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['subject_id', { subject_id: 'a\u0000b' }, '/subject_id'],
    ['external_id', { external_id: 'e\u0000' }, '/external_id'],
    ['a property value', { properties: { note: 'x\u0000y' } }, '/properties/note'],
    ['a nested property value', { properties: { list: [{ deep: '\u0000' }] } }, '/properties/list/0/deep'],
    ['a property name', { properties: { 'bad\u0000key': 1 } }, '/properties/bad\u0000key'],
    ['a metadata value', { metadata: { note: '\u0000' } }, '/metadata/note'],
  ];
  for (const [where, extra, pointer] of cases) {
    it(`U+0000 in ${where} → 400 validation_error at ${JSON.stringify(pointer)}`, async () => {
      const res = await post({ ...base, event_type: 'nul', action: 'sent', ...extra });
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(
        problem.errors?.some((e) => e.pointer === pointer),
        res.body,
      );
    });
  }

  it('a number out of the double range → 400 rather than being stored as null', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { ...bearer(product.eventsKey), 'content-type': 'application/json' },
      payload:
        '{"subject_type":"user","subject_id":"u","event_type":"big","action":"number","properties":{"n":1e400,"ok":1e300}}',
    });
    assert.equal(res.statusCode, 400, res.body);
    assert.deepEqual(
      problemOf(res).errors?.map((e) => e.pointer),
      ['/properties/n'],
    );
  });

  it('nesting: 60 levels are stored; deeper properties → 400 (never a 500 from stack exhaustion)', async () => {
    const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const send = (depth: number) =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: { ...bearer(product.eventsKey), 'content-type': 'application/json' },
        payload: `{"subject_type":"user","subject_id":"u","event_type":"deep","action":"nest","properties":{"d":${nested(depth)}}}`,
      });
    const ok = await send(60);
    assert.equal(ok.statusCode, 201, ok.body.slice(0, 200));
    for (const depth of [200, 5000, 15000]) {
      const res = await send(depth);
      assert.equal(res.statusCode, 400, `${depth}: ${res.body.slice(0, 200)}`);
      assert.equal(problemOf(res).code, 'validation_error');
    }
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: { ...bearer(product.eventsKey), 'content-type': 'application/json' },
      payload: `{"events":[{"subject_type":"user","subject_id":"u","event_type":"a","action":"b"},{"subject_type":"user","subject_id":"u","event_type":"a","action":"b","properties":{"d":${nested(200)}}},{"subject_type":"user","subject_id":"u","event_type":"a","action":"b","properties":{"d":${nested(8000)}}}]}`,
    });
    assert.equal(batch.statusCode, 207, batch.body.slice(0, 300));
    assert.deepEqual(
      batch.json().data.map((d: { status: string }) => d.status),
      ['created', 'rejected', 'rejected'],
    );
  });

  it('a refused value does not fail concurrent requests that share its commit', async () => {
    const p = await ctx.product('v2-nul-concurrent');
    const responses = await Promise.all([
      post({ ...base, event_type: 'ok', action: 'one' }, p.eventsKey),
      post({ ...base, event_type: 'bad', action: 'one', properties: { x: '\u0000' } }, p.eventsKey),
      post({ ...base, event_type: 'ok', action: 'two' }, p.eventsKey),
    ]);
    assert.deepEqual(
      responses.map((r) => r.statusCode),
      [201, 400, 201],
    );
    assert.equal(await ctx.services.storage.events.count(p.id), 2);
  });

  it('other unusual but valid values round-trip unchanged through storage (read back via a replay)', async () => {
    const values = [
      { occurred_at: '0050-06-01T00:00:00Z', properties: { big: 12345678901234, neg: -0.5, t: true, n: null } },
      { occurred_at: '9999-12-31T23:59:59.999Z', properties: { emoji: '🐎', rtl: 'שלום', quote: '"\\\'' } },
      { occurred_at: '1969-12-31T23:59:59.999Z', properties: { 'a.b': 1, 'c/d': 2, '': 3 } },
    ];
    for (const [i, extra] of values.entries()) {
      const first = await post({
        ...base,
        event_type: 'round',
        action: 'trip',
        external_id: `round-trip-${i}`,
        ...extra,
      });
      assert.equal(first.statusCode, 201, first.body);
      const replay = await post({ ...base, event_type: 'round', action: 'trip', external_id: `round-trip-${i}` });
      assert.equal(replay.statusCode, 200);
      assert.deepEqual(replay.json().data, first.json().data);
    }
  });
});
