// NATS JetStream destination (events-out §6, §7) against a nats-server of this test's own
// (`nats-server -js -sd <tmp>` on a free port): subject templates, Nats-Msg-Id = the message id, the cursor
// moved only after the publish acks; the server killed during delivery and started again → every message
// is in the stream exactly once, in order; a destination's own transformation shapes what is published.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { adminHeaders, bearer, createTestApp, type TestContext } from '../helpers.js';
import { startNatsServer, type TestNatsServer } from './support/nats-server.js';

let ctx: TestContext;
let nats: TestNatsServer;
let nc: NatsConnection | undefined;

before(async () => {
  nats = await startNatsServer();
  ctx = await createTestApp({ destinationTimeoutMs: 2000 });
});
after(async () => {
  await nc?.close().catch(() => {});
  await ctx?.close();
  await nats?.close();
});

async function manager(): Promise<JetStreamManager> {
  nc = await connect({ servers: nats.url });
  return jetstreamManager(nc);
}

async function send(key: string, from: number, n: number, name = 'order'): Promise<string[]> {
  const uuids: string[] = [];
  for (let i = from; i < from + n; i++) {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(key),
      payload: { subject_type: 'user', subject_id: `u${i}`, event_type: name, action: 'placed', properties: { i } },
    });
    assert.equal(res.statusCode, 201, res.body);
    uuids.push(res.json().data.uuid as string);
  }
  return uuids;
}

async function deliver(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await ctx.services.destinations.tick();
    await ctx.services.destinations.idle();
  }
}

/** Every message of the stream in order: its subject and Nats-Msg-Id. */
async function streamContents(
  jsm: JetStreamManager,
  stream: string,
): Promise<Array<{ subject: string; id: string; type: string }>> {
  const info = await jsm.streams.info(stream);
  const out: Array<{ subject: string; id: string; type: string }> = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const message = await jsm.streams.getMessage(stream, { seq });
    if (message === null) continue;
    out.push({
      subject: message.subject,
      id: message.header.get('Nats-Msg-Id'),
      type: (message.json() as { type: string }).type,
    });
  }
  return out;
}

const evtId = (uuid: string) => `evt_${uuid.replace(/-/g, '')}`;

describe('NATS JetStream destination', () => {
  it('publishes with the subject template and Nats-Msg-Id; survives nats-server killed and restarted mid-delivery: each message exactly once, in order', async () => {
    const jsm = await manager();
    await jsm.streams.add({ name: 'INLET', subjects: ['inlet.>'], duplicate_window: 120 * 1_000_000_000 });
    const product = await ctx.product('nats');
    const { destination } = await ctx.services.destinations.create(product.id, {
      type: 'nats',
      name: 'stream',
      servers: [nats.url],
      subject: 'inlet.{product_id}.{canonical_name}',
      batch: { max_messages: 20 },
    });
    const first = await send(product.eventsKey, 0, 30);
    await deliver();
    let contents = await streamContents(jsm, 'INLET');
    assert.deepEqual(
      contents.map((m) => m.id),
      first.map(evtId),
    );
    assert.equal(contents[0]!.subject, `inlet.${product.id}.order_placed`);
    assert.equal(contents[0]!.type, 'event.created');

    // More events; the server dies while they are being delivered; delivery fails and is retried (the cursor stays).
    await nc!.close();
    nc = undefined;
    const second = await send(product.eventsKey, 30, 25);
    const delivering = deliver();
    await nats.kill();
    await delivering;
    let shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.ok(shown.consecutiveFailures >= 1, 'a failed attempt while NATS is down');
    assert.match(shown.lastError ?? '', /NATS/);
    assert.equal(shown.lag, 25);

    // Back up: the retry delivers the rest; nothing twice (JetStream drops a repeated Nats-Msg-Id).
    await nats.start();
    for (let i = 0; i < 10 && shown.lag > 0; i++) {
      ctx.clock.advance(3_600_000);
      await deliver();
      shown = await ctx.services.destinations.show(product.id, destination.id);
      if (shown.lag > 0) await new Promise((resolve) => setTimeout(resolve, 500));
    }
    assert.equal(shown.lag, 0, `lag after restart: ${shown.lag}, last error ${shown.lastError}`);
    contents = await streamContents(await manager(), 'INLET');
    assert.deepEqual(
      contents.map((m) => m.id),
      [...first, ...second].map(evtId),
    );
    assert.equal(new Set(contents.map((m) => m.id)).size, contents.length, 'each message exactly once');

    // A re-delivery of published messages (a replay) is dropped by JetStream's duplicate window.
    await ctx.services.destinations.replay(product.id, destination.id, 'beginning');
    await deliver();
    contents = await streamContents(await manager(), 'INLET');
    assert.equal(contents.length, 55);
  });

  it("publishes the destination's own transformed copy: masked, renamed (its subject too), dropped ones not at all", async () => {
    const jsm = await manager();
    await jsm.streams.add({ name: 'SHAPED', subjects: ['shaped.>'] });
    const product = await ctx.product('nats-steps');
    const created = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${product.id}/destinations`,
      headers: adminHeaders(),
      payload: {
        type: 'nats',
        name: 'shaped',
        servers: [nats.url],
        subject: 'shaped.{canonical_name}',
        transformation: {
          steps: [
            { kind: 'drop', where: { '==': [{ var: 'properties.i' }, 1] } },
            { kind: 'mask', paths: ['properties.email'], with: 'redact' },
            { kind: 'rename_event', to: 'purchase.done', where: { '==': [{ var: 'properties.i' }, 2] } },
          ],
        },
      },
    });
    assert.equal(created.statusCode, 201, created.body);
    const uuids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(product.eventsKey),
        payload: { subject_type: 'user', subject_id: 'u', event: 'order.placed', properties: { i, email: 'e@x.io' } },
      });
      assert.equal(res.statusCode, 201, res.body);
      uuids.push(res.json().data.uuid as string);
    }
    await deliver();
    const info = await jsm.streams.info('SHAPED');
    const published: Array<{ subject: string; id: string; name: string; properties: unknown }> = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const message = await jsm.streams.getMessage('SHAPED', { seq });
      const body = message!.json() as { data: { canonical_name: string; properties: unknown } };
      published.push({
        subject: message!.subject,
        id: message!.header.get('Nats-Msg-Id'),
        name: body.data.canonical_name,
        properties: body.data.properties,
      });
    }
    assert.deepEqual(published, [
      {
        subject: 'shaped.order_placed',
        id: evtId(uuids[0]!),
        name: 'order_placed',
        properties: { i: 0, email: '[redacted]' },
      },
      {
        subject: 'shaped.purchase_done',
        id: evtId(uuids[2]!),
        name: 'purchase_done',
        properties: { i: 2, email: '[redacted]' },
      },
    ]);
    const shown = await ctx.services.destinations.show(product.id, created.json().data.id);
    assert.equal(shown.lag, 0, 'the dropped message does not hold the cursor');
  });

  it('refuses NATS servers outside the outbound guard at creation', async () => {
    const product = await ctx.product('nats-guard');
    await assert.rejects(
      ctx.services.destinations.create(product.id, {
        type: 'nats',
        name: 'x',
        servers: ['nats://10.9.8.7:4222'],
        subject: 'inlet.x',
      }),
      (error: Error & { errors?: Array<{ message: string }> }) =>
        /outbound guard/.test(error.errors?.[0]?.message ?? ''),
    );
  });
});
