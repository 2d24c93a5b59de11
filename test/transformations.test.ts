// Transformations through the HTTP API (transformations.md): versions (PUT, GET, versions, 400 with pointers,
// nothing stored on a failure, product isolation), each declarative step kind on native single (v1, v2), batch
// and Segment routes and on identify traits, the outcomes of §5 (dropped answers, transformation_error 422 and
// per element, warnings, records after masking) and its metrics through /metrics, idempotency, the test endpoint,
// and masking leaving no trace in reads, rejections or the database itself.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { maskHash, REDACTED } from '../src/domain/transform-engine.js';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { assertNoTrace, transformedProduct } from './support/transformations.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers, read field by field
type Row = Record<string, any>;

let ctx: TestContext;
before(async () => {
  // An erasure answers once every instance has its suppressions (INLET_SUPPRESSION_REFRESH_MS): short here.
  ctx = await createTestApp({ suppressionRefreshMs: 100 });
});
after(async () => ctx.close());

const newProduct = (name: string) => transformedProduct(ctx, name);

let seq = 0;
const v2 = (key: string, body: Record<string, unknown>) =>
  ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events',
    headers: bearer(key),
    payload: { event: 'order.completed', subject_type: 'user', subject_id: 'u1', external_id: `t-${++seq}`, ...body },
  });

describe('transformation versions', () => {
  it('PUT stores a new version each time with defaults filled in; GET the current; versions newest first', async () => {
    const p = await newProduct('tf-versions');
    assert.deepEqual((await p.admin('GET', '/transformation')).json(), { data: null });
    const first = await p.put([{ kind: 'sample', rate: 0.5 }]);
    assert.equal(first.version, 1);
    assert.deepEqual(first.steps, [{ kind: 'sample', rate: 0.5, by: 'message_id', on_error: 'reject' }]);
    assert.match(first.created_at, /^\d{4}-/);
    const second = await p.put([{ kind: 'drop', where: { '==': [{ var: 'properties.test' }, true] } }]);
    assert.equal(second.version, 2);
    assert.equal((await p.admin('GET', '/transformation')).json().data.version, 2);
    const versions = (await p.admin('GET', '/transformation/versions')).json().data;
    assert.deepEqual(
      versions.map((v: { version: number }) => v.version),
      [2, 1],
    );
    const other = await newProduct('tf-versions-other');
    assert.deepEqual((await other.admin('GET', '/transformation')).json(), { data: null }, 'product isolation');
  });

  it('refuses an invalid step with pointers into the body, and stores nothing', async () => {
    const p = await newProduct('tf-invalid');
    await p.put([{ kind: 'drop' }]);
    const res = await p.admin('PUT', '/transformation', {
      steps: [
        { kind: 'remove', paths: ['properties.a'] },
        { kind: 'remove', paths: ['properties.b', 'external_id'] },
        { kind: 'drop', where: { nope: [1] } },
        { kind: 'geoip' },
      ],
    });
    assert.equal(res.statusCode, 400);
    const problem = problemOf(res);
    assert.equal(problem.code, 'validation_error');
    const pointers = problem.errors!.map((e) => e.pointer);
    assert.deepEqual(pointers, ['/steps/1/paths/1', '/steps/2/where/nope', '/steps/3/kind']);
    assert.match(problem.errors![2]!.message, /INLET_GEOIP_DATABASE/);
    const current = (await p.admin('GET', '/transformation')).json().data;
    assert.equal(current.version, 1, 'nothing half-applied');
    assert.equal((await p.admin('PUT', '/transformation', { steps: 'x' })).statusCode, 400);
  });
});

