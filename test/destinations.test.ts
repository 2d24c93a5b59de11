// Destinations (events-out §6, §7) on the backend under test: webhook delivery per Standard Webhooks to
// a fake receiver that verifies every request with the official package; order and the cursor; retries
// on a controllable clock (no real waiting); Retry-After; 410 disables; re-enable resumes from the cursor;
// auto-disable after 24 h; secret rotation; batching; identity messages; redirects; the SSRF guard.
import { strict as assert } from 'node:assert';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { DestinationKind, SendOutcome } from '../src/services/destinations/kind.js';
import { RETRY_DELAYS_MS } from '../src/services/destinations/retries.js';
import { createDestinationService, DESTINATION_KINDS } from '../src/services/destinations/service.js';
import { createOutboundGuard } from '../src/services/outbound-guard.js';
import { destinationMessage } from '../src/resources/destination-messages.js';
import { createMetrics } from '../src/services/metrics.js';
import { bearer, createTestApp, type TestContext } from './helpers.js';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.js';

let ctx: TestContext;
let receiver: WebhookReceiver;
const cleanups: Array<() => Promise<void>> = [];

before(async () => {
  // A frozen clock: the retries' waits (at least 1 s, with jitter) pass only when the test advances it.
  ctx = await createTestApp({ destinationTimeoutMs: 500 }, { frozenClock: true });
  receiver = await startWebhookReceiver();
});
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await receiver.close();
  await ctx.close();
});

async function send(key: string, n: number, prefix: string, extra: Record<string, unknown> = {}): Promise<string[]> {
  const uuids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(key),
      payload: {
        subject_type: 'user',
        subject_id: `u${i}`,
        event_type: 'order',
        action: 'placed',
        properties: { i, prefix },
        ...extra,
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    uuids.push(res.json().data.uuid as string);
  }
  return uuids;
}

/** Runs delivery passes until nothing more happens now (the clock does not move by itself here). */
async function deliver(): Promise<void> {
  const d = ctx.services.destinations;
  for (let i = 0; i < 3; i++) {
    await d.tick();
    await d.idle();
  }
}

const evtId = (uuid: string) => `evt_${uuid.replace(/-/g, '')}`;

async function webhook(productId: string, extra: Record<string, unknown> = {}) {
  const created = await ctx.services.destinations.create(productId, {
    type: 'webhook',
    name: 'hook',
    url: receiver.url,
    ...extra,
  });
  receiver.secrets = [created.secret!];
  return created;
}

function reset(): void {
  receiver.requests.length = 0;
  receiver.accepted.length = 0;
  receiver.countById.clear();
  receiver.script.length = 0;
  receiver.fallback = { status: 204 };
  receiver.unverified = 0;
}

