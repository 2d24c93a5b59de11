// A destination's own transformation (transformations.md §1, §8) through the admin API and real deliveries to
// webhook receivers on loopback: given in POST and PATCH (validated like a product's: 400 with pointers under
// /transformation), shown by GET, removed with null; applied to that destination's copy only (another
// destination and the stored event are untouched); a dropped or failing message is not sent and the cursor
// passes it; failures are counted per step and shown in the destination's warnings; user.identified traits go
// through the steps, and an identifier never carries a value its trait had masked.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { startWebhookReceiver, type ReceivedMessage, type WebhookReceiver } from './fakes/webhook-receiver.js';

let ctx: TestContext;
let masked: WebhookReceiver;
let plain: WebhookReceiver;
let product: { id: string; eventsKey: string };
let maskedId: string;

before(async () => {
  ctx = await createTestApp();
  masked = await startWebhookReceiver();
  plain = await startWebhookReceiver();
  product = await ctx.product('dest-transform');
});
after(async () => {
  await masked.close();
  await plain.close();
  await ctx.close();
});

const base = () => `/admin/v1/products/${product.id}/destinations`;

function admin(method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown) {
  return ctx.app.inject({
    method,
    url,
    headers: adminHeaders(),
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
}

async function deliver(): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await ctx.services.destinations.tick();
    await ctx.services.destinations.idle();
  }
}

async function send(event_type: string, action: string, properties: Record<string, unknown>): Promise<string> {
  const res = await ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events',
    headers: bearer(product.eventsKey),
    payload: { subject_type: 'user', subject_id: 'u1', event_type, action, properties },
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().data.uuid as string;
}

const events = (receiver: WebhookReceiver, from = 0): ReceivedMessage[] =>
  receiver.accepted.slice(from).filter((m) => m.type === 'event.created');

/** The samples of the destination's step counter, as "step/outcome" → value. */
async function stepCounts(destinationId: string): Promise<Map<string, number>> {
  const metric = ctx.services.metrics.registry.getSingleMetric('inlet_destination_transformation_items_total');
  const counts = new Map<string, number>();
  for (const v of (await metric!.get()).values)
    if (v.labels.destination === destinationId) counts.set(`${v.labels.step}/${v.labels.outcome}`, v.value);
  return counts;
}

const STEPS = [
  { kind: 'drop', where: { '==': [{ var: 'event' }, 'page_viewed'] } },
  { kind: 'mask', paths: ['properties.email', 'traits.email'], with: 'redact' },
  { kind: 'rename_property', from: 'properties.plan', to: 'properties.tier' },
  { kind: 'remove', paths: ['properties.secret'] },
];