describe('steps on every entry point', () => {
  it('v2 single: renames, sets, removes, moves and masks what is stored and read', async () => {
    const p = await newProduct('tf-v2');
    await p.put([
      { kind: 'rename_event', to: 'purchase.done', where: { '==': [{ var: 'event' }, 'order_completed'] } },
      { kind: 'set', path: 'properties.meta.version', value: 2 },
      { kind: 'remove', paths: ['properties.debug'] },
      { kind: 'rename_property', from: 'properties.amt', to: 'properties.amount' },
      { kind: 'mask', paths: ['properties.email'], with: 'hash' },
      { kind: 'mask', paths: ['context.ip'], with: 'redact' },
    ]);
    const res = await v2(p.eventsKey, {
      properties: { email: 'ann@example.com', amt: 12, debug: 'x' },
      context: { ip: '192.0.2.7', userAgent: 'curl/8' },
    });
    assert.equal(res.statusCode, 201, res.body);
    const event = res.json().data;
    assert.equal(event.event_type, 'purchase');
    assert.equal(event.action, 'done');
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    assert.deepEqual(event.properties, {
      email: maskHash(secret, 'ann@example.com'),
      amount: 12,
      meta: { version: 2 },
    });
    assert.deepEqual(event.context, { ip: REDACTED, userAgent: 'curl/8' });
    const [read] = await p.events();
    assert.deepEqual(read!.properties, event.properties);
    assert.equal(JSON.stringify(await p.events()).includes('ann@example.com'), false);
  });

  it('v1 single and batch: drop answers, sample, allow_properties, idempotency', async () => {
    const p = await newProduct('tf-batch');
    await p.put([
      { kind: 'drop', where: { '==': [{ var: 'properties.test' }, true] } },
      { kind: 'allow_properties', paths: ['properties.plan'] },
    ]);
    const dropped = await v2(p.eventsKey, { properties: { test: true } });
    assert.equal(dropped.statusCode, 200);
    assert.deepEqual(dropped.json(), { data: null, meta: { dropped: true, step: 0 } });
    const v1 = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(p.eventsKey),
      payload: {
        event_type: 'user_signed_up',
        subject_type: 'user',
        subject_id: 'u9',
        occurred_at: '2026-11-01T00:00:00Z',
        metadata: { plan: 'pro', secret: 's' },
      },
    });
    assert.equal(v1.statusCode, 201, v1.body);
    assert.deepEqual(v1.json().data.properties, { plan: 'pro' });
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: {
        events: [
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', external_id: 'b-1', properties: { plan: 'x', y: 1 } },
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', external_id: 'b-2', properties: { test: true } },
        ],
      },
    });
    assert.equal(batch.statusCode, 200, batch.body);
    const body = batch.json();
    assert.deepEqual(body.meta, { created: 1, duplicates: 0, rejected: 0, dropped: 1 });
    assert.deepEqual(body.data[1], { index: 1, status: 'dropped', step: 0 });
    assert.deepEqual(body.data[0].event.properties, { plan: 'x' });
    // A retry is a duplicate (or dropped again), whatever the steps do.
    const again = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: {
        events: [
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', external_id: 'b-1', properties: { plan: 'x' } },
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', external_id: 'b-2', properties: { test: true } },
        ],
      },
    });
    assert.deepEqual(again.json().meta, { created: 0, duplicates: 1, rejected: 0, dropped: 1 });
    await p.put([{ kind: 'sample', rate: 0.5 }]);
    const answers: string[] = [];
    for (let i = 0; i < 40; i++) {
      const id = `s-${i % 20}`;
      const r = await v2(p.eventsKey, { external_id: id });
      answers.push(`${id}:${r.statusCode === 200 && r.json().data === null ? 'dropped' : 'kept'}`);
    }
    const kept = answers.slice(0, 20).filter((a) => a.endsWith('kept')).length;
    assert.ok(kept > 2 && kept < 18, `sampled ${kept} of 20`);
    assert.deepEqual(answers.slice(20), answers.slice(0, 20), 'the same id always gets the same answer');
  });

  it('a failing step: 422 on a single route, the element error in a batch, recorded after masking', async () => {
    const p = await newProduct('tf-error');
    await p.put([
      { kind: 'mask', paths: ['properties.email'], with: 'redact' },
      { kind: 'set', path: 'properties.email.inner', value: 1 },
    ]);
    const single = await v2(p.eventsKey, { properties: { email: 'bob@example.com' } });
    assert.equal(single.statusCode, 422);
    const problem = problemOf(single);
    assert.equal(problem.code, 'transformation_error');
    assert.equal(problem.step, 1);
    assert.equal(problem.kind, 'set');
    assert.match(problem.detail, /step 1 \(set\)/);
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: {
        events: [
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { email: 'carl@example.com' } },
          { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { other: 1 } },
        ],
      },
    });
    assert.equal(batch.statusCode, 207);
    assert.equal(batch.json().data[0].error.code, 'transformation_error');
    assert.equal(batch.json().data[1].status, 'created', 'the rest of a batch is stored');
    const recorded = await p.rejections();
    assert.equal(recorded.length, 2);
    for (const row of recorded) {
      assert.equal(row.code, 'transformation_error');
      assert.equal(row.item.properties.email, REDACTED);
    }
    assert.equal(JSON.stringify(recorded).includes('example.com'), false);
    await p.put([
      { kind: 'set', path: 'properties.email.inner', value: 1, on_error: 'skip' },
      { kind: 'set', path: 'properties.ok', value: true },
    ]);
    const skipped = await v2(p.eventsKey, { properties: { email: 'x' } });
    assert.equal(skipped.statusCode, 201);
    assert.deepEqual(skipped.json().data.properties, { email: 'x', ok: true });
    const warnings = (await p.rejections()).filter((r) => r.severity === 'warning');
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0]!.code, 'transformation_error');
  });

  it('Segment routes and identify traits: dropped items count as accepted; identifiers come after the steps', async () => {
    const p = await newProduct('tf-segment');
    await p.put([
      { kind: 'drop', where: { '==': [{ var: 'event' }, 'noise_viewed'] } },
      { kind: 'mask', paths: ['traits.email'], with: 'hash', where: { '==': [{ var: 'traits.kind' }, 'hash'] } },
      { kind: 'mask', paths: ['traits.email'], with: 'redact', where: { '!=': [{ var: 'traits.kind' }, 'hash'] } },
      { kind: 'set', path: 'properties.seen', value: true, where: { '==': [{ var: 'type' }, 'track'] } },
    ]);
    const res = await p.segment([
      { type: 'track', event: 'Noise Viewed', userId: 'u1', messageId: 'sg-1' },
      { type: 'track', event: 'Order Completed', userId: 'u1', messageId: 'sg-2', properties: { a: 1 } },
      { type: 'identify', userId: 'u-hash', messageId: 'sg-3', traits: { email: 'dee@example.com', kind: 'hash' } },
      { type: 'identify', userId: 'u-red', messageId: 'sg-4', traits: { email: 'eve@example.com', kind: 'r' } },
    ]);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().accepted, 4);
    const events = await p.events();
    assert.equal(events.length, 3, 'the dropped track is not stored');
    const track = events.find((e) => e.action === 'completed')!;
    assert.deepEqual(track.properties, { a: 1, seen: true });
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    const user = async (id: string) => (await p.admin('GET', `/users/${id}`)).json().data;
    const hashed = await user('u-hash');
    assert.equal(hashed.traits.email, maskHash(secret, 'dee@example.com'));
    assert.equal(hashed.identifiers.email, maskHash(secret, 'dee@example.com'), 'a hashed e-mail is the hash');
    const redacted = await user('u-red');
    assert.equal(redacted.traits.email, REDACTED);
    assert.equal(redacted.identifiers?.email, undefined, 'a redacted e-mail is no identifier');
    assert.equal(JSON.stringify([events, hashed, redacted]).includes('example.com'), false);
  });
});