describe('destinations: webhook delivery', () => {
  it('delivers every event after the start, in position order, signed per Standard Webhooks, and moves the cursor', async () => {
    reset();
    const product = await ctx.product('deliver');
    await send(product.eventsKey, 2, 'before'); // before the destination: "start": "now" skips them
    const { destination, secret } = await webhook(product.id);
    assert.match(secret!, /^whsec_[A-Za-z0-9+/]{43}=$/);
    const uuids = await send(product.eventsKey, 5, 'after');
    await deliver();
    assert.equal(receiver.unverified, 0);
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      uuids.map(evtId),
    );
    const first = receiver.requests[0]!;
    assert.equal(first.headers['content-type'], 'application/json');
    assert.match(String(first.headers['user-agent']), /^Inlet\//);
    assert.equal(first.webhookId, evtId(uuids[0]!));
    assert.match(String(first.headers['webhook-signature']), /^v1,[A-Za-z0-9+/=]+$/);
    const message = receiver.accepted[0]!;
    assert.equal(message.type, 'event.created');
    assert.equal((message.data as { uuid: string }).uuid, uuids[0]);
    assert.equal((message.data as { canonical_name: string }).canonical_name, 'order_placed');
    assert.equal(message.timestamp, (message.data as { received_at: string }).received_at);
    const shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.lag, 0);
    assert.equal(shown.delivered, 5);
    assert.notEqual(shown.lastSuccessAt, null);
    const log = await ctx.services.destinations.deliveries(product.id, destination.id, 10);
    assert.equal(log.length, 5);
    assert.deepEqual(log[0]!.messageIds, [evtId(uuids[4]!)]); // newest first
    assert.equal(log[0]!.status, 204);
  });

  it('retries a failing receiver per the schedule on the clock, honours Retry-After, then delivers everything in order with the same webhook-id', async () => {
    reset();
    const product = await ctx.product('retry');
    const { destination } = await webhook(product.id);
    receiver.script.push({ status: 500 }, { status: 500 }, { status: 429, retryAfter: '120' });
    const uuids = await send(product.eventsKey, 3, 'retry');
    await deliver();
    assert.equal(receiver.requests.length, 1, 'one attempt, then a wait');
    let shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.consecutiveFailures, 1);
    const wait1 = shown.nextAttemptAt! - ctx.clock.now();
    assert.ok(wait1 >= 0 && wait1 <= RETRY_DELAYS_MS[0]!, `first retry within ~5 s, got ${wait1}`);
    assert.match(shown.lastError!, /HTTP 500/);
    ctx.clock.advance(RETRY_DELAYS_MS[0]! + 1);
    await deliver();
    assert.equal(receiver.requests.length, 2);
    shown = await ctx.services.destinations.show(product.id, destination.id);
    const wait2 = shown.nextAttemptAt! - ctx.clock.now();
    assert.ok(wait2 >= 0 && wait2 <= RETRY_DELAYS_MS[1]!, `second retry within ~30 s, got ${wait2}`);
    ctx.clock.advance(RETRY_DELAYS_MS[1]! + 1);
    await deliver();
    assert.equal(receiver.requests.length, 3, 'third attempt answered 429 Retry-After: 120');
    shown = await ctx.services.destinations.show(product.id, destination.id);
    const wait3 = shown.nextAttemptAt! - ctx.clock.now();
    assert.ok(wait3 >= 119_000 && wait3 <= 120_000, `Retry-After honoured, got ${wait3}`);
    ctx.clock.advance(60_000);
    await deliver();
    assert.equal(receiver.requests.length, 3, 'not before Retry-After');
    ctx.clock.advance(61_000);
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      uuids.map(evtId),
    );
    // Every attempt of the first message carried the same webhook-id.
    assert.deepEqual(new Set(receiver.requests.slice(0, 4).map((r) => r.webhookId)), new Set([evtId(uuids[0]!)]));
    assert.equal(receiver.countById.get(evtId(uuids[0]!)), 4);
    shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.consecutiveFailures, 0);
    assert.equal(shown.lag, 0);
  });

  it('410 disables at once; re-enabling resumes from the cursor with nothing skipped', async () => {
    reset();
    const product = await ctx.product('gone');
    const { destination } = await webhook(product.id);
    const first = await send(product.eventsKey, 2, 'a');
    await deliver();
    receiver.fallback = { status: 410 };
    const more = await send(product.eventsKey, 3, 'b');
    await deliver();
    let shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.status, 'disabled');
    assert.match(shown.disabledReason!, /410/);
    assert.equal(shown.lag, 3);
    const summary = await ctx.services.destinations.summary();
    assert.ok(summary.disabled.some((d) => d.id === destination.id));
    const attempts = receiver.requests.length;
    ctx.clock.advance(3_600_000);
    await deliver();
    assert.equal(receiver.requests.length, attempts, 'a disabled destination gets nothing');
    receiver.fallback = { status: 200 };
    await ctx.services.destinations.update(product.id, destination.id, { status: 'active' });
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      [...first, ...more].map(evtId),
    );
    shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.status, 'active');
    assert.equal(shown.disabledReason, null);
  });

  it('resume on a destination waiting for its retry sends at once', async () => {
    reset();
    const product = await ctx.product('resume-now');
    const { destination } = await webhook(product.id);
    receiver.script.push({ status: 503 });
    const [uuid] = await send(product.eventsKey, 1, 'n');
    await deliver();
    let shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.ok(shown.nextAttemptAt! > ctx.clock.now(), 'waiting for a retry');
    await ctx.services.destinations.update(product.id, destination.id, { status: 'active' });
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      [evtId(uuid!)],
    );
    shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(shown.consecutiveFailures, 0);
  });

  it('a receiver that never answers times out; after 24 h without a success the destination is disabled with the reason', async () => {
    reset();
    const product = await ctx.product('timeout');
    const { destination } = await webhook(product.id);
    receiver.fallback = 'timeout';
    await send(product.eventsKey, 1, 't');
    await deliver();
    let shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.match(shown.lastError!, /timed out after 500 ms/);
    // Hours pass (every retry is due within an hour): about five attempts, each a 500 ms timeout.
    for (let step = 0; step < 8 && shown.status === 'active'; step++) {
      ctx.clock.advance(6 * 3_600_000);
      await deliver();
      shown = await ctx.services.destinations.show(product.id, destination.id);
    }
    assert.equal(shown.status, 'disabled');
    assert.match(shown.disabledReason!, /no successful delivery for 24 h/);
    assert.ok(receiver.requests.length >= 4 && receiver.requests.length <= 8, `attempts: ${receiver.requests.length}`);
  });

  it('a redirect is not followed: it is a failure and the other server sees nothing', async () => {
    reset();
    const other = await startWebhookReceiver();
    cleanups.push(() => other.close());
    const product = await ctx.product('redirect');
    const { destination } = await webhook(product.id);
    receiver.fallback = { status: 307, location: other.url };
    await send(product.eventsKey, 1, 'r');
    await deliver();
    const shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.match(shown.lastError!, /HTTP 307 \(redirects are not followed\)/);
    assert.equal(other.connections, 0);
    await ctx.services.destinations.update(product.id, destination.id, { status: 'paused' });
  });

  it('rotating the secret sends both signatures, each verifying with its secret', async () => {
    reset();
    const product = await ctx.product('rotate');
    const { destination, secret: oldSecret } = await webhook(product.id);
    const { secret: newSecret } = await ctx.services.destinations.rotateSecret(product.id, destination.id);
    receiver.secrets = [newSecret, oldSecret!];
    await send(product.eventsKey, 1, 'r');
    await deliver();
    const request = receiver.requests[0]!;
    assert.equal(String(request.headers['webhook-signature']).split(' ').length, 2);
    assert.deepEqual(request.verifiedBy, [0, 1]);
    // After 24 h only the new secret signs.
    ctx.clock.advance(24 * 3_600_000 + 1000);
    await send(product.eventsKey, 1, 'r2');
    await deliver();
    assert.deepEqual(receiver.requests[1]!.verifiedBy, [0]);
    assert.equal(String(receiver.requests[1]!.headers['webhook-signature']).split(' ').length, 1);
  });

  it('batches up to max_messages with a webhook-id derived from the first and last ids; filters by type, name and source', async () => {
    reset();
    const product = await ctx.product('batch');
    await webhook(product.id, {
      batch: { max_messages: 3 },
      filter: { canonical_names: ['order_placed'], sources: ['api'] },
    });
    const uuids = await send(product.eventsKey, 7, 'b');
    await send(product.eventsKey, 2, 'other', { event_type: 'page', action: 'viewed' });
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      uuids.map(evtId),
    );
    assert.deepEqual(
      receiver.requests.map((r) => r.messages.length),
      [3, 3, 1],
    );
    const body = JSON.parse(receiver.requests[0]!.body) as { type: string; data: unknown[] };
    assert.equal(body.type, 'batch');
    assert.match(receiver.requests[0]!.webhookId, /^bat_/);
    assert.notEqual(receiver.requests[0]!.webhookId, receiver.requests[1]!.webhookId);
  });

  it('two destinations of one product (one shared page read): each gets its messages in order, nothing skipped', async () => {
    reset();
    const product = await ctx.product('two');
    const all = await ctx.services.destinations.create(product.id, {
      type: 'webhook',
      name: 'all',
      url: receiver.url,
      batch: { max_messages: 4 },
    });
    const some = await ctx.services.destinations.create(product.id, {
      type: 'webhook',
      name: 'some',
      url: receiver.url,
      filter: { canonical_names: ['order_placed'] },
    });
    receiver.secrets = [all.secret!, some.secret!];
    const expected: string[] = [];
    const placed: string[] = [];
    for (let round = 0; round < 3; round++) {
      const a = await send(product.eventsKey, 5, `r${round}`);
      const b = await send(product.eventsKey, 3, `p${round}`, { event_type: 'page', action: 'viewed' });
      expected.push(...a, ...b);
      placed.push(...a);
      await deliver();
    }
    const by = (index: number) =>
      receiver.requests
        .filter((r) => r.verifiedBy.includes(index) && r.answered === 204)
        .flatMap((r) => r.messages.map((m) => m.id));
    assert.equal(receiver.unverified, 0);
    assert.deepEqual(by(0), expected.map(evtId));
    assert.deepEqual(by(1), placed.map(evtId));
  });

  it('user.identified and user.merged come in position order with the events around them', async () => {
    reset();
    const product = await ctx.product('identity');
    await webhook(product.id);
    const [e1] = await send(product.eventsKey, 1, 'x');
    const identified = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(product.eventsKey),
      payload: { external_id: 'ada', traits: { plan: 'pro' } },
    });
    assert.equal(identified.statusCode, 201, identified.body);
    // An identify that changes nothing writes no message.
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(product.eventsKey),
      payload: { external_id: 'ada', traits: { plan: 'pro' } },
    });
    const [e2] = await send(product.eventsKey, 1, 'y');
    const merged = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(product.eventsKey),
      payload: { from_external_id: 'anon-1', to_external_id: 'ada' },
    });
    assert.equal(merged.statusCode, 200, merged.body);
    const [e3] = await send(product.eventsKey, 1, 'z');
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.type),
      ['event.created', 'user.identified', 'event.created', 'user.merged', 'event.created'],
    );
    assert.deepEqual(
      [receiver.accepted[0]!.id, receiver.accepted[2]!.id, receiver.accepted[4]!.id],
      [e1, e2, e3].map((u) => evtId(u!)),
    );
    assert.equal((receiver.accepted[1]!.data as { external_id: string }).external_id, 'ada');
    const mergedData = receiver.accepted[3]!.data as {
      from_external_id: string;
      into: { external_id: string; aliases: string[] };
    };
    assert.equal(mergedData.from_external_id, 'anon-1');
    assert.equal(mergedData.into.external_id, 'ada');
    assert.deepEqual(mergedData.into.aliases, ['anon-1']);
    assert.match(receiver.accepted[1]!.id, /^idm_/);
  });

  it('replay rewinds the cursor: the same messages arrive again with the same ids', async () => {
    reset();
    const product = await ctx.product('replay');
    const { destination } = await webhook(product.id, { start: 'beginning' });
    const uuids = await send(product.eventsKey, 3, 'p');
    await deliver();
    await ctx.services.destinations.replay(product.id, destination.id, new Date(Date.now() - 3_600_000).toISOString());
    await deliver();
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      [...uuids, ...uuids].map(evtId),
    );
  });

  it('a replay while a delivery is in flight stands: that delivery does not write its cursor over it', async () => {
    const product = await ctx.product('replay-race');
    // A receiver that holds its second answer until released, and records the webhook-ids it got.
    const ids: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let arrived!: () => void;
    const second = new Promise<void>((resolve) => (arrived = resolve));
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        ids.push(String(req.headers['webhook-id']));
        if (ids.length === 2) {
          arrived();
          void held.then(() => res.writeHead(204).end());
        } else res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const { destination } = await ctx.services.destinations.create(product.id, {
      type: 'webhook',
      name: 'race',
      url,
      start: 'beginning',
    });
    const d = ctx.services.destinations;
    const uuids = await send(product.eventsKey, 1, 'r');
    await deliver(); // the cursor is now after the first event
    uuids.push(...(await send(product.eventsKey, 3, 's')));
    await d.tick(); // a cycle of three sends from that cursor: the first of them is held by the receiver
    await second;
    await d.replay(product.id, destination.id, 'beginning');
    release();
    await d.idle();
    await deliver();
    // The cycle in flight delivered its three, then found the cursor moved and left it: all four again.
    assert.deepEqual(ids, [...uuids, ...uuids].map(evtId), JSON.stringify({ ids, uuids: uuids.map(evtId) }));
    assert.equal((await d.show(product.id, destination.id)).lag, 0);
  });
});

