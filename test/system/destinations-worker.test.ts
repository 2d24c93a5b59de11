// The delivery worker (src/delivery.ts, src/delivery-worker.ts, services/destinations/worker.ts) on the backend under test: delivery runs in a worker
// thread with its own storage connection while the main thread ingests; admin changes poke it; its metrics
// appear in the main thread's /metrics; a worker that dies is logged and restarted and continues from the
// cursor; close() stops it and releases its leases; the outbound guard applies inside it; the thread starts only
// once a destination exists (created here, or by the CLI in another process).
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { startDelivery } from '../../src/delivery.js';
import type { DestinationWorker, WorkerLog } from '../../src/services/destinations/worker.js';
import { adminHeaders, bearer, createTestApp, type TestContext } from '../helpers.js';
import { until } from './support/instances.js';
import { cliEnv, inlet } from '../support/cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../fakes/webhook-receiver.js';

let ctx: TestContext;
let receiver: WebhookReceiver;
const logged: Array<{ level: string; object: object; message: string }> = [];
const log: WorkerLog = {
  info: (object, message) => logged.push({ level: 'info', object, message }),
  warn: (object, message) => logged.push({ level: 'warn', object, message }),
  error: (object, message) => logged.push({ level: 'error', object, message }),
};

before(async () => {
  ctx = await createTestApp({ destinationPollMs: 100, destinationTimeoutMs: 2_000 });
  receiver = await startWebhookReceiver();
});
after(async () => {
  await receiver.close();
  await ctx.close();
});

async function send(key: string, n: number, prefix: string): Promise<string[]> {
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
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    uuids.push(res.json().data.uuid as string);
  }
  return uuids;
}

const evtId = (uuid: string) => `evt_${uuid.replace(/-/g, '')}`;

describe('destinations: the delivery worker', () => {
  it('starts with the first destination (one the CLI created), delivers from the worker thread, continues after a crash of the worker, reports its metrics to /metrics, and stops cleanly', async () => {
    const product = await ctx.product('worker');
    const schema = ctx.database.postgresSchema;
    const worker = startDelivery(
      ctx.services.destinations,
      ctx.services.config,
      log,
      schema === undefined ? {} : { postgresSchema: schema },
    ) as DestinationWorker;
    assert.ok(worker !== undefined, 'a file or PostgreSQL database delivers in a worker');
    // No destination yet: no thread (it would hold a V8 isolate and a storage connection for nothing).
    await until(() => logged.some((l) => l.message.includes('none yet')), 10_000, 'the note that the worker waits');
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(worker.current, undefined);
    assert.equal(
      logged.some((l) => l.message.includes('delivery worker started')),
      false,
    );

    // Created by an operator's `inlet` command (its own services: no poke reaches this process): found by the next check.
    const created = await inlet(
      cliEnv(ctx.database),
      'destinations',
      'create',
      '--product',
      product.id,
      '--type',
      'webhook',
      '--name',
      'w',
      '--url',
      receiver.url,
      '--max-messages',
      '3',
      '--json',
    );
    assert.equal(created.code, 0, created.err);
    const destination = JSON.parse(created.out).data as { id: string; secret: string };
    receiver.secrets = [destination.secret];
    await until(() => logged.some((l) => l.message.includes('delivery worker started')), 60_000, 'the worker to start');
    // Delivery is background work: on Linux its thread runs at nice 10 (INLET_DESTINATIONS_WORKER_NICE), while
    // the thread that serves requests, and libuv's pool it shares, keep the process's priority.
    if (process.platform === 'linux') {
      const started = logged.find((l) => l.message.includes('delivery worker started'))!.object as {
        tid: number;
        nice?: number;
      };
      assert.equal(started.nice, 10);
      const niceOf = (tid: number | string) =>
        Number(readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
      assert.equal(niceOf(started.tid), 10, 'the worker thread');
      assert.equal(niceOf(process.pid), 0, 'the main thread');
      const others = readdirSync('/proc/self/task').filter((tid) => Number(tid) !== started.tid && niceOf(tid) !== 0);
      assert.deepEqual(others, [], 'no other thread of the process was lowered');
    }
    const first = await send(product.eventsKey, 7, 'first');
    await until(() => receiver.accepted.length >= 7, 20_000, 'the first messages');
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      first.map(evtId),
    );
    assert.equal(receiver.unverified, 0);
    const shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.equal(
      shown.leaseHolder,
      ctx.services.destinations.holder,
      'the worker holds the lease under this process name',
    );

    // A crash of the worker thread: logged, restarted after a backoff, and delivery continues from the cursor.
    await worker.current!.terminate();
    await until(
      () =>
        worker.restarts === 1 && logged.some((l) => l.level === 'error' && l.message.includes('exited unexpectedly')),
      5_000,
      'the crash to be logged',
    );
    const second = await send(product.eventsKey, 5, 'second');
    // Distinct ids: a batch the crash interrupted after the receiver took it is delivered again (at least once).
    await until(() => new Set(receiver.accepted.map((m) => m.id)).size >= 12, 60_000, 'delivery after the restart');
    const firstArrivals = [...new Set(receiver.accepted.map((m) => m.id))];
    assert.deepEqual(firstArrivals, [...first, ...second].map(evtId), 'in order, nothing skipped');

    // The worker's reports are forwarded to this thread's metrics (sent every 100 ms at most).
    await until(
      async () => {
        const metrics = await ctx.app.inject({ method: 'GET', url: '/metrics' });
        const match = new RegExp(
          `inlet_destination_messages_delivered_total\\{destination="${destination.id}"\\} (\\d+)`,
        ).exec(metrics.body);
        return match !== null && Number(match[1]) >= 5; // a crash may lose the reports of the turn it died in
      },
      5_000,
      'the delivered counter in /metrics',
    );
    const metrics = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.match(
      metrics,
      new RegExp(`inlet_destination_attempt_duration_seconds_count\\{destination="${destination.id}"\\} [1-9]`),
    );
    assert.match(
      metrics,
      new RegExp(`inlet_destination_delivery_latency_seconds_count\\{destination="${destination.id}"\\} [1-9]`),
    );
    assert.match(metrics, /inlet_destination_worker_restarts_total 1/);

    // close(): the worker stops, releases its leases, and nothing is delivered after it.
    const thread = worker.current!;
    const exited = new Promise((resolve) => thread.once('exit', resolve));
    await ctx.services.destinations.close();
    await exited;
    const after = await ctx.services.storage.destinations.getById(destination.id);
    assert.equal(after!.leaseHolder, null, 'the lease was released');
    assert.equal(after!.delivered >= 12, true);
    assert.equal(worker.restarts, 1, 'a stop is not a crash');
    const count = receiver.accepted.length;
    await send(product.eventsKey, 2, 'after-stop');
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(receiver.accepted.length, count);
  });
});