describe('traits belong to identify and group items (transformations.md §2)', () => {
  it('a write under traits. fails on any other item, which keeps its properties; the test endpoint agrees', async () => {
    const p = await newProduct('tf-traits-shape');
    const steps = [
      { kind: 'set', path: 'traits.source', value: 'web' },
      { kind: 'rename_property', from: 'properties.plan', to: 'traits.plan' },
    ];
    await p.put(steps);
    const single = await v2(p.eventsKey, { properties: { amount: 12 } });
    assert.equal(single.statusCode, 422, single.body);
    const problem = problemOf(single);
    assert.deepEqual([problem.code, problem.step, problem.kind], ['transformation_error', 0, 'set']);
    assert.match(problem.detail, /traits\.source: only identify and group items have traits/);
    const res = await p.segment([
      { type: 'track', event: 'Order Completed', userId: 'u1', messageId: 'ts-1', properties: { amount: 3 } },
      { type: 'page', name: 'Home', userId: 'u1', messageId: 'ts-2', properties: { path: '/' } },
      { type: 'identify', userId: 'u1', messageId: 'ts-3', traits: { plan: 'pro' } },
      { type: 'group', groupId: 'g1', userId: 'u1', messageId: 'ts-4', traits: { size: 5 } },
    ]);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(
      res.json().rejected.map((r: { index: number; code: string }) => [r.index, r.code]),
      [
        [0, 'transformation_error'],
        [1, 'transformation_error'],
      ],
    );
    const events = await p.events();
    assert.deepEqual(events.map((e) => e.canonical_name).sort(), ['group_identified', 'user_identified']);
    const identify = events.find((e) => e.canonical_name === 'user_identified')!;
    assert.deepEqual(identify.properties, { plan: 'pro', source: 'web' });
    const group = events.find((e) => e.canonical_name === 'group_identified')!;
    assert.deepEqual(group.properties, { size: 5, user_id: 'u1', source: 'web' });

    // A step scoped to the items that have traits, or skipped on the others, leaves their properties alone.
    await p.put([
      { kind: 'set', path: 'traits.source', value: 'web', on_error: 'skip' },
      { kind: 'rename_property', from: 'properties.plan', to: 'traits.plan', on_error: 'skip' },
      { kind: 'set', path: 'traits.seen', value: true, where: { in: [{ var: 'type' }, ['identify', 'group']] } },
    ]);
    const kept = await v2(p.eventsKey, { properties: { amount: 12, plan: 'pro' } });
    assert.equal(kept.statusCode, 201, kept.body);
    assert.deepEqual(kept.json().data.properties, { amount: 12, plan: 'pro' }, 'stored as sent');
    const skipped = (await p.rejections()).filter((r) => r.severity === 'warning');
    assert.deepEqual(
      skipped.map((r) => r.detail.match(/step (\d)/)[1]).sort(),
      ['0', '1'],
      'each skipped step recorded as a warning',
    );

    // The test endpoint answers what ingest would store: the same error, never traits on a track.
    const tried = await p.admin('POST', '/transformation/test', {
      route: 'segment',
      steps,
      items: [
        { type: 'track', event: 'Order Completed', userId: 'u1', properties: { amount: 3, plan: 'pro' } },
        { type: 'identify', userId: 'u1', traits: { plan: 'pro' } },
      ],
    });
    assert.equal(tried.statusCode, 200, tried.body);
    const [track, identified] = tried.json().data;
    assert.equal(track.output, null);
    assert.equal(track.error.step, 0);
    assert.match(track.error.message, /only identify and group items have traits/);
    assert.deepEqual(identified.output.traits, { plan: 'pro', source: 'web' });
  });

  it('a function that gives a track traits fails the same way', async () => {
    const p = await newProduct('tf-traits-function');
    await p.put([{ kind: 'function', code: 'function transform(e) { e.traits = { x: 1 }; return e; }' }]);
    const res = await v2(p.eventsKey, { properties: { amount: 12 } });
    assert.equal(res.statusCode, 422, res.body);
    assert.deepEqual([problemOf(res).step, problemOf(res).kind], [0, 'function']);
    assert.match(problemOf(res).detail, /only identify and group items have traits/);
  });
});

