// Tracking plans (governance.md §2, §5 "Plans"): every mode on native single, batch and Segment items
// and on identify traits; pointers in answers and records; the unplanned rule; versions; an invalid
// schema refused with pointers into the plan; the draft from the catalogue validating the events it was
// drawn from; another instance applying a new version within its refresh time.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildApp } from '../src/http/app.js';
import {
  adminHeaders,
  bearer,
  createTestApp,
  createTestServices,
  dialect,
  problemOf,
  reusableDatabase,
  type TestContext,
  productAdmin,
} from './helpers.js';

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

const ORDER_SCHEMA = {
  type: 'object',
  properties: { plan: { type: 'string', enum: ['free', 'pro'] }, amount: { type: 'number' } },
  required: ['plan'],
};

async function newProduct(name: string) {
  const product = await ctx.product(name);
  const admin = productAdmin(ctx.app, product.id);
  return { ...product, admin };
}

let seq = 0;
const v2 = (key: string, properties: Record<string, unknown>, name = 'order.completed') =>
  ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events',
    headers: bearer(key),
    payload: { event: name, subject_type: 'user', subject_id: 'u1', external_id: `x-${++seq}`, properties },
  });

describe('tracking plan documents', () => {
  it('PUT stores a new version each time, GET answers the current one, versions lists them newest first', async () => {
    const p = await newProduct('versions');
    assert.equal(problemOf(await p.admin('GET', '/tracking_plan')).code, 'not_found');
    const first = await p.admin('PUT', '/tracking_plan', {
      mode: 'warn',
      events: { order_completed: { properties: ORDER_SCHEMA } },
    });
    assert.equal(first.statusCode, 200, first.body);
    assert.equal(first.json().data.version, 1);
    assert.equal(first.json().data.mode, 'warn');
    assert.deepEqual(first.json().data.events.order_completed.properties, ORDER_SCHEMA);
    const second = await p.admin('PUT', '/tracking_plan', { mode: 'enforce', unplanned: 'reject' });
    assert.equal(second.json().data.version, 2);
    const current = (await p.admin('GET', '/tracking_plan')).json().data;
    assert.equal(current.version, 2);
    assert.equal(current.unplanned, 'reject');
    const versions = (await p.admin('GET', '/tracking_plan/versions')).json().data;
    assert.deepEqual(
      versions.map((v: { version: number; mode: string }) => [v.version, v.mode]),
      [
        [2, 'enforce'],
        [1, 'warn'],
      ],
    );
  });

  it('refuses an invalid schema or document with 400 and pointers into the plan, storing nothing', async () => {
    const p = await newProduct('invalid');
    const badType = problemOf(
      await p.admin('PUT', '/tracking_plan', {
        mode: 'warn',
        events: { order_completed: { properties: { type: 'strin' } } },
      }),
    );
    assert.equal(badType.code, 'validation_error');
    assert.ok(
      badType.errors!.some((e) => e.pointer === '/events/order_completed/properties/type'),
      JSON.stringify(badType.errors),
    );
    const typo = problemOf(
      await p.admin('PUT', '/tracking_plan', {
        mode: 'warn',
        events: { a_b: { properties: { type: 'object', requierd: ['x'] } } },
      }),
    );
    assert.ok(
      typo.errors!.some((e) => e.pointer === '/events/a_b/properties' && /requierd/.test(e.message)),
      JSON.stringify(typo.errors),
    );
    const badTraits = problemOf(
      await p.admin('PUT', '/tracking_plan', { mode: 'warn', traits: { properties: { email: { minLength: -1 } } } }),
    );
    assert.ok(
      badTraits.errors!.some((e) => e.pointer.startsWith('/traits/properties/email')),
      JSON.stringify(badTraits.errors),
    );
    const badMode = await p.admin('PUT', '/tracking_plan', { mode: 'block' });
    assert.equal(badMode.statusCode, 400);
    assert.equal(problemOf(badMode).errors![0]!.pointer, '/mode');
    assert.equal((await p.admin('GET', '/tracking_plan/versions')).json().data.length, 0);
  });
});

