// Destinations under crashes (events-out §6, §7), with the real server as a child process:
// - kill -9 during sustained ingest and delivery, twice, then a restart: every acknowledged event arrives
//   at the receiver at least once, in position order (first arrivals), every request verifies with the
//   official standardwebhooks package, and a re-delivery carries the same webhook-id;
// - PostgreSQL, two instances: one deliverer per destination (the lease); kill -9 of its instance and the
//   other takes over within 30 s.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServices } from '../../src/services.js';
import { createTestServices, dialect, testConfig, testDatabase, type TestDatabase } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { startWebhookReceiver, type WebhookReceiver } from '../fakes/webhook-receiver.js';
import { sendEvents, serverEnv, until as untilDone } from './support/instances.js';

async function seed(
  database: TestDatabase,
  receiver: WebhookReceiver,
): Promise<{ productId: string; key: string; destinationId: string }> {
  const { services } = await createTestServices({}, database);
  const product = await services.keys.createProduct('Delivery');
  const created = await services.keys.createKey(product.id, { kind: 'events' });
  const destination = await services.destinations.create(product.id, {
    type: 'webhook',
    name: 'crash',
    url: receiver.url,
    start: 'beginning',
  });
  receiver.secrets = [destination.secret!];
  await services.close();
  return { productId: product.id, key: created.key, destinationId: destination.destination.id };
}

/** Sends events from `workers` loops until stopped or the server is gone; records the acknowledged uuids. */
function load(server: ServerProcess, key: string, workers: number, acknowledged: Set<string>) {
  return sendEvents(server, key, workers, acknowledged, (n) => ({
    event: 'delivery.checked',
    subject_type: 'user',
    subject_id: `u${n}`,
  }));
}

const until = (check: () => boolean | Promise<boolean>, timeoutMs: number, what: string) =>
  untilDone(check, timeoutMs, what, 50);

/** The product's events in position order (their message ids). */
async function positionOrder(database: TestDatabase, productId: string): Promise<string[]> {
  const services = await createServices(testConfig(database.databaseUrl), {
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
    defaultMetrics: false,
  });
  try {
    const ids: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await services.storage.events.page({
        productId,
        filter: {},
        order: 'asc',
        limit: 1000,
        ...(after === undefined ? {} : { after }),
      });
      ids.push(...page.events.map((e) => `evt_${e.id.replace(/-/g, '')}`));
      if (page.next === null) return ids;
      after = page.next;
    }
  } finally {
    await services.close();
  }
}

describe(`destinations under crashes (${dialect})`, () => {
  const databases: TestDatabase[] = [];
  const servers: ServerProcess[] = [];
  const receivers: WebhookReceiver[] = [];
  after(async () => {
    for (const server of servers) server.child.kill('SIGKILL');
    for (const receiver of receivers) await receiver.close();
    for (const database of databases) await database.drop();
  });

  test('kill -9 twice during ingest and delivery: every message at least once, in order, signed, same webhook-id on re-delivery', async () => {
    const receiver = await startWebhookReceiver();
    receivers.push(receiver);
    const database = testDatabase();
    databases.push(database);
    const { productId, key } = await seed(database, receiver);
    const acknowledged = new Set<string>();
    for (let round = 0; round < 2; round++) {
      const server = await startServerProcess(serverEnv(database), 60_000);
      servers.push(server);
      const traffic = load(server, key, 8, acknowledged);
      const target = acknowledged.size + 300;
      // Killed while events arrive and are being delivered.
      await until(
        () => acknowledged.size >= target && receiver.accepted.length > 0,
        60_000,
        `${target} acknowledged events`,
      );
      server.child.kill('SIGKILL');
      await server.exited;
      await traffic.stop();
    }
    const server = await startServerProcess(serverEnv(database), 60_000);
    servers.push(server);
    const expected = await positionOrder(database, productId);
    for (const uuid of acknowledged)
      assert.ok(expected.includes(`evt_${uuid.replace(/-/g, '')}`), 'every acknowledged event is stored');
    await until(
      () => expected.every((id) => receiver.countById.has(id) && receiver.accepted.some((m) => m.id === id)),
      90_000,
      `all ${expected.length} messages delivered`,
    );
    server.child.kill('SIGTERM');
    await server.exited;

    assert.equal(receiver.unverified, 0, 'every request verified with standardwebhooks');
    // First arrivals are in position order; later ones are re-deliveries of messages already seen.
    const firstArrivals: string[] = [];
    const seen = new Set<string>();
    for (const message of receiver.accepted) {
      if (!seen.has(message.id)) {
        seen.add(message.id);
        firstArrivals.push(message.id);
      }
    }
    assert.deepEqual(firstArrivals, expected);
    // A message re-delivered carries the same webhook-id each time (one message per request: its own id).
    for (const request of receiver.requests)
      assert.deepEqual(
        [request.webhookId],
        request.messages.map((m) => m.id),
      );
    const redelivered = [...receiver.countById.values()].filter((n) => n > 1).length;
    console.log(
      `${expected.length} messages, ${acknowledged.size} acknowledged, ${redelivered} delivered more than once`,
    );
  });

  test(
    'two instances on PostgreSQL: one deliverer; kill -9 of it and the other takes over within 30 s',
    { skip: dialect !== 'postgres' && 'PostgreSQL only' },
    async () => {
      const receiver = await startWebhookReceiver();
      receivers.push(receiver);
      const database = testDatabase();
      databases.push(database);
      const { productId, key, destinationId } = await seed(database, receiver);
      const env = serverEnv(database);
      const a = await startServerProcess(env, 60_000);
      const b = await startServerProcess(env, 60_000);
      servers.push(a, b);
      const acknowledged = new Set<string>();
      const traffic = load(a, key, 2, acknowledged);
      await until(() => receiver.accepted.length >= 20, 30_000, 'deliveries');
      await traffic.stop();

      const services = await createServices(testConfig(database.databaseUrl), {
        postgresSchema: database.postgresSchema!,
        defaultMetrics: false,
      });
      try {
        const holderPid = async () => {
          const d = await services.destinations.show(productId, destinationId);
          return d.leaseHolder === null ? undefined : Number(d.leaseHolder.split(':')[1]);
        };
        const first = await holderPid();
        assert.ok(
          first === a.child.pid || first === b.child.pid,
          `the lease is held by one of the two instances (${first})`,
        );
        const [holder, other] = first === a.child.pid ? [a, b] : [b, a];
        // Only the holder delivers: both instances pass over the destination, yet each message went out once.
        assert.ok(
          [...receiver.countById.values()].every((n) => n === 1),
          'one deliverer: no message twice',
        );

        holder.child.kill('SIGKILL');
        await holder.exited;
        const killedAt = Date.now();
        const more = new Set<string>();
        const after = load(other, key, 1, more);
        await until(() => more.size >= 5, 10_000, 'ingest on the surviving instance');
        await after.stop();
        const wanted = [...more].map((uuid) => `evt_${uuid.replace(/-/g, '')}`);
        await until(
          () => wanted.every((id) => receiver.countById.has(id)),
          30_000,
          'the surviving instance to deliver',
        );
        const takeoverMs = Date.now() - killedAt;
        assert.equal(await holderPid(), other.child.pid);
        assert.ok(takeoverMs < 30_000, `took over in ${takeoverMs} ms`);
        console.log(`takeover after kill -9: ${takeoverMs} ms`);
      } finally {
        await services.close();
      }
    },
  );
});