describe('destination transformations', () => {
  it('POST stores the steps (defaults filled in), GET shows them; a destination without steps shows null', async () => {
    const created = await admin('POST', base(), {
      type: 'webhook',
      name: 'masked',
      url: masked.url,
      transformation: { steps: STEPS },
    });
    assert.equal(created.statusCode, 201, created.body);
    maskedId = created.json().data.id;
    masked.secrets = [created.json().data.secret];
    const shown = (await admin('GET', `${base()}/${maskedId}`)).json().data;
    assert.equal(shown.transformation.steps.length, 4);
    assert.equal(shown.transformation.steps[1].on_error, 'reject');
    assert.deepEqual(shown.transformation.steps[1].paths, ['properties.email', 'traits.email']);
    const other = await admin('POST', base(), { type: 'webhook', name: 'plain', url: plain.url });
    assert.equal(other.statusCode, 201, other.body);
    plain.secrets = [other.json().data.secret];
    assert.equal(other.json().data.transformation, null);
  });

  it("applies the steps to that destination's copy only: masked, renamed, removed, dropped; the stored event and the other destination get it as sent", async () => {
    const kept = await send('order', 'placed', { email: 'ada@example.com', plan: 'pro', secret: 's3', n: 1 });
    await send('page', 'viewed', { email: 'ada@example.com' });
    await deliver();

    const got = events(masked);
    assert.equal(got.length, 1, 'the page_viewed event is dropped for this destination only');
    assert.equal(got[0]!.data.uuid, kept);
    assert.deepEqual(got[0]!.data.properties, { email: '[redacted]', tier: 'pro', n: 1 });
    assert.equal(JSON.stringify(masked.accepted).includes('ada@example.com'), false);

    const untouched = events(plain);
    assert.deepEqual(
      untouched.map((m) => m.data.canonical_name),
      ['order_placed', 'page_viewed'],
    );
    assert.deepEqual(untouched[0]!.data.properties, { email: 'ada@example.com', plan: 'pro', secret: 's3', n: 1 });

    const stored = await admin('GET', `/admin/v1/products/${product.id}/events/${kept}`);
    assert.equal(stored.statusCode, 200, stored.body);
    assert.deepEqual(stored.json().data.properties, { email: 'ada@example.com', plan: 'pro', secret: 's3', n: 1 });

    // The dropped message does not hold the destination back: its cursor is past it.
    const shown = (await admin('GET', `${base()}/${maskedId}`)).json().data;
    assert.equal(shown.lag, 0);
    assert.equal(shown.delivered, 1);
    const counts = await stepCounts(maskedId);
    assert.equal(counts.get('0/dropped'), 1);
    assert.equal(counts.get('1/changed'), 1);
  });

  it('user.identified: the traits go through the steps; an identifier whose trait was masked is left out', async () => {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(product.eventsKey),
      payload: {
        external_id: 'ada',
        traits: { email: 'ada@example.com', name: 'Ada' },
        identifiers: { email: 'ada@example.com', crm: 'c-1' },
      },
    });
    assert.ok(res.statusCode < 300, res.body);
    const from = masked.accepted.length;
    await deliver();
    const identified = masked.accepted.slice(from).find((m) => m.type === 'user.identified');
    assert.ok(identified, 'the user.identified message is delivered');
    assert.deepEqual(identified.data.traits, { email: '[redacted]', name: 'Ada' });
    assert.deepEqual(identified.data.identifiers, { crm: 'c-1' });
    const plainCopy = plain.accepted.find((m) => m.type === 'user.identified');
    assert.equal((plainCopy!.data.identifiers as { email: string }).email, 'ada@example.com');
  });

  it('a function step runs on the messages in the sandbox; a step that fails is not sent (reject) or skipped (skip), counted and shown', async () => {
    const code = [
      'function transform(event, meta) {',
      '  if (event.properties.kill) throw new Error("boom " + event.properties.n);',
      '  if (event.properties.quiet) return null;',
      '  event.properties.seen_by = meta.route;',
      '  return event;',
      '}',
    ].join('\n');
    const patched = await admin('PATCH', `${base()}/${maskedId}`, {
      transformation: {
        steps: [
          { kind: 'function', code },
          { kind: 'set', path: 'event', value: 'not a name', on_error: 'skip' },
        ],
      },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.equal(patched.json().data.transformation.steps[0].kind, 'function');
    const from = masked.accepted.length;
    const ok = await send('order', 'paid', { n: 1, email: 'ada@example.com' });
    await send('order', 'paid', { n: 2, kill: true });
    await send('order', 'paid', { n: 3, quiet: true });
    await deliver();

    const got = events(masked, from);
    assert.deepEqual(
      got.map((m) => m.data.uuid),
      [ok],
    );
    // The mask is gone with the new version: the email is sent as stored; the skipped step changed nothing.
    assert.deepEqual(got[0]!.data.properties, { n: 1, email: 'ada@example.com', seen_by: 'destination' });
    assert.equal(got[0]!.data.canonical_name, 'order_paid');
    const shown = (await admin('GET', `${base()}/${maskedId}`)).json().data;
    assert.equal(shown.lag, 0, 'the failing and dropped messages do not hold the destination back');
    const warnings = shown.warnings.map((w: { message: string }) => w.message).join('\n');
    assert.match(warnings, /transformation step 0 \(function\) failed \(not sent\): .*boom 2/);
    assert.match(warnings, /transformation step 1 \(set\) failed \(skipped\)/);
    const counts = await stepCounts(maskedId);
    assert.equal(counts.get('0/error'), 1);
    assert.equal(counts.get('0/dropped'), 2, 'the page_viewed drop before, and the function returning null now');
    assert.equal(counts.get('1/error'), 1);
  });

  it('refuses invalid steps with 400 and pointers under /transformation, in POST and PATCH', async () => {
    const cases: Array<[string, 'POST' | 'PATCH', unknown, string, RegExp]> = [
      [
        'a path that may not be changed',
        'POST',
        {
          steps: [
            { kind: 'drop', where: true },
            { kind: 'set', path: 'properties.a', value: 1 },
            { kind: 'remove', paths: ['type'] },
          ],
        },
        '/transformation/steps/2/paths/0',
        /may not be changed/,
      ],
      [
        'code that does not compile',
        'POST',
        { steps: [{ kind: 'function', code: 'function transform(e) {\n  return e +;\n}' }] },
        '/transformation/steps/0/code',
        /line 2/,
      ],
      [
        'geoip without a database',
        'PATCH',
        { steps: [{ kind: 'geoip' }] },
        '/transformation/steps/0/kind',
        /INLET_GEOIP_DATABASE/,
      ],
      ['an unknown kind', 'PATCH', { steps: [{ kind: 'explode' }] }, '/transformation/steps/0/kind', /must be one of/],
      ['a field of no transformation', 'PATCH', { steps: [], version: 2 }, '/transformation/version', /not a field/],
    ];
    for (const [what, method, transformation, pointer, message] of cases) {
      const res =
        method === 'POST'
          ? await admin('POST', base(), { type: 'webhook', name: 'bad', url: plain.url, transformation })
          : await admin('PATCH', `${base()}/${maskedId}`, { transformation });
      assert.equal(res.statusCode, 400, `${what}: ${res.body}`);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      const error = problem.errors?.find((e: { pointer: string }) => e.pointer === pointer);
      assert.ok(error, `${what}: ${JSON.stringify(problem.errors)}`);
      assert.match(error.message, message, what);
    }
    // Nothing was created or changed by the refused bodies.
    const listed = (await admin('GET', base())).json().data;
    assert.equal(listed.length, 2);
    assert.equal(listed.find((d: { id: string }) => d.id === maskedId).transformation.steps[0].kind, 'function');
  });

  it('PATCH with null removes the steps: the next message arrives as stored', async () => {
    const removed = await admin('PATCH', `${base()}/${maskedId}`, { transformation: null });
    assert.equal(removed.statusCode, 200, removed.body);
    assert.equal(removed.json().data.transformation, null);
    assert.equal((await admin('GET', `${base()}/${maskedId}`)).json().data.transformation, null);
    const from = masked.accepted.length;
    const uuid = await send('order', 'paid', { n: 9, kill: true, quiet: true });
    await deliver();
    const got = events(masked, from);
    assert.deepEqual(
      got.map((m) => [m.data.uuid, m.data.properties]),
      [[uuid, { n: 9, kill: true, quiet: true }]],
    );
  });

  it('steps this instance cannot run (stored by one with a GeoIP database) hold the destination back, never send untransformed', async () => {
    // As another instance with INLET_GEOIP_DATABASE would have stored them.
    await ctx.services.storage.destinations.update(product.id, maskedId, {
      transformation: { steps: [{ kind: 'geoip', from: 'context.ip', to: 'context.geo', on_error: 'reject' }] },
      updatedAt: new Date().toISOString(),
    });
    const from = masked.accepted.length;
    const uuid = await send('order', 'paid', { n: 10 });
    await deliver();
    assert.equal(masked.accepted.length, from, 'nothing is sent without its steps');
    const held = (await admin('GET', `${base()}/${maskedId}`)).json().data;
    assert.equal(held.lag, 1);
    assert.match(held.last_error, /geoip.*INLET_GEOIP_DATABASE/);
    assert.notEqual(held.next_attempt_at, null);

    const removed = await admin('PATCH', `${base()}/${maskedId}`, { transformation: null, status: 'active' });
    assert.equal(removed.statusCode, 200, removed.body);
    await deliver();
    assert.deepEqual(
      events(masked, from).map((m) => m.data.uuid),
      [uuid],
    );
  });

  it('a masked subject_id is the subject of the Segment item it sends, not beside the userId as received', async () => {
    const own = await ctx.product('dest-transform-subject');
    const receiver = await startWebhookReceiver();
    try {
      const created = await ctx.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${own.id}/destinations`,
        headers: adminHeaders(),
        payload: {
          type: 'webhook',
          name: 'pseudonymous',
          url: receiver.url,
          transformation: { steps: [{ kind: 'mask', paths: ['subject_id'], with: 'hash' }] },
        },
      });
      assert.equal(created.statusCode, 201, created.body);
      receiver.secrets = [created.json().data.secret];
      const marker = 'DESTSUBJECTMARKER';
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/v1/track',
        headers: { authorization: `Basic ${Buffer.from(`${own.eventsKey}:`).toString('base64')}` },
        payload: { event: 'Signed Up', userId: marker, anonymousId: 'anon-7', messageId: 'dest-subject-1' },
      });
      assert.equal(res.statusCode, 200, res.body);
      await deliver();
      const got = events(receiver);
      assert.equal(got.length, 1);
      const data = got[0]!.data as { subject_id: string; original: { userId: string; anonymousId: string } };
      assert.match(data.subject_id, /^[0-9a-f]{64}$/);
      assert.equal(data.original.userId, data.subject_id);
      assert.equal(data.original.anonymousId, 'anon-7', 'only the subject is masked');
      assert.equal(JSON.stringify(got).includes(marker), false, JSON.stringify(got));
    } finally {
      await receiver.close();
    }
  });
});