describe('warn', () => {
  it('stores the event and records a violation with pointers, the plan version and the message id, never the values', async () => {
    const p = await newProduct('warn');
    await p.admin('PUT', '/tracking_plan', {
      mode: 'warn',
      unplanned: 'warn',
      events: { order_completed: { properties: ORDER_SCHEMA } },
    });
    const res = await v2(p.eventsKey, { plan: 7, amount: 'secret-amount' });
    assert.equal(res.statusCode, 201, res.body);
    const unplanned = await v2(p.eventsKey, { any: 1 }, 'orders.refunded');
    assert.equal(unplanned.statusCode, 201);
    const list = await p.admin('GET', '/violations');
    assert.equal(list.statusCode, 200, list.body);
    const [newest, older] = list.json().data;
    assert.equal(newest.code, 'unplanned_event');
    assert.equal(newest.canonical_name, 'orders_refunded');
    assert.equal(newest.severity, 'warning');
    assert.equal(older.code, 'tracking_plan_violation');
    assert.equal(older.severity, 'warning');
    assert.equal(older.plan_version, 1);
    assert.equal(older.route, '/api/v2/events');
    assert.equal(older.message_id, `x-${seq - 1}`);
    assert.deepEqual(older.errors.map((e: { pointer: string }) => e.pointer).sort(), [
      '/properties/amount',
      '/properties/plan',
      '/properties/plan',
    ]);
    assert.ok(!list.body.includes('secret-amount'));
    assert.equal((await p.admin('GET', '/violations?code=unplanned_event')).json().data.length, 1);
    assert.equal((await p.admin('GET', '/violations?canonical_name=order_completed')).json().data.length, 1);
    // Batch elements and Segment items in warn: stored, each recorded with its own pointers.
    const batch = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: {
        events: [
          { event: 'order.completed', subject_type: 'user', subject_id: 'u', properties: { plan: 'pro' } },
          { event: 'order.completed', subject_type: 'user', subject_id: 'u', properties: { plan: true } },
        ],
      },
    });
    assert.equal(batch.statusCode, 200, batch.body);
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(p.eventsKey),
      payload: {
        batch: [{ type: 'track', event: 'Order Completed', userId: 'u', messageId: 'warn-seg', properties: {} }],
      },
    });
    assert.equal(segment.json().accepted, 1);
    assert.deepEqual(segment.json().rejected, []);
    const more = (await p.admin('GET', '/violations?limit=2')).json().data;
    assert.deepEqual(
      more.map((v: { route: string; severity: string; errors: Array<{ pointer: string }> }) => [
        v.route,
        v.severity,
        v.errors.map((e) => e.pointer),
      ]),
      [
        ['/v1/batch', 'warning', ['/properties/plan']],
        ['/api/v2/events/batch', 'warning', ['/properties/plan', '/properties/plan']],
      ],
    );
    // Nothing refused, so nothing in the rejections list.
    assert.equal((await p.admin('GET', '/rejections')).json().data.length, 0);
    const metric = await ctx.services.metrics.registry.getSingleMetric('inlet_tracking_plan_violations_total')!.get();
    assert.ok(
      metric.values.some(
        (v) =>
          v.labels.canonical_name === 'order_completed' && v.labels.code === 'tracking_plan_violation' && v.value >= 1,
      ),
    );
  });
});