describe('native identify', () => {
  it('the traits go through the steps: masked, dropped, or refused with 422', async () => {
    const p = await newProduct('tf-identify');
    await p.put([
      { kind: 'drop', where: { '==': [{ var: 'traits.test' }, true] } },
      { kind: 'mask', paths: ['traits.email'], with: 'redact' },
      { kind: 'set', path: 'traits.seen', value: true },
      { kind: 'set', path: 'traits.email.x', value: 1, where: { '==': [{ var: 'traits.fail' }, true] } },
    ]);
    const identify = (traits: Record<string, unknown>, externalId = 'n-1') =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/identify',
        headers: bearer(p.eventsKey),
        payload: { external_id: externalId, traits },
      });
    const created = await identify({ email: 'fay@example.com', name: 'Fay' });
    assert.equal(created.statusCode, 201, created.body);
    assert.deepEqual(created.json().data.traits, { email: REDACTED, name: 'Fay', seen: true });
    const dropped = await identify({ test: true }, 'n-2');
    assert.deepEqual(dropped.json(), { data: null, meta: { dropped: true, step: 0 } });
    assert.equal((await p.admin('GET', '/users/n-2')).statusCode, 404, 'nothing stored');
    const failed = await identify({ email: 'gus@example.com', fail: true }, 'n-3');
    assert.equal(failed.statusCode, 422);
    assert.equal(problemOf(failed).code, 'transformation_error');
    const user = (await p.admin('GET', '/users/n-1')).json().data;
    assert.equal(JSON.stringify(user).includes('example.com'), false);
  });
});

describe('native identify: identifiers that hold a masked trait follow it', () => {
  it("an identifier with the trait's value becomes its hash or is left out; others are as sent", async () => {
    const p = await newProduct('tf-identify-identifiers');
    const marker = 'IDSMARKERQ4Z';
    await p.put([
      { kind: 'mask', paths: ['traits.email'], with: 'hash' },
      { kind: 'mask', paths: ['traits.phone'], with: 'redact' },
      { kind: 'set', path: 'traits.email.inner', value: 1, where: { '==': [{ var: 'traits.fail' }, true] } },
    ]);
    const identify = (externalId: string, identifiers: Record<string, unknown>, traits: Record<string, unknown>) =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/identify',
        headers: bearer(p.eventsKey),
        payload: { external_id: externalId, identifiers, traits },
      });
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    const email = `${marker.toLowerCase()}@example.com`;
    // The e-mail identifier as the client wrote it (identifiers compare e-mail addresses trimmed and lower-cased).
    const created = await identify(
      'ids-1',
      { email: ` ${marker}@Example.com`, phone: `+1555${marker}`, crm_id: 'crm-7' },
      { email, phone: `+1555${marker}`, plan: 'pro' },
    );
    assert.equal(created.statusCode, 201, created.body);
    const user = created.json().data;
    assert.deepEqual(user.identifiers, { email: maskHash(secret, email), crm_id: 'crm-7' });
    assert.deepEqual(user.traits, { email: maskHash(secret, email), phone: REDACTED, plan: 'pro' });
    // An identifier that holds another value than the trait of its name is not the masked value: as sent.
    const other = await identify('ids-2', { email: 'work@example.org' }, { email: `2-${email}` });
    assert.equal(other.statusCode, 201, other.body);
    assert.deepEqual(other.json().data.identifiers, { email: 'work@example.org' });
    // A refused identify is recorded with its identifiers as the steps left the traits.
    const failed = await identify('ids-3', { email: `3-${email}` }, { email: `3-${email}`, fail: true });
    assert.equal(failed.statusCode, 422, failed.body);
    const [rejected] = await p.rejections();
    assert.deepEqual(rejected!.item, {
      external_id: 'ids-3',
      identifiers: { email: maskHash(secret, `3-${email}`) },
      traits: { email: maskHash(secret, `3-${email}`), fail: true },
    });
    await assertNoTrace(ctx, p, marker);
    await assertNoTrace(ctx, p, marker.toLowerCase());
  });
});

