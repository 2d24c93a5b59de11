// "A 2xx means the event is committed durably" (issue 2): acknowledged events survive kill -9,
// and a graceful shutdown (SIGTERM) answers in-flight requests and loses none of them.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createTestServices, dialect, testDatabase, type TestDatabase } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { createServices } from '../../src/services.js';
import { testConfig } from '../helpers.js';

async function seed(database: TestDatabase): Promise<{ productId: string; key: string }> {
  const { services } = await createTestServices({}, database);
  const product = await services.keys.createProduct('Durability');
  const created = await services.keys.createKey(product.id, { kind: 'events' });
  await services.close();
  return { productId: product.id, key: created.key };
}

/** Sends events from `workers` concurrent loops until `stop()` is true; records what was acknowledged. */
function load(server: ServerProcess, key: string, workers: number) {
  const acknowledged = new Map<string, string>();
  let stopped = false;
  let sent = 0;
  const loops = Array.from({ length: workers }, async (_, worker) => {
    while (!stopped) {
      const externalId = `w${worker}-${sent++}`;
      try {
        const response = await fetch(`${server.url}/api/v2/events`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            event: 'durability.checked',
            subject_type: 'user',
            subject_id: 'u1',
            external_id: externalId,
          }),
        });
        const body = (await response.json()) as { data?: { uuid: string } };
        if (response.status === 201 && body.data) acknowledged.set(externalId, body.data.uuid);
      } catch {
        // The server is gone (killed or shut down): stop this loop.
        return;
      }
    }
  });
  return {
    acknowledged,
    async untilAcknowledged(count: number, timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (acknowledged.size < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    },
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

async function assertAllStored(database: TestDatabase, productId: string, acknowledged: Map<string, string>) {
  const services = await createServices(testConfig(database.databaseUrl), {
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
    defaultMetrics: false,
  });
  try {
    const missing: string[] = [];
    for (const [externalId, uuid] of acknowledged) {
      const event = await services.storage.events.get(productId, uuid);
      if (event?.externalId !== externalId) missing.push(externalId);
    }
    assert.deepEqual(missing, [], `${missing.length} of ${acknowledged.size} acknowledged events were lost`);
  } finally {
    await services.close();
  }
}

describe(`durability (${dialect})`, () => {
  const databases: TestDatabase[] = [];
  const servers: ServerProcess[] = [];
  after(async () => {
    for (const server of servers) server.child.kill('SIGKILL');
    for (const database of databases) await database.drop();
  });

  /** A server process on a fresh database, with 16 loops sending events to it. */
  async function loadedServer(env: Record<string, string> = {}) {
    const database = testDatabase();
    databases.push(database);
    const { productId, key } = await seed(database);
    const url =
      database.postgresSchema === undefined
        ? database.databaseUrl
        : `${database.databaseUrl}?schema=${database.postgresSchema}`;
    const server = await startServerProcess({ INLET_DATABASE_URL: url, INLET_LOG_LEVEL: 'info', ...env });
    servers.push(server);
    return { database, productId, server, traffic: load(server, key, 16) };
  }

  test('every acknowledged event survives kill -9 of the server', async () => {
    const { database, productId, server, traffic } = await loadedServer();
    await traffic.untilAcknowledged(200, 20_000);
    server.child.kill('SIGKILL');
    await server.exited;
    await traffic.stop();
    assert.ok(traffic.acknowledged.size >= 200, `only ${traffic.acknowledged.size} events were acknowledged`);
    await assertAllStored(database, productId, traffic.acknowledged);
  });

  // The SQLite writer thread from the first event (src/storage/sqlite/writer-thread.ts): acknowledged only after
  // the thread's commit and WAL sync. (Irrelevant on PostgreSQL.)
  test(
    'every acknowledged event survives kill -9 while the SQLite writer thread commits',
    { skip: dialect !== 'sqlite' },
    async () => {
      const { database, productId, server, traffic } = await loadedServer({ INLET_SQLITE_WRITER_THREAD_AFTER: '0' });
      await traffic.untilAcknowledged(2000, 30_000);
      server.child.kill('SIGKILL');
      await server.exited;
      await traffic.stop();
      assert.ok(traffic.acknowledged.size >= 2000, `only ${traffic.acknowledged.size} events were acknowledged`);
      await assertAllStored(database, productId, traffic.acknowledged);
    },
  );

  test('SIGTERM answers in-flight requests, stores every acknowledged event and exits 0', async () => {
    const { database, productId, server, traffic } = await loadedServer();
    await traffic.untilAcknowledged(100, 20_000);
    server.child.kill('SIGTERM');
    const { code } = await server.exited;
    await traffic.stop();
    assert.equal(code, 0, `exit code ${code}; output:\n${server.output()}`);
    assert.ok(traffic.acknowledged.size >= 100);
    await assertAllStored(database, productId, traffic.acknowledged);
    await assert.rejects(fetch(`${server.url}/healthz`), 'the server no longer accepts connections');
  });
});