describe('enforce', () => {
  let p: Awaited<ReturnType<typeof newProduct>>;
  before(async () => {
    p = await newProduct('enforce');
    const put = await p.admin('PUT', '/tracking_plan', {
      mode: 'enforce',
      unplanned: 'reject',
      events: {
        order_completed: { properties: ORDER_SCHEMA },
        user_signed_up: { properties: { type: 'object', properties: { referrer: { type: 'string' } } } },
        page_viewed: { properties: { type: 'object', properties: { name: { type: 'string' } } }, mode: 'warn' },
      },
      traits: { type: 'object', properties: { email: { type: 'string', format: 'email' }, age: { type: 'integer' } } },
    });
    assert.equal(put.statusCode, 200, put.body);
  });

  it('native single event: 400 tracking_plan_violation with pointers into the body; recorded as rejection and violation', async () => {
    const res = await v2(p.eventsKey, { plan: 7 });
    const problem = problemOf(res);
    assert.equal(res.statusCode, 400);
    assert.equal(problem.code, 'tracking_plan_violation');
    assert.deepEqual(
      problem.errors!.map((e) => e.pointer),
      ['/properties/plan', '/properties/plan'],
    );
    assert.equal((await v2(p.eventsKey, { plan: 'pro', amount: 3 })).statusCode, 201);
    const v1 = await ctx.app.inject({
      method: 'POST',
      url: '/api/v1/events',
      headers: bearer(p.eventsKey),
      payload: {
        event_type: 'user_signed_up',
        subject_type: 'user',
        subject_id: 'u',
        occurred_at: '2026-01-01T00:00:00Z',
        metadata: { referrer: 5 },
      },
    });
    assert.equal(v1.statusCode, 400);
    assert.deepEqual(
      problemOf(v1).errors!.map((e) => e.pointer),
      ['/metadata/referrer'],
    );
    const unplanned = await v2(p.eventsKey, {}, 'order.complted');
    assert.equal(unplanned.statusCode, 400);
    assert.equal(problemOf(unplanned).code, 'unplanned_event');
    const rejections = (await p.admin('GET', '/rejections')).json().data;
    assert.deepEqual(
      rejections.map((r: { code: string; route: string }) => [r.code, r.route]),
      [
        ['unplanned_event', '/api/v2/events'],
        ['tracking_plan_violation', '/api/v1/events'],
        ['tracking_plan_violation', '/api/v2/events'],
      ],
    );
    const violations = (await p.admin('GET', '/violations')).json().data;
    assert.deepEqual(
      violations.map((v: { severity: string; code: string }) => [v.severity, v.code]),
      [
        ['rejected', 'unplanned_event'],
        ['rejected', 'tracking_plan_violation'],
        ['rejected', 'tracking_plan_violation'],
      ],
    );
    assert.deepEqual(
      violations[1].errors.map((e: { pointer: string }) => e.pointer),
      ['/metadata/referrer'],
    );
  });

  it('native batch: each element refused on its own with pointers into the batch body (207)', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: {
        events: [
          { event: 'order.completed', subject_type: 'user', subject_id: 'u', properties: { plan: 'free' } },
          { event: 'order.completed', subject_type: 'user', subject_id: 'u', properties: { amount: 1 } },
          { event: 'nothing.planned', subject_type: 'user', subject_id: 'u' },
        ],
      },
    });
    assert.equal(res.statusCode, 207, res.body);
    const { data } = res.json();
    assert.equal(data[0].status, 'created');
    assert.equal(data[1].error.code, 'tracking_plan_violation');
    assert.deepEqual(
      data[1].error.errors.map((e: { pointer: string }) => e.pointer),
      ['/events/1/properties/plan'],
    );
    assert.equal(data[2].error.code, 'unplanned_event');
    const violation = (await p.admin('GET', '/violations?limit=2')).json().data[1];
    assert.deepEqual(
      violation.errors.map((e: { pointer: string }) => e.pointer),
      ['/properties/plan'],
    );
    assert.equal(violation.route, '/api/v2/events/batch');
  });

  it('Segment items: rejected[] with the code, pointers into the Segment body; identify traits checked against `traits`', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(p.eventsKey),
      payload: {
        batch: [
          { type: 'track', event: 'Order Completed', userId: 'u', messageId: 'ok', properties: { plan: 'pro' } },
          { type: 'track', event: 'Order Completed', userId: 'u', messageId: 'bad', properties: { plan: 7 } },
          { type: 'identify', userId: 'u', messageId: 'id-bad', traits: { email: 'not-an-email' } },
          { type: 'identify', userId: 'u', messageId: 'id-ok', traits: { email: 'a@example.com', age: 3 } },
          { type: 'page', name: 7, userId: 'u', messageId: 'page-warn' },
          { type: 'track', event: 'Order Complted', userId: 'u', messageId: 'typo' },
        ],
      },
    });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.equal(body.accepted, 3);
    assert.deepEqual(
      body.rejected.map((r: { index: number; code: string; messageId: string }) => [r.index, r.code, r.messageId]),
      [
        [1, 'tracking_plan_violation', 'bad'],
        [2, 'tracking_plan_violation', 'id-bad'],
        [5, 'unplanned_event', 'typo'],
      ],
    );
    const recorded = (await p.admin('GET', '/rejections?limit=3')).json().data;
    assert.deepEqual(recorded.map((r: { message_id: string }) => r.message_id).sort(), ['bad', 'id-bad', 'typo']);
    const violations = (await p.admin('GET', '/violations?limit=4')).json().data;
    const byMessage = Object.fromEntries(violations.map((v: { message_id: string }) => [v.message_id, v]));
    assert.deepEqual(
      byMessage['id-bad'].errors.map((e: { pointer: string }) => e.pointer),
      ['/traits/email'],
    );
    assert.equal(byMessage['id-bad'].canonical_name, 'user_identified');
    // page_viewed is planned in warn: stored, recorded as a warning.
    assert.equal(byMessage['page-warn'].severity, 'warning');
    // A page's `name` is sent at the top of the item: the pointer says so, not /properties/name.
    assert.deepEqual(
      byMessage['page-warn'].errors.map((e: { pointer: string }) => e.pointer),
      ['/name'],
    );
    const single = await ctx.app.inject({
      method: 'POST',
      url: '/v1/track',
      headers: basic(p.eventsKey),
      payload: { event: 'Order Completed', userId: 'u', messageId: 's1', properties: {} },
    });
    assert.deepEqual(
      single.json().rejected.map((r: { code: string }) => r.code),
      ['tracking_plan_violation'],
    );
  });

  it('native identify: 400 tracking_plan_violation with /traits pointers, nothing changed', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(p.eventsKey),
      payload: { external_id: 'idn', traits: { email: 'nope', age: 1.5 } },
    });
    assert.equal(res.statusCode, 400);
    const problem = problemOf(res);
    assert.equal(problem.code, 'tracking_plan_violation');
    assert.deepEqual(problem.errors!.map((e) => e.pointer).sort(), ['/traits/age', '/traits/email']);
    const user = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/users/idn`,
      headers: adminHeaders(),
    });
    assert.equal(user.statusCode, 404);
    const ok = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(p.eventsKey),
      payload: { external_id: 'idn', traits: { email: 'a@example.com' } },
    });
    assert.equal(ok.statusCode, 201, ok.body);
  });

  it('mode off checks nothing', async () => {
    const q = await newProduct('off');
    await q.admin('PUT', '/tracking_plan', {
      mode: 'off',
      unplanned: 'reject',
      events: { order_completed: { properties: ORDER_SCHEMA, mode: 'enforce' } },
    });
    assert.equal((await v2(q.eventsKey, { plan: 7 })).statusCode, 201);
    assert.equal((await v2(q.eventsKey, {}, 'other.thing')).statusCode, 201);
    assert.equal((await q.admin('GET', '/violations')).json().data.length, 0);
  });
});

describe('draft from the catalogue', () => {
  it('has the observed types and required properties; in enforce it accepts the events it was drawn from and refuses a changed type', async () => {
    const p = await newProduct('draft');
    const events = [
      { event: 'order.completed', properties: { plan: 'pro', amount: 3, meta: { source: 'ios' } } },
      { event: 'order.completed', properties: { plan: 'free', amount: 2.5, coupon: null } },
      { event: 'signup.started', properties: {} },
    ].map((e, i) => ({ ...e, subject_type: 'user', subject_id: 'u', external_id: `d-${i}` }));
    const send = () =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events/batch',
        headers: bearer(p.eventsKey),
        payload: { events },
      });
    assert.equal((await send()).statusCode, 200);
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(p.eventsKey),
      payload: { external_id: 'u', traits: { email: 'a@example.com' } },
    });
    // A Segment identify is stored as the event user_identified, but its traits belong to the plan's `traits`.
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/v1/identify',
      headers: basic(p.eventsKey),
      payload: { userId: 'u', messageId: 'draft-id', traits: { email: 'b@example.com', plan: 'pro' } },
    });
    assert.equal(identify.statusCode, 200);
    const draft = await p.admin('POST', '/tracking_plan/draft');
    assert.equal(draft.statusCode, 200, draft.body);
    const plan = draft.json().data;
    assert.equal(plan.mode, 'off');
    assert.deepEqual(plan.events.order_completed.properties, {
      type: 'object',
      properties: {
        amount: { type: 'number' },
        coupon: { type: 'null' },
        meta: { type: 'object', properties: { source: { type: 'string' } }, required: ['source'] },
        plan: { type: 'string' },
      },
      required: ['amount', 'plan'],
    });
    assert.deepEqual(plan.traits, {
      type: 'object',
      properties: { email: { type: 'string' }, plan: { type: 'string' } },
    });
    assert.deepEqual(Object.keys(plan.events).sort(), ['order_completed', 'signup_started']);
    // Never applied by itself.
    assert.equal((await p.admin('GET', '/tracking_plan')).statusCode, 404);
    plan.mode = 'enforce';
    plan.unplanned = 'reject';
    assert.equal((await p.admin('PUT', '/tracking_plan', plan)).statusCode, 200);
    // The same events again (new external ids would be new events; the same ones are duplicates either way): all pass the plan.
    const again = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(p.eventsKey),
      payload: { events: events.map((e, i) => ({ ...e, external_id: `again-${i}` })) },
    });
    assert.equal(again.statusCode, 200, again.body);
    const changed = await v2(p.eventsKey, { plan: 7, amount: 1 });
    assert.equal(problemOf(changed).errors![0]!.pointer, '/properties/plan');
  });
});

describe('several instances', () => {
  it('an instance applies a version stored by another within its refresh time', async () => {
    const database = reusableDatabase();
    const a = await createTestServices({}, database);
    const b =
      dialect === 'postgres'
        ? await createTestServices({ trackingPlanRefreshMs: 100 }, { ...database, drop: async () => {} })
        : undefined;
    const appA = await buildApp(a.services, { logger: false });
    const appB = b === undefined ? undefined : await buildApp(b.services, { logger: false });
    try {
      const id = (
        await appA.inject({
          method: 'POST',
          url: '/admin/v1/products',
          headers: adminHeaders(),
          payload: { name: 'multi' },
        })
      ).json().data.id;
      const k = (
        await appA.inject({
          method: 'POST',
          url: `/admin/v1/products/${id}/keys`,
          headers: adminHeaders(),
          payload: { kind: 'events' },
        })
      ).json().data.key;
      const target = appB ?? appA;
      const send = () =>
        target.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(k),
          payload: { event: 'a.b', subject_type: 'user', subject_id: 'u' },
        });
      assert.equal((await send()).statusCode, 201);
      await appA.inject({
        method: 'PUT',
        url: `/admin/v1/products/${id}/tracking_plan`,
        headers: adminHeaders(),
        payload: { mode: 'enforce', unplanned: 'reject' },
      });
      const started = Date.now();
      let status = 0;
      while (Date.now() - started < 3000) {
        status = (await send()).statusCode;
        if (status === 400) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(status, 400);
      // Bounded by the refresh time (100 ms) plus a query; generous for a loaded machine.
      assert.ok(Date.now() - started < 2000);
    } finally {
      await appB?.close();
      await b?.services.close();
      await appA.close();
      await a.close();
    }
  });
});

describe('violation records are bounded', () => {
  it('past INLET_VIOLATIONS_MAX_PER_HOUR only counted; older than the retention deleted', async () => {
    const small = await createTestApp({ violationsMaxPerHour: 2, violationsRetentionDays: 30 });
    try {
      const product = await small.product('bounded');
      // A violation recorded 31 days ago: the first flush's retention sweep removes it.
      const old = new Date(Date.now() - 31 * 86_400_000).toISOString();
      await small.services.storage.governance.insertViolations([
        {
          id: '00000000-0000-7000-8000-000000000000',
          productId: product.id,
          receivedAt: old,
          keyId: null,
          route: '/api/v2/events',
          canonicalName: 'x',
          code: 'unplanned_event',
          severity: 'warning',
          planVersion: 1,
          messageId: null,
          subjectId: 'u',
          errors: [],
        },
      ]);
      await small.app.inject({
        method: 'PUT',
        url: `/admin/v1/products/${product.id}/tracking_plan`,
        headers: adminHeaders(),
        payload: { mode: 'warn', unplanned: 'warn' },
      });
      const events = Array.from({ length: 5 }, (_, i) => ({
        event: `name.n${i}`,
        subject_type: 'user',
        subject_id: 'u',
      }));
      assert.equal(
        (
          await small.app.inject({
            method: 'POST',
            url: '/api/v2/events/batch',
            headers: bearer(product.eventsKey),
            payload: { events },
          })
        ).statusCode,
        200,
      );
      const list = (
        await small.app.inject({
          method: 'GET',
          url: `/admin/v1/products/${product.id}/violations`,
          headers: adminHeaders(),
        })
      ).json().data;
      assert.deepEqual(list.map((v: { canonical_name: string }) => v.canonical_name).sort(), ['name_n0', 'name_n1']);
      const metric = await small.services.metrics.registry
        .getSingleMetric('inlet_tracking_plan_violations_total')!
        .get();
      const unrecorded = metric.values.find((v) => v.labels.recorded === 'false');
      assert.equal(unrecorded?.value, 3);
      assert.equal(unrecorded?.labels.canonical_name, '(unplanned)');
    } finally {
      await small.close();
    }
  });
});