describe('native identify: suppression first, refusals recorded', () => {
  it("an erased person's identify is refused whatever the steps do to the subject", async () => {
    const p = await newProduct('tf-identify-erased');
    const person = 'erased-person-4e1';
    const erased = await p.admin('POST', '/erasures', { external_id: person });
    assert.equal(erased.statusCode, 202, erased.body);
    const identify = () =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/identify',
        headers: bearer(p.eventsKey),
        payload: { external_id: person, traits: { plan: 'pro' } },
      });
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    const hashed = maskHash(secret, person);
    for (const step of [
      { kind: 'mask', paths: ['subject_id'], with: 'hash' },
      { kind: 'set', path: 'subject_id', value: 'someone-else' },
      { kind: 'drop' },
    ]) {
      await p.put([step]);
      const res = await identify();
      assert.equal(res.statusCode, 409, `${step.kind}: ${res.body}`);
      assert.equal(problemOf(res).code, 'subject_suppressed');
    }
    for (const id of [hashed, 'someone-else'])
      assert.equal((await p.admin('GET', `/users/${id}`)).statusCode, 404, `no user ${id}`);
    // A Segment identify of the person, its subject masked by the steps, is refused the same way.
    await p.put([{ kind: 'mask', paths: ['subject_id'], with: 'hash' }]);
    const segment = await p.segment([{ type: 'identify', userId: person, messageId: 'er-1', traits: { a: 1 } }]);
    assert.deepEqual(
      segment.json().rejected.map((r: { code: string }) => r.code),
      ['subject_suppressed'],
    );
    assert.equal((await p.events()).length, 0);
    const recorded = await p.rejections();
    assert.equal(recorded.length, 4);
    for (const row of recorded) {
      assert.equal(row.code, 'subject_suppressed');
      assert.equal(row.item, null, 'recorded without the item');
    }
  });

  it('a failing step and a skipped one are recorded in the rejections list after masking', async () => {
    const p = await newProduct('tf-identify-records');
    const marker = 'IDMARKERK7Q';
    await p.put([
      { kind: 'mask', paths: ['traits.email'], with: 'redact' },
      { kind: 'mask', paths: ['subject_id'], with: 'hash' },
      { kind: 'set', path: 'traits.email.inner', value: 1, where: { '==': [{ var: 'traits.fail' }, true] } },
      { kind: 'set', path: 'traits.plan.tier', value: 'x', on_error: 'skip' },
    ]);
    const identify = (externalId: string, traits: Record<string, unknown>) =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/identify',
        headers: bearer(p.eventsKey),
        payload: { external_id: externalId, traits },
      });
    const failed = await identify(`${marker}-1`, { email: `${marker}@example.com`, fail: true });
    assert.equal(failed.statusCode, 422, failed.body);
    assert.deepEqual([problemOf(failed).step, problemOf(failed).kind], [2, 'set']);
    const kept = await identify(`${marker}-2`, { email: `${marker}-2@example.com`, plan: 'pro' });
    assert.equal(kept.statusCode, 201, kept.body);
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    const recorded = await p.rejections();
    const rejected = recorded.filter((r) => r.severity === 'rejected');
    const warnings = recorded.filter((r) => r.severity === 'warning');
    assert.equal(rejected.length, 1);
    assert.equal(rejected[0]!.code, 'transformation_error');
    assert.equal(rejected[0]!.route, '/api/v2/identify');
    assert.match(rejected[0]!.detail, /step 2 \(set\)/);
    assert.deepEqual(rejected[0]!.item, {
      external_id: maskHash(secret, `${marker}-1`),
      traits: { email: REDACTED, fail: true },
    });
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0]!.code, 'transformation_error');
    assert.match(warnings[0]!.detail, /step 3 \(set\)/);
    assert.deepEqual(warnings[0]!.item, {
      external_id: maskHash(secret, `${marker}-2`),
      traits: { email: REDACTED, plan: 'pro' },
    });
    await assertNoTrace(ctx, p, marker);
  });
});

