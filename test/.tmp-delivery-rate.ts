// Ad-hoc (not committed): delivery throughput of a webhook destination (max_messages 100) draining a backlog.
import { createTestApp, bearer } from './helpers.js';
import { startWebhookReceiver } from './fakes/webhook-receiver.js';

const N = Number(process.env.N ?? 20000);
const ctx = await createTestApp({ destinationPollMs: 50 });
const receiver = await startWebhookReceiver();
const product = await ctx.product('rate');
for (let i = 0; i < N; i += 1000) {
  const events = Array.from({ length: 1000 }, (_, j) => ({ subject_type: 'user', subject_id: `u${i + j}`, event_type: 'order', action: 'placed', properties: { i: i + j } }));
  const res = await ctx.app.inject({ method: 'POST', url: '/api/v2/events/batch', headers: bearer(product.eventsKey), payload: { events } });
  if (res.statusCode >= 300) throw new Error(res.body);
}
const created = await ctx.services.destinations.create(product.id, { type: 'webhook', name: 'rate', url: receiver.url, start: 'beginning', batch: { max_messages: 100 } });
receiver.secrets = [created.secret!];
const started = performance.now();
ctx.services.destinations.start();
await receiver.waitForAccepted(N, 300_000);
const s = (performance.now() - started) / 1000;
console.log(`${process.env.INLET_TEST_DIALECT}: ${N} messages delivered in ${s.toFixed(1)} s = ${(N / s).toFixed(0)} msg/s (max_messages 100, verified by standardwebhooks in the same process)`);
await receiver.close();
await ctx.close();