describe('destinations: the outbound guard', () => {
  it('refuses loopback, private, link-local and metadata URLs at creation unless private targets are allowed', async () => {
    const product = await ctx.product('ssrf');
    const strict = createDestinationService(
      ctx.services.storage.destinations,
      createMetrics({ defaultMetrics: false }),
      {
        timeoutMs: 1000,
        disableAfterMs: 86_400_000,
        pollMs: 1000,
        leaseMs: 15_000,
        logRetentionMs: 86_400_000,
        format: destinationMessage,
        guard: createOutboundGuard({ allow: undefined, allowPrivate: false }),
      },
    );
    cleanups.push(() => strict.close());
    for (const url of [
      'http://127.0.0.1:9/x',
      'http://[::1]:9/x',
      'http://10.1.2.3/x',
      'http://192.168.0.1/x',
      'http://169.254.169.254/latest/meta-data',
      'http://localhost:9/x',
    ]) {
      await assert.rejects(
        strict.create(product.id, { type: 'webhook', name: 'x', url }),
        (error: Error & { errors?: Array<{ message: string }> }) => {
          assert.match(error.errors?.[0]?.message ?? '', /refused by the outbound guard/, url);
          return true;
        },
      );
    }
    // The metadata address stays refused even with private targets allowed.
    const lenient = createOutboundGuard({ allow: undefined, allowPrivate: true });
    assert.equal(lenient.refusal('127.0.0.1', '127.0.0.1'), undefined);
    assert.match(lenient.refusal('169.254.169.254', '169.254.169.254')!, /metadata/);
    // The test runner's setting: only loopback.
    const tests = createOutboundGuard({ allow: ['127.0.0.0/8', '::1'], allowPrivate: true });
    assert.match(tests.refusal('example.com', '93.184.216.34')!, /not on INLET_OUTBOUND_ALLOW/);
  });

  it('refuses at connect time too, without a connection attempt', async () => {
    reset();
    const product = await ctx.product('ssrf-connect');
    const { destination } = await webhook(product.id);
    await ctx.services.destinations.update(product.id, destination.id, { status: 'paused' });
    const store = ctx.services.storage.destinations;
    const strict = createDestinationService(store, createMetrics({ defaultMetrics: false }), {
      timeoutMs: 1000,
      disableAfterMs: 86_400_000,
      pollMs: 1000,
      leaseMs: 15_000,
      logRetentionMs: 86_400_000,
      format: destinationMessage,
      guard: createOutboundGuard({ allow: ['10.0.0.0/8'], allowPrivate: true }),
    });
    cleanups.push(() => strict.close());
    await strict.update(product.id, destination.id, { status: 'active' }).catch(() => {});
    await store.update(product.id, destination.id, { status: 'active', updatedAt: new Date().toISOString() });
    await send(product.eventsKey, 1, 's');
    const connections = receiver.connections;
    await strict.tick();
    await strict.idle();
    const shown = await strict.show(product.id, destination.id);
    assert.match(shown.lastError ?? '', /not on INLET_OUTBOUND_ALLOW/);
    assert.equal(receiver.connections, connections, 'no connection was attempted');
    // A refusal is not retried: the destination is disabled at once with the guard's reason.
    assert.equal(shown.status, 'disabled');
    assert.match(shown.disabledReason ?? '', /refused by the outbound guard: .*INLET_OUTBOUND_ALLOW/);
    await strict.tick();
    await strict.idle();
    assert.equal((await strict.deliveries(product.id, destination.id, 10)).length, 1, 'one attempt, no retry');
    await store.update(product.id, destination.id, { status: 'paused', updatedAt: new Date().toISOString() });
  });
});

