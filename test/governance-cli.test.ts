// The "Done when" walk of issue 17 through the CLI: a newcomer sends a mix of events, lists the
// catalogue, drafts a plan, edits one type, sets it in enforce, sees the next wrong event refused with a
// pointer to the field and listed by `inlet plan violations`. The CLI opens the same database as the
// running app, as it would beside a server.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { adminHeaders, bearer, problemOf } from './helpers.js';
import { cliBesideApp } from './support/cli.js';

const beside = cliBesideApp({ trackingPlanRefreshMs: 50 });
const cli = beside.cli;

describe('catalogue and plan through the CLI', () => {
  it('list → draft → edit one type → set in enforce → the next wrong event is refused with a pointer and listed', async () => {
    const productId = (
      await beside.app().inject({
        method: 'POST',
        url: '/admin/v1/products',
        headers: adminHeaders(),
        payload: { name: 'newcomer' },
      })
    ).json().data.id as string;
    const key = (
      await beside.app().inject({
        method: 'POST',
        url: `/admin/v1/products/${productId}/keys`,
        headers: adminHeaders(),
        payload: { kind: 'events' },
      })
    ).json().data.key as string;
    const events = [
      { event: 'order.completed', properties: { plan: 'pro', amount: 12 } },
      { event: 'order.completed', properties: { plan: 'free', amount: 0 } },
      { event: 'signup.started', properties: { referrer: 'ad' } },
    ].map((e) => ({ ...e, subject_type: 'user', subject_id: 'u1' }));
    assert.equal(
      (
        await beside
          .app()
          .inject({ method: 'POST', url: '/api/v2/events/batch', headers: bearer(key), payload: { events } })
      ).statusCode,
      200,
    );
    const segment = await beside.app().inject({
      method: 'POST',
      url: '/v1/track',
      headers: { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` },
      payload: { event: 'Page Shared', userId: 'u1', properties: { channel: 'mail' } },
    });
    assert.equal(segment.statusCode, 200);
    // The server writes its counts every INLET_CATALOG_FLUSH_MS; here at once.
    await beside.services().governance.catalog.flush();

    const list = await cli('catalog', 'list', '--product', productId, '--sort', 'name');
    assert.equal(list.code, 0, list.err);
    assert.match(list.out, /order_completed\s+2\s.*amount=integer plan=string/);
    assert.match(list.out, /page_shared\s+1\s.*channel=string/);
    assert.match(list.out, /signup_started\s+1\s.*referrer=string/);
    const show = await cli('catalog', 'show', '--product', productId, 'order_completed');
    assert.equal(show.code, 0, show.err);
    assert.match(show.out, /plan\s+string:2/);

    const draft = await cli('plan', 'draft', '--product', productId);
    assert.equal(draft.code, 0, draft.err);
    const plan = JSON.parse(draft.out);
    assert.equal(plan.mode, 'off');
    assert.deepEqual(plan.events.order_completed.properties.properties.amount, { type: 'integer' });
    plan.events.order_completed.properties.properties.amount = { type: 'number', minimum: 0 };
    plan.events.order_completed.properties.properties.plan = { type: 'string', enum: ['free', 'pro'] };
    const file = join(beside.dir(), 'plan.json');
    writeFileSync(file, JSON.stringify(plan, null, 2));
    const set = await cli('plan', 'set', '--product', productId, file, '--mode', 'enforce');
    assert.equal(set.code, 0, set.err);
    assert.match(set.out, /version 1 \(mode enforce\)/);
    const get = await cli('plan', 'get', '--product', productId, '--json');
    assert.equal(JSON.parse(get.out).data.mode, 'enforce');

    // The running app picks up the version stored by the CLI within its refresh time.
    const wrong = () =>
      beside.app().inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(key),
        payload: {
          event: 'order.completed',
          subject_type: 'user',
          subject_id: 'u2',
          properties: { plan: 7, amount: 5 },
        },
      });
    let res = await wrong();
    for (let tries = 0; res.statusCode !== 400 && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      res = await wrong();
    }
    assert.equal(res.statusCode, 400, res.body);
    const problem = problemOf(res);
    assert.equal(problem.code, 'tracking_plan_violation');
    assert.deepEqual([...new Set(problem.errors!.map((e) => e.pointer))], ['/properties/plan']);
    const right = await beside.app().inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(key),
      payload: {
        event: 'order.completed',
        subject_type: 'user',
        subject_id: 'u2',
        properties: { plan: 'pro', amount: 5.5 },
      },
    });
    assert.equal(right.statusCode, 201, right.body);

    await beside.services().governance.plans.flush();
    const violations = await cli('plan', 'violations', '--product', productId);
    assert.equal(violations.code, 0, violations.err);
    assert.match(violations.out, /rejected\s+tracking_plan_violation\s+order_completed\s+1\s+\/api\/v2\/events/);
    assert.match(violations.out, /\/properties\/plan must be string/);
  });

  it('an invalid plan file is refused with pointers into it; usage errors exit 2', async () => {
    const productId = (
      await beside.app().inject({
        method: 'POST',
        url: '/admin/v1/products',
        headers: adminHeaders(),
        payload: { name: 'bad plan' },
      })
    ).json().data.id as string;
    const file = join(beside.dir(), 'bad.json');
    writeFileSync(file, JSON.stringify({ mode: 'warn', events: { a_b: { properties: { type: 'strin' } } } }));
    const bad = await cli('plan', 'set', '--product', productId, file);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /\/events\/a_b\/properties\/type/);
    assert.equal((await cli('plan', 'set', '--product', productId, file, '--mode', 'block')).code, 2);
    assert.equal((await cli('plan', 'set', '--product', productId)).code, 2);
    assert.equal((await cli('plan', 'get', '--product', productId)).code, 1);
    assert.equal((await cli('catalog', 'show', '--product', productId)).code, 2);
  });
});