describe('destinations: the delivery worker starts with the first destination', () => {
  it('a destination created through this process (the admin API) starts the thread at once, not at the next check', async () => {
    const local = await createTestApp({ destinationPollMs: 600_000 });
    try {
      const product = await local.product('poked');
      const schema = local.database.postgresSchema;
      const mine: typeof logged = [];
      const worker = startDelivery(
        local.services.destinations,
        local.services.config,
        { info: (o, m) => mine.push({ level: 'info', object: o, message: m }), warn: log.warn, error: log.error },
        schema === undefined ? {} : { postgresSchema: schema },
      ) as DestinationWorker;
      await until(() => mine.some((l) => l.message.includes('none yet')), 10_000, 'the note that the worker waits');
      const res = await local.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${product.id}/destinations`,
        headers: adminHeaders(),
        payload: { type: 'webhook', name: 'p', url: receiver.url },
      });
      assert.equal(res.statusCode, 201, res.body);
      // Well before the next check (10 minutes away): on a loaded machine a thread takes seconds to start.
      await until(
        () => mine.some((l) => l.message.includes('delivery worker started')),
        120_000,
        'the worker to start',
      );
      assert.notEqual(worker.current, undefined);
    } finally {
      await local.close();
    }
  });
});

describe('destinations: the outbound guard in the delivery worker', () => {
  it('refuses a loopback target at connect time when private targets are not allowed', async () => {
    const local = await createTestApp({ destinationPollMs: 100 });
    try {
      const product = await local.product('guarded');
      // Created while allowed (the main thread's guard), then delivered by a worker whose settings refuse it.
      const { destination } = await local.services.destinations.create(product.id, {
        type: 'webhook',
        name: 'g',
        url: receiver.url,
      });
      const res = await local.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(product.eventsKey),
        payload: { subject_type: 'user', subject_id: 'u', event_type: 'order', action: 'placed' },
      });
      assert.equal(res.statusCode, 201);
      const before = receiver.connections;
      const schema = local.database.postgresSchema;
      startDelivery(
        local.services.destinations,
        { ...local.services.config, outboundAllowPrivate: false, outboundAllow: undefined },
        log,
        schema === undefined ? {} : { postgresSchema: schema },
      );
      await until(
        async () => (await local.services.destinations.show(product.id, destination.id)).lastError !== null,
        60_000,
        'the refused attempt',
      );
      const shown = await local.services.destinations.show(product.id, destination.id);
      assert.match(shown.lastError!, /outbound|refused|not allowed|private|loopback/i);
      assert.equal(receiver.connections, before, 'no connection was made');
      assert.equal(shown.delivered, 0);
    } finally {
      await local.close();
    }
  });
});
