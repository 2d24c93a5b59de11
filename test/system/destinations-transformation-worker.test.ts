// A destination's own transformation run by the delivery worker thread (src/delivery-worker.ts), on the backend
// under test: its function step runs in a sandbox started from that thread, under the same CPU limit (an endless
// loop costs its own message only), `mask` `hash` gives the product's hashes (the same secret), and what its steps
// did reaches the main thread's /metrics.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { startDelivery } from '../../src/delivery.js';
import type { DestinationWorker, WorkerLog } from '../../src/services/destinations/worker.js';
import { adminHeaders, bearer, createTestApp, type TestContext } from '../helpers.js';
import { until } from './support/instances.js';
import { startWebhookReceiver, type WebhookReceiver } from '../fakes/webhook-receiver.js';

let ctx: TestContext;
let receiver: WebhookReceiver;
const log: WorkerLog = { info: () => {}, warn: () => {}, error: () => {} };

before(async () => {
  ctx = await createTestApp({ destinationPollMs: 100, transformFunctionCpuMs: 50 });
  receiver = await startWebhookReceiver();
});
after(async () => {
  await receiver.close();
  await ctx.close();
});

const CODE = `function transform(event, meta) {
  if (event.properties.loop) for (;;) {}
  event.properties.via = meta.route;
  return event;
}`;

describe("destinations: a destination's transformation in the delivery worker", () => {
  it('runs its function in a sandbox of the worker thread, within its CPU limit, and reports to /metrics', async () => {
    const product = await ctx.product('worker-transform');
    const created = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${product.id}/destinations`,
      headers: adminHeaders(),
      payload: {
        type: 'webhook',
        name: 'w',
        url: receiver.url,
        transformation: {
          steps: [
            { kind: 'function', code: CODE },
            { kind: 'mask', paths: ['properties.email'], with: 'hash' },
          ],
        },
      },
    });
    assert.equal(created.statusCode, 201, created.body);
    const destination = created.json().data as { id: string; secret: string };
    receiver.secrets = [destination.secret];
    const schema = ctx.database.postgresSchema;
    const worker = startDelivery(
      ctx.services.destinations,
      ctx.services.config,
      log,
      schema === undefined ? {} : { postgresSchema: schema },
    ) as DestinationWorker;
    assert.ok(worker !== undefined, 'a file or PostgreSQL database delivers in a worker');

    const uuids: string[] = [];
    for (const properties of [{ n: 1, email: 'ada@example.com' }, { n: 2, loop: true }, { n: 3 }]) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(product.eventsKey),
        payload: { subject_type: 'user', subject_id: 'u1', event_type: 'order', action: 'placed', properties },
      });
      assert.equal(res.statusCode, 201, res.body);
      uuids.push(res.json().data.uuid as string);
    }
    await until(() => receiver.accepted.length >= 2, 60_000, 'the two messages the steps keep');

    // The product's own steps would hash the address the same way (one secret per product).
    const tried = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${product.id}/transformation/test`,
      headers: adminHeaders(),
      payload: {
        steps: [{ kind: 'mask', paths: ['properties.email'], with: 'hash' }],
        items: [
          {
            subject_type: 'user',
            subject_id: 'u1',
            event_type: 'order',
            action: 'placed',
            properties: { email: 'ada@example.com' },
          },
        ],
      },
    });
    assert.equal(tried.statusCode, 200, tried.body);
    const hash = tried.json().data[0].output.properties.email as string;
    assert.match(hash, /^[0-9a-f]{64}$/);

    assert.deepEqual(
      receiver.accepted.map((m) => [m.data.uuid, m.data.properties]),
      [
        [uuids[0], { n: 1, email: hash, via: 'destination' }],
        [uuids[2], { n: 3, via: 'destination' }],
      ],
    );
    await until(
      async () => {
        const metrics = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
        return new RegExp(
          `inlet_destination_transformation_items_total\\{destination="${destination.id}",step="0",outcome="error"\\} 1`,
        ).test(metrics);
      },
      5_000,
      'the step counts in /metrics',
    );
    const metrics = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.match(
      metrics,
      new RegExp(
        `inlet_destination_transformation_cpu_seconds_total\\{destination="${destination.id}",kind="function"\\} [0-9.e-]+`,
      ),
    );
    const shown = await ctx.services.destinations.show(product.id, destination.id);
    assert.match(shown.warnings.map((w) => w.message).join('\n'), /step 0 \(function\) failed \(not sent\): .*CPU/);
    assert.equal(shown.lag, 0);
    assert.notEqual(worker.current, undefined);
    await ctx.services.destinations.close();
  });
});
