// POST /api/v1/events (contract §4): the closed list of five canonical types, required fields,
// split response fields, metadata stored as properties, idempotency, never a deprecation header.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const ALLOWED = ['user_signed_up', 'user_active', 'session_start', 'session_end', 'user_deleted'];

let ctx: TestContext;
let product: { id: string; eventsKey: string; reportsKey: string };

before(async () => {
  ctx = await createTestApp({ legacyFlat: 'accept' });
  product = await ctx.product('v1');
});
after(async () => ctx.close());

const valid = {
  event_type: 'user_signed_up',
  subject_type: 'user',
  subject_id: 'u_1',
  occurred_at: '2026-03-01T12:00:00Z',
};

function post(payload: unknown) {
  return ctx.app.inject({
    method: 'POST',
    url: '/api/v1/events',
    headers: bearer(product.eventsKey),
    payload: payload as object,
  });
}

describe('POST /api/v1/events: happy paths', () => {
  for (const flat of ALLOWED) {
    it(`${flat}: 201, split fields, canonical_name the flat value, no deprecation headers`, async () => {
      const res = await post({ ...valid, event_type: flat });
      assert.equal(res.statusCode, 201, res.body);
      const { data } = res.json();
      const at = flat.indexOf('_');
      assert.equal(data.event_type, flat.slice(0, at));
      assert.equal(data.action, flat.slice(at + 1));
      assert.equal(data.canonical_name, flat);
      assert.equal(res.headers['deprecation'], undefined);
      assert.equal(res.headers['sunset'], undefined);
    });
  }

  it('answers the full record: UUIDv7, UTC ms timestamps, source api, metadata stored as properties', async () => {
    const res = await post({
      ...valid,
      occurred_at: '2026-03-01T07:00:00.25-05:00',
      metadata: { plan: 'pro' },
      external_id: 'v1-full',
    });
    assert.equal(res.statusCode, 201, res.body);
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
    assert.equal(data.occurred_at, '2026-03-01T12:00:00.250Z');
    assert.match(data.received_at, UTC_MS);
    assert.equal(data.source, 'api');
    assert.equal(data.subject_type, 'user');
    assert.equal(data.subject_id, 'u_1');
    assert.equal(data.external_id, 'v1-full');
    assert.deepEqual(data.properties, { plan: 'pro' });
    const stored = await ctx.services.storage.events.get(product.id, data.uuid);
    assert.deepEqual(stored?.properties, { plan: 'pro' });
    assert.equal(stored?.canonicalName, 'user_signed_up');
  });

  it('properties default to {} and external_id to null', async () => {
    const res = await post(valid);
    assert.equal(res.statusCode, 201);
    assert.deepEqual(res.json().data.properties, {});
    assert.equal(res.json().data.external_id, null);
  });

  it('a retry with the same external_id → 200, Idempotent-Replayed: true, the original record unchanged', async () => {
    const first = await post({ ...valid, external_id: 'v1-idem', metadata: { n: 1 } });
    const retry = await post({
      ...valid,
      event_type: 'user_deleted',
      subject_id: 'other',
      external_id: 'v1-idem',
      metadata: { n: 2 },
    });
    assert.equal(first.statusCode, 201);
    assert.equal(retry.statusCode, 200);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(retry.json().data, first.json().data);
    assert.equal(retry.headers['deprecation'], undefined);
  });
});

describe('POST /api/v1/events: errors', () => {
  for (const eventType of ['project_created', 'user_signed_in', 'signup', 'user.signed_up', 'User_Signed_Up']) {
    it(`"${eventType}" → 400 validation_error naming the allowed list`, async () => {
      const res = await post({ ...valid, event_type: eventType });
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(problem.errors?.some((e) => e.pointer === '/event_type'));
      for (const allowed of ALLOWED) assert.match(problem.detail, new RegExp(allowed));
    });
  }

  const cases: Array<{ why: string; body: Record<string, unknown>; pointer: string }> = [
    { why: 'missing event_type', body: { ...valid, event_type: undefined }, pointer: '/event_type' },
    { why: 'missing subject_type', body: { ...valid, subject_type: undefined }, pointer: '/subject_type' },
    { why: 'missing subject_id', body: { ...valid, subject_id: undefined }, pointer: '/subject_id' },
    {
      why: 'missing occurred_at (required on v1)',
      body: { ...valid, occurred_at: undefined },
      pointer: '/occurred_at',
    },
    { why: 'subject_type outside the enum', body: { ...valid, subject_type: 'team' }, pointer: '/subject_type' },
    { why: 'subject_id over 255 characters', body: { ...valid, subject_id: 'x'.repeat(256) }, pointer: '/subject_id' },
    { why: 'empty subject_id', body: { ...valid, subject_id: '' }, pointer: '/subject_id' },
    {
      why: 'external_id over 255 characters',
      body: { ...valid, external_id: 'x'.repeat(256) },
      pointer: '/external_id',
    },
    {
      why: 'occurred_at without offset',
      body: { ...valid, occurred_at: '2026-03-01T12:00:00' },
      pointer: '/occurred_at',
    },
    {
      why: 'impossible date 2026-02-30',
      body: { ...valid, occurred_at: '2026-02-30T12:00:00Z' },
      pointer: '/occurred_at',
    },
    { why: 'metadata not an object', body: { ...valid, metadata: 'x' }, pointer: '/metadata' },
    { why: 'properties (unknown on v1)', body: { ...valid, properties: {} }, pointer: '/properties' },
    { why: 'v2 field action (unknown on v1)', body: { ...valid, action: 'signed_up' }, pointer: '/action' },
    {
      why: 'unknown field (typo ocurred_at)',
      body: { ...valid, ocurred_at: '2026-03-01T12:00:00Z' },
      pointer: '/ocurred_at',
    },
    {
      why: 'U+0000 in subject_id (not storable on PostgreSQL)',
      body: { ...valid, subject_id: 'a\u0000' },
      pointer: '/subject_id',
    },
    { why: 'U+0000 in a metadata value', body: { ...valid, metadata: { a: '\u0000' } }, pointer: '/metadata/a' },
  ];
  for (const c of cases) {
    it(`400 validation_error for ${c.why}`, async () => {
      const body = Object.fromEntries(Object.entries(c.body).filter(([, v]) => v !== undefined));
      const res = await post(body);
      assert.equal(res.statusCode, 400, res.body);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(
        problem.errors?.some((e) => e.pointer === c.pointer),
        `expected ${c.pointer} in ${res.body}`,
      );
    });
  }
});