describe('Segment identity refusals (clarifications §18) come after the steps', () => {
  const origin = 'https://app.example.com';
  async function browserKeyOf(productId: string): Promise<string> {
    const created = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'browser', allowed_origins: [origin] },
    });
    assert.equal(created.statusCode, 201, created.body);
    return created.json().data.key;
  }
  const identify = (key: string, item: Record<string, unknown>) =>
    ctx.app.inject({
      method: 'POST',
      url: '/v1/identify',
      headers: { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}`, origin },
      payload: item,
    });

  it('a merge a browser key may not make is recorded with the item masked', async () => {
    const p = await newProduct('tf-segment-merge');
    const key = await browserKeyOf(p.id);
    const marker = 'MERGEMARKERV3';
    await p.put([{ kind: 'mask', paths: ['traits.email'], with: 'redact' }]);
    assert.equal((await identify(key, { userId: 'mm-a', anonymousId: 'mm-anon', messageId: 'mm-1' })).statusCode, 200);
    assert.equal((await identify(key, { userId: 'mm-b', messageId: 'mm-2' })).statusCode, 200);
    const refused = await identify(key, {
      userId: 'mm-b',
      anonymousId: 'mm-anon',
      messageId: 'mm-3',
      traits: { email: `${marker}@example.com`, plan: 'pro' },
    });
    assert.deepEqual(
      refused.json().rejected.map((r: { code: string }) => r.code),
      ['identified_merge_forbidden'],
    );
    const [recorded, ...others] = await p.rejections();
    assert.equal(others.length, 0);
    assert.equal(recorded!.code, 'identified_merge_forbidden');
    assert.equal(recorded!.message_id, 'mm-3');
    assert.deepEqual(recorded!.item.traits, { email: REDACTED, plan: 'pro' }, 'recorded as the steps left it');
    await assertNoTrace(ctx, p, marker);
  });

  it('is asked of the ids as the steps left them, and never before suppression', async () => {
    const p = await newProduct('tf-segment-merge-subject');
    const key = await browserKeyOf(p.id);
    await p.put([{ kind: 'mask', paths: ['subject_id'], with: 'hash' }]);
    await identify(key, { userId: 'ms-a', anonymousId: 'ms-anon', messageId: 'ms-1' });
    await identify(key, { userId: 'ms-b', messageId: 'ms-2' });
    // The users are stored under the hashes of ms-a and ms-b: the merge asked is of those two.
    const refused = await identify(key, { userId: 'ms-b', anonymousId: 'ms-anon', messageId: 'ms-3' });
    assert.deepEqual(
      [refused.json().accepted, refused.json().rejected.map((r: { code: string }) => r.code)],
      [0, ['identified_merge_forbidden']],
    );
    const erased = await p.admin('POST', '/erasures', { external_id: 'ms-b' });
    assert.equal(erased.statusCode, 202, erased.body);
    const suppressed = await identify(key, { userId: 'ms-b', anonymousId: 'ms-anon', messageId: 'ms-4' });
    assert.deepEqual(
      suppressed.json().rejected.map((r: { code: string }) => r.code),
      ['subject_suppressed'],
    );
  });
});

describe('a transformed item is checked again like input (transformations.md §1)', () => {
  it('an item the steps grow past the event size limit fails at the last step that changed it', async () => {
    const p = await newProduct('tf-size');
    const grow = { '==': [{ var: 'properties.grow' }, true] };
    const growTraits = { '==': [{ var: 'traits.grow' }, true] };
    const chunk = 'x'.repeat(7000);
    await p.put([
      { kind: 'mask', paths: ['properties.email'], with: 'redact' },
      ...[0, 1, 2, 3, 4].map((n) => ({ kind: 'set', path: `properties.b${n}`, value: chunk, where: grow })),
      ...[0, 1, 2, 3, 4].map((n) => ({ kind: 'set', path: `traits.b${n}`, value: chunk, where: growTraits })),
      { kind: 'remove', paths: ['properties.absent'] },
    ]);
    const single = await v2(p.eventsKey, { properties: { email: 'size@example.com', grow: true } });
    assert.equal(single.statusCode, 422, 'refused, not stored');
    const problem = problemOf(single);
    assert.deepEqual([problem.code, problem.step, problem.kind], ['transformation_error', 5, 'set']);
    assert.match(problem.detail, /left \d+ bytes of JSON in the event's properties and context; .* at most 32768/);
    assert.equal((await v2(p.eventsKey, { properties: { email: 'small@example.com' } })).statusCode, 201);
    const batch = await p.batch([
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { grow: true } },
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { grow: false } },
    ]);
    assert.equal(batch.statusCode, 207, batch.body);
    assert.equal(batch.json().data[0].error.code, 'transformation_error');
    assert.equal(batch.json().data[0].error.step, 5);
    assert.equal(batch.json().data[1].status, 'created', 'the rest of a batch is stored');
    const segment = await p.segment([
      { type: 'track', event: 'Grown', userId: 'u1', messageId: 'sz-1', properties: { grow: true } },
      { type: 'identify', userId: 'u1', messageId: 'sz-2', traits: { grow: true } },
      { type: 'track', event: 'Kept', userId: 'u1', messageId: 'sz-3' },
    ]);
    assert.deepEqual(
      segment.json().rejected.map((r: { index: number; code: string }) => [r.index, r.code]),
      [
        [0, 'transformation_error'],
        [1, 'transformation_error'],
      ],
    );
    assert.equal(segment.json().accepted, 1);
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(p.eventsKey),
      payload: { external_id: 'sz-user', traits: { grow: true } },
    });
    assert.equal(identify.statusCode, 422, identify.body);
    assert.deepEqual([problemOf(identify).step, problemOf(identify).kind], [10, 'set']);
    assert.match(problemOf(identify).detail, /bytes of JSON in the traits; an identify may hold at most 32768/);
    assert.equal((await p.admin('GET', '/users/sz-user')).statusCode, 404, 'nothing stored');
    const stored = await p.events();
    assert.equal(stored.length, 3);
    assert.ok(stored.every((e) => JSON.stringify(e).length < 32768));
    const recorded = (await p.rejections()).filter((r) => r.severity === 'rejected');
    assert.equal(recorded.length, 5);
    assert.ok(recorded.every((r) => r.code === 'transformation_error' && /step (5|10) \(set\)/.test(r.detail)));
    assert.equal(JSON.stringify(recorded).includes('size@example.com'), false, 'recorded after masking');
    // The test endpoint answers what ingest would do.
    const tried = await p.admin('POST', '/transformation/test', {
      items: [
        { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { grow: true } },
        { event: 'a.b', subject_type: 'user', subject_id: 'u1' },
      ],
    });
    const [grown, small] = tried.json().data;
    assert.equal(grown.output, null);
    assert.equal(grown.error.step, 5);
    assert.match(grown.error.message, /an event may hold at most 32768/);
    assert.ok(small.output);
  });
});

describe('the test endpoint', () => {
  it('route stored: events as read, of every kind, in their stored form; sample answers as it did at ingest', async () => {
    const p = await newProduct('tf-test-stored');
    // Native items are sampled (by their external id, or the id assigned to an item without one); Segment ones kept.
    await p.put([{ kind: 'sample', rate: 0.5, where: { '==': [{ var: 'source' }, 'api'] } }]);
    let sent = 0;
    for (; sent < 8; sent++) await v2(p.eventsKey, { properties: { i: sent } });
    // An item without an external id is sampled by the random id it is given: they are sent until one is kept (each
    // is, at rate 0.5; 40 dropped in a row is a chance of 2^-40), so that the test does not rest on a coin.
    const keptWithoutId = async () => (await p.events()).some((e) => e.source === 'api' && e.external_id === null);
    for (; sent < 48 && !(await keptWithoutId()); sent++)
      await v2(p.eventsKey, { properties: { i: sent }, external_id: undefined });
    const segment = await p.segment([
      { type: 'identify', userId: 'u-st', messageId: 'st-1', traits: { email: 'st@example.com', plan: 'pro' } },
      { type: 'track', event: 'Signed Up', userId: 'u-st', messageId: 'st-2', properties: { plan: 'pro' } },
    ]);
    assert.equal(segment.statusCode, 200, segment.body);
    const stored = await p.events();
    const natives = stored.filter((e) => e.source === 'api');
    assert.ok(natives.length > 0 && natives.length < sent, `${natives.length} of ${sent} native events kept`);
    assert.ok(
      natives.some((e) => e.external_id === null),
      'an event without an external id is among them',
    );

    const again = await p.admin('POST', '/transformation/test', { route: 'stored', items: stored });
    assert.equal(again.statusCode, 200, again.body);
    assert.deepEqual(
      again.json().data.filter((r: Row) => r.output === null),
      [],
      'each stored event was kept at ingest, and the version in force keeps it again',
    );

    const tried = await p.admin('POST', '/transformation/test', {
      route: 'stored',
      steps: [{ kind: 'set', path: 'traits.checked', value: true, where: { '==': [{ var: 'type' }, 'identify'] } }],
      items: stored,
    });
    assert.equal(tried.statusCode, 200, tried.body);
    const results = tried.json().data as Row[];
    const identify = results.find((r) => r.input.type === 'identify')!;
    assert.deepEqual(identify.input.traits, { email: 'st@example.com', plan: 'pro' });
    assert.deepEqual(identify.input.properties, {});
    assert.equal(identify.input.source, 'segment');
    assert.deepEqual(identify.output.traits, { email: 'st@example.com', plan: 'pro', checked: true });
    assert.deepEqual(identify.trace, [{ step: 0, changed: ['traits.checked'] }]);
    const track = results.find((r) => r.input.type === 'track')!;
    assert.equal(track.input.event, 'signed_up');
    assert.deepEqual(track.output, track.input);
    assert.equal(results.filter((r) => r.input.type === 'event').length, natives.length);

    const bad = await p.admin('POST', '/transformation/test', { route: 'stored', items: [{ event_type: 'a' }] });
    assert.equal(bad.statusCode, 400);
    assert.ok(problemOf(bad).errors!.some((e) => e.pointer === '/items/0/canonical_name'));
    assert.equal((await p.events()).length, stored.length, 'nothing stored');
  });

  it('runs given steps on items as a route would translate them, with traces, storing nothing', async () => {
    const p = await newProduct('tf-test');
    const res = await p.admin('POST', '/transformation/test', {
      steps: [
        { kind: 'remove', paths: ['properties.x'] },
        { kind: 'drop', where: { '==': [{ var: 'subject_id' }, 'gone'] } },
      ],
      items: [
        { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { x: 1, y: 2 } },
        { event: 'a.b', subject_type: 'user', subject_id: 'gone' },
      ],
    });
    assert.equal(res.statusCode, 200, res.body);
    const [kept, dropped] = res.json().data;
    assert.deepEqual(kept.input.properties, { x: 1, y: 2 });
    assert.deepEqual(kept.output.properties, { y: 2 });
    assert.deepEqual(kept.trace, [
      { step: 0, changed: ['properties.x'] },
      { step: 1, changed: [] },
    ]);
    assert.equal(dropped.output, null);
    assert.equal(dropped.dropped_by, 1);
    const segment = await p.admin('POST', '/transformation/test', {
      route: 'segment',
      steps: [{ kind: 'set', path: 'properties.k', value: 1 }],
      items: [{ type: 'track', event: 'Clicked', userId: 'u1' }],
    });
    assert.equal(segment.json().data[0].input.type, 'track');
    assert.equal(segment.json().data[0].input.source, 'segment');
    const invalid = await p.admin('POST', '/transformation/test', {
      steps: [{ kind: 'remove', paths: ['type'] }],
      items: [{ event: 'a.b', subject_type: 'user', subject_id: 'u1' }],
    });
    assert.equal(problemOf(invalid).errors![0]!.pointer, '/steps/0/paths/0');
    const badItem = await p.admin('POST', '/transformation/test', { items: [{ event: 'a.b' }] });
    assert.equal(badItem.statusCode, 400);
    assert.equal((await p.events()).length, 0, 'nothing stored');
    assert.deepEqual((await p.admin('GET', '/transformation')).json(), { data: null });
  });
});

/** The series of one metric in a `/metrics` text: each one's labels and value. */
function series(text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const found: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (match?.[1] !== name) continue;
    const labels = Object.fromEntries([...match[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

describe('metrics (transformations.md §5)', () => {
  it('count items per product, step and outcome, and the seconds of each step kind, through /metrics', async () => {
    const p = await newProduct('tf-metrics');
    await p.put([
      { kind: 'drop', where: { '==': [{ var: 'properties.test' }, true] } },
      { kind: 'mask', paths: ['properties.email'], with: 'hash' },
      // Writing under a string fails: an error for the item whose `where` holds.
      { kind: 'set', path: 'properties.email.inner', value: 1, where: { '==': [{ var: 'properties.fail' }, true] } },
    ]);
    const scrape = async () => (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
    const seconds = (text: string) =>
      Object.fromEntries(series(text, 'inlet_transformation_cpu_seconds_total').map((s) => [s.labels.kind, s.value]));
    const before = seconds(await scrape());

    const res = await p.batch([
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { test: true } },
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { email: 'x@example.com' } },
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { other: 1 } },
      { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { email: 'y@example.com', fail: true } },
    ]);
    assert.equal(res.statusCode, 207, res.body);
    assert.deepEqual(
      res.json().data.map((r: { status: string }) => r.status),
      ['dropped', 'created', 'created', 'rejected'],
    );
    const single = await v2(p.eventsKey, { properties: { email: 'z@example.com' } });
    assert.equal(single.statusCode, 201, single.body);

    const text = await scrape();
    const items = series(text, 'inlet_transformation_items_total')
      .filter((s) => s.labels.product_id === p.id)
      .map((s) => `${s.labels.step} ${s.labels.outcome} ${s.value}`)
      .sort();
    assert.deepEqual(items, [
      '0 dropped 1',
      '0 unchanged 4',
      '1 changed 3',
      '1 unchanged 1',
      '2 error 1',
      '2 unchanged 3',
    ]);
    const after = seconds(text);
    for (const kind of ['drop', 'mask', 'set'])
      assert.ok(after[kind]! > (before[kind] ?? 0), `seconds of ${kind} steps grew: ${before[kind]} → ${after[kind]}`);
  });
});

describe('masking leaves no trace', () => {
  it('in reads, rejections or the database', async () => {
    const p = await newProduct('tf-trace');
    const marker = 'ZQXJWVKMARKER';
    await p.put([
      { kind: 'mask', paths: ['properties.card', 'context.ip', 'traits.email'], with: 'redact' },
      { kind: 'drop', where: { '==': [{ var: 'properties.drop' }, true] } },
      { kind: 'set', path: 'occurred_at', value: 'not a time', where: { '==': [{ var: 'properties.fail' }, true] } },
    ]);
    await v2(p.eventsKey, { properties: { card: `${marker}-1` }, context: { ip: `${marker}-2` } });
    await v2(p.eventsKey, { properties: { card: `${marker}-3`, fail: true } });
    await v2(p.eventsKey, { properties: { card: `${marker}-4`, drop: true } });
    await p.segment([
      { type: 'identify', userId: 'u-m', messageId: 'm-1', traits: { email: `${marker}-5` } },
      {
        type: 'track',
        event: 'X',
        userId: 'u-m',
        messageId: 'm-2',
        properties: { card: `${marker}-6`, fail: true },
      },
    ]);
    assert.equal((await p.rejections()).length, 2);
    await assertNoTrace(ctx, p, marker);
  });

  it('of a masked subject in a Segment item as stored (its userId or anonymousId)', async () => {
    const p = await newProduct('tf-trace-subject');
    const marker = 'SUBJECTMARKERQW';
    await p.put([{ kind: 'mask', paths: ['subject_id'], with: 'hash' }]);
    const res = await p.segment([
      { type: 'identify', userId: `${marker}-1`, messageId: 's-1', traits: { plan: 'pro' } },
      { type: 'track', event: 'Signed Up', userId: `${marker}-1`, messageId: 's-2' },
      { type: 'page', name: 'Home', anonymousId: `${marker}-2`, messageId: 's-3' },
      { type: 'track', event: 'Clicked', userId: `${marker}-1`, anonymousId: 'anon-1', messageId: 's-4' },
    ]);
    assert.equal(res.statusCode, 200);
    const events = await p.events();
    assert.equal(events.length, 4);
    const secret = await ctx.services.storage.transformations.secret(p.id, () => 'unused');
    const hashed = maskHash(secret, `${marker}-1`);
    const track = events.find((e) => e.canonical_name === 'signed_up' && e.subject_id === hashed);
    assert.ok(track, 'the subject is the hash');
    assert.equal(track.original.userId, hashed, 'the item as stored carries the masked subject');
    await assertNoTrace(ctx, p, marker);
  });
});