describe("destinations: a type's driver (services/destinations/kind.ts)", () => {
  it('moves the cursor past the prefix it accepted, logs its sends, and is handed the rest in order', async () => {
    const product = await ctx.product('driver');
    const handed: string[][] = [];
    /** How many messages of the next delivery the type's receiver accepts. */
    let accepts = 3;
    const refused: SendOutcome = { ok: false, status: null, error: 'the test type refused' };
    const testType: DestinationKind = {
      ...DESTINATION_KINDS.webhook,
      check: async () => {},
      driver: () => ({
        batchSize: () => undefined,
        async deliver(_d, messages, context) {
          const wire = messages.map(context.format);
          handed.push(wire.map((m) => m.id));
          const accepted = Math.min(accepts, messages.length);
          if (accepted > 0) context.sent(wire.slice(0, accepted), { ok: true, status: null, error: null }, 1);
          if (accepted === messages.length) return { accepted };
          context.sent(wire.slice(accepted), refused, 1);
          return { accepted, failure: refused };
        },
        prune: async () => {},
        forget: async () => {},
        close: async () => {},
      }),
    };
    const service = createDestinationService(
      ctx.services.storage.destinations,
      createMetrics({ defaultMetrics: false }),
      {
        timeoutMs: 1000,
        disableAfterMs: 86_400_000,
        pollMs: 1000,
        leaseMs: 15_000,
        logRetentionMs: 86_400_000,
        format: destinationMessage,
        clock: ctx.clock,
        random: () => 0,
        kinds: { ...DESTINATION_KINDS, webhook: testType },
      },
    );
    cleanups.push(() => service.close());
    const { destination } = await service.create(product.id, {
      type: 'webhook',
      name: 'test type',
      url: 'https://receiver.invalid/',
      start: 'beginning',
    });
    const ids = (await send(product.eventsKey, 5, 'driver')).map(evtId);
    const pass = async () => {
      await service.tick();
      await service.idle();
    };

    await pass();
    assert.deepEqual(handed, [ids]);
    let shown = await service.show(product.id, destination.id);
    assert.equal(shown.delivered, 3);
    assert.equal(shown.lag, 2, 'the cursor is just after the third message');
    assert.equal(shown.consecutiveFailures, 1);
    assert.equal(shown.lastError, 'the test type refused');
    assert.equal(shown.nextAttemptAt, ctx.clock.now() + 1000, 'retried after the shortest delay (random 0)');
    const log = await service.deliveries(product.id, destination.id, 10);
    assert.deepEqual(
      log.map((d) => [d.outcome, d.messageIds, d.attempt]),
      [
        ['failure', ids.slice(3), 1],
        ['success', ids.slice(0, 3), 1],
      ],
    );

    accepts = Infinity;
    await pass();
    assert.equal(handed.length, 1, 'nothing is handed before the retry is due');
    ctx.clock.advance(1000);
    await pass();
    assert.deepEqual(handed, [ids, ids.slice(3)]);
    shown = await service.show(product.id, destination.id);
    assert.equal(shown.delivered, 5);
    assert.equal(shown.lag, 0);
    assert.equal(shown.consecutiveFailures, 0);
  });
});
