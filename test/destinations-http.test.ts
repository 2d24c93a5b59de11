// The destinations admin API (events-out §6) through the real app: create (secret once), list, show,
// edit, pause / resume, replay, rotate_secret, the delivery log (paged), delete; errors as problem+json;
// OpenAPI lists every route; /readyz shows disabled destinations without failing.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.js';

let ctx: TestContext;
let receiver: WebhookReceiver;
let product: { id: string; eventsKey: string };

before(async () => {
  ctx = await createTestApp();
  receiver = await startWebhookReceiver();
  product = await ctx.product('dest-http');
});
after(async () => {
  await receiver.close();
  await ctx.close();
});

const base = () => `/admin/v1/products/${product.id}/destinations`;

async function deliver(): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await ctx.services.destinations.tick();
    await ctx.services.destinations.idle();
  }
}

describe('destinations admin API', () => {
  let id: string;

  it('POST creates a webhook destination: 201, the secret in this answer only', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: base(),
      headers: adminHeaders(),
      payload: {
        type: 'webhook',
        name: 'orders',
        url: receiver.url,
        filter: { types: ['event.created'] },
        batch: { max_messages: 10 },
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    const { data } = res.json();
    assert.match(data.id, /^dst_/);
    assert.match(data.secret, /^whsec_/);
    assert.equal(data.status, 'active');
    assert.equal(data.url, receiver.url);
    assert.deepEqual(data.filter, { types: ['event.created'] });
    assert.deepEqual(data.batch, { max_messages: 10, max_wait_ms: 0 });
    assert.equal(data.lag, 0);
    id = data.id;
    receiver.secrets = [data.secret];
    const shown = await ctx.app.inject({ method: 'GET', url: `${base()}/${id}`, headers: adminHeaders() });
    assert.equal(shown.statusCode, 200);
    assert.equal(shown.json().data.secret, undefined);
    const listed = await ctx.app.inject({ method: 'GET', url: base(), headers: adminHeaders() });
    assert.deepEqual(
      listed.json().data.map((d: { id: string }) => d.id),
      [id],
    );
  });

  it('refuses bad bodies and guarded URLs with 400 problem+json; unknown ids 404', async () => {
    for (const payload of [
      { type: 'webhook', name: 'x', url: 'ftp://example.com' },
      { type: 'webhook', name: 'x', url: 'http://10.0.0.1/hook' }, // not on the test runner's INLET_OUTBOUND_ALLOW
      { type: 'kafka', name: 'x' },
      { type: 'webhook', name: 'x', url: receiver.url, batch: { max_messages: 1001 } },
      { type: 'webhook', name: 'x', url: receiver.url, start: 'yesterday' },
      { type: 'nats', name: 'x', servers: ['nats://127.0.0.1:4222'] },
    ]) {
      const res = await ctx.app.inject({ method: 'POST', url: base(), headers: adminHeaders(), payload });
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload)}: ${res.body}`);
      assert.equal(problemOf(res).code, 'validation_error');
    }
    const missing = await ctx.app.inject({ method: 'GET', url: `${base()}/dst_nope`, headers: adminHeaders() });
    assert.equal(missing.statusCode, 404);
    assert.equal(problemOf(missing).code, 'not_found');
    const noAuth = await ctx.app.inject({ method: 'GET', url: base() });
    assert.equal(noAuth.statusCode, 401);
  });

  it('delivers, logs each attempt (paged, newest first), and shows the cursor and lag', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(product.eventsKey),
        payload: { subject_type: 'user', subject_id: `u${i}`, event_type: 'order', action: 'placed' },
      });
      assert.equal(res.statusCode, 201);
    }
    receiver.script.push({ status: 500 });
    await deliver();
    ctx.clock.advance(10_000);
    await deliver();
    assert.equal(receiver.accepted.length, 3);
    const page1 = await ctx.app.inject({
      method: 'GET',
      url: `${base()}/${id}/deliveries?limit=1`,
      headers: adminHeaders(),
    });
    assert.equal(page1.statusCode, 200, page1.body);
    const body1 = page1.json();
    assert.equal(body1.data[0].outcome, 'success');
    assert.equal(body1.data[0].message_ids.length, 3);
    const page2 = await ctx.app.inject({
      method: 'GET',
      url: `${base()}/${id}/deliveries?limit=1&cursor=${body1.meta.next_cursor}`,
      headers: adminHeaders(),
    });
    const body2 = page2.json();
    assert.equal(body2.data[0].outcome, 'failure');
    assert.equal(body2.data[0].status, 500);
    assert.equal(body2.meta.next_cursor, null);
    const shown = (await ctx.app.inject({ method: 'GET', url: `${base()}/${id}`, headers: adminHeaders() })).json()
      .data;
    assert.equal(shown.lag, 0);
    assert.equal(shown.delivered, 3);
    assert.match(shown.cursor, /^d1\./);
    assert.notEqual(shown.last_success_at, null);
  });

  it('PATCH pauses and resumes; replay from the beginning re-delivers; rotate_secret answers the new secret', async () => {
    const paused = await ctx.app.inject({
      method: 'PATCH',
      url: `${base()}/${id}`,
      headers: adminHeaders(),
      payload: { status: 'paused', name: 'orders (paused)' },
    });
    assert.equal(paused.statusCode, 200, paused.body);
    assert.equal(paused.json().data.status, 'paused');
    const replay = await ctx.app.inject({
      method: 'POST',
      url: `${base()}/${id}/replay`,
      headers: adminHeaders(),
      payload: { from: 'beginning' },
    });
    assert.equal(replay.statusCode, 200, replay.body);
    assert.equal(replay.json().data.lag, 3);
    await deliver();
    assert.equal(receiver.accepted.length, 3, 'paused: nothing sent');
    const rotated = await ctx.app.inject({
      method: 'POST',
      url: `${base()}/${id}/rotate_secret`,
      headers: adminHeaders(),
    });
    assert.equal(rotated.statusCode, 200, rotated.body);
    assert.match(rotated.json().data.secret, /^whsec_/);
    assert.notEqual(rotated.json().data.previous_secret_until, null);
    receiver.secrets = [rotated.json().data.secret, ...receiver.secrets];
    const resumed = await ctx.app.inject({
      method: 'PATCH',
      url: `${base()}/${id}`,
      headers: adminHeaders(),
      payload: { status: 'active' },
    });
    assert.equal(resumed.json().data.status, 'active');
    await deliver();
    assert.equal(receiver.accepted.length, 6);
    assert.deepEqual(receiver.requests.at(-1)!.verifiedBy, [0, 1]);
    const badReplay = await ctx.app.inject({
      method: 'POST',
      url: `${base()}/${id}/replay`,
      headers: adminHeaders(),
      payload: { from: 'nonsense' },
    });
    assert.equal(badReplay.statusCode, 400);
  });

  it('/readyz lists a disabled destination and stays 200', async () => {
    receiver.fallback = { status: 410 };
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(product.eventsKey),
      payload: { subject_type: 'user', subject_id: 'g', event_type: 'order', action: 'placed' },
    });
    await deliver();
    const ready = await ctx.app.inject({ method: 'GET', url: '/readyz' });
    assert.equal(ready.statusCode, 200);
    const { destinations } = ready.json().data;
    assert.equal(destinations.disabled, 1);
    assert.equal(destinations.disabled_destinations[0].id, id);
    assert.match(destinations.disabled_destinations[0].reason, /410/);
    const metrics = await ctx.app.inject({ method: 'GET', url: '/metrics' });
    assert.match(metrics.body, new RegExp(`inlet_destination_messages_delivered_total\\{destination="${id}"\\} 6`));
    assert.match(
      metrics.body,
      new RegExp(`inlet_destination_lag_messages\\{destination="${id}",status="disabled"\\} 1`),
    );
    assert.match(metrics.body, /inlet_destination_failed_attempts_total/);
    receiver.fallback = { status: 204 };
  });

  it('DELETE answers 204, then 404', async () => {
    const res = await ctx.app.inject({ method: 'DELETE', url: `${base()}/${id}`, headers: adminHeaders() });
    assert.equal(res.statusCode, 204);
    assert.equal(
      (await ctx.app.inject({ method: 'DELETE', url: `${base()}/${id}`, headers: adminHeaders() })).statusCode,
      404,
    );
  });

  it('OpenAPI documents every destinations route', async () => {
    const doc = (await ctx.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const p = '/admin/v1/products/{product_id}/destinations';
    for (const [method, path] of [
      ['post', p],
      ['get', p],
      ['get', `${p}/{destination_id}`],
      ['patch', `${p}/{destination_id}`],
      ['delete', `${p}/{destination_id}`],
      ['post', `${p}/{destination_id}/replay`],
      ['post', `${p}/{destination_id}/rotate_secret`],
      ['get', `${p}/{destination_id}/deliveries`],
    ] as const) {
      assert.ok(doc.paths[path]?.[method], `${method} ${path}`);
    }
  });
});
