// A PostgreSQL server that vanishes without closing its sockets (a host gone, a partition, a blackholed
// primary) must not hold requests: every query has a client-side deadline
// (INLET_DATABASE_QUERY_TIMEOUT_MS) past which it fails → 503 with Retry-After, its stuck connection is
// destroyed, and ingest comes back by itself once a server answers again, or at once on another host of
// a multi-host URL (issue 16: "never a hang past the request timeout"). PostgreSQL run only.
//
// The vanishing server is a TCP proxy in front of the test server that, on demand, stops forwarding in
// both directions while keeping every socket open — what a dead host looks like until TCP gives up.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { buildApp } from '../../src/http/app.js';
import {
  bearer,
  createTestServices,
  dialect,
  postgresUrl,
  testDatabase,
  adminHeaders,
  type TestDatabase,
} from '../helpers.js';

interface Blackhole {
  port: number;
  /** Stops forwarding on every open and future connection; sockets stay open. */
  vanish(): void;
  /** Forwards again on new connections (the stuck ones stay stuck, as after a real partition). */
  restore(): void;
  close(): Promise<void>;
}

async function blackholeProxy(targetPort: number): Promise<Blackhole> {
  let vanished = false;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    if (vanished) {
      client.on('error', () => {});
      client.pause();
      pairs.add([client, client]);
      return;
    }
    const upstream = connect(targetPort, '127.0.0.1');
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => {
      upstream.destroy();
      pairs.delete(pair);
    });
    upstream.on('close', () => client.destroy());
    client.on('data', (chunk) => {
      if (!vanished) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!vanished) client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    vanish: () => {
      vanished = true;
    },
    restore: () => {
      vanished = false;
    },
    async close() {
      for (const [a, b] of pairs) {
        a.destroy();
        b.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe(
  'a PostgreSQL server that vanishes silently (client-side query deadline)',
  { skip: dialect !== 'postgres', timeout: 90_000 },
  () => {
    const base = new URL(postgresUrl);
    const userPart = base.username === '' ? '' : `${base.username}@`;
    const realPort = Number(base.port || 5432);
    const cleanups: Array<() => Promise<void>> = [];
    after(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    });

    async function start(hosts: string, deadlineMs: number) {
      const own = testDatabase();
      const database: TestDatabase = {
        ...own,
        databaseUrl: `postgres://${userPart}${hosts}${base.pathname}?target_session_attrs=read-write&connect_timeout=1`,
      };
      const { services, close } = await createTestServices({ databaseQueryTimeoutMs: deadlineMs }, database);
      const app = await buildApp(services, { logger: false });
      await app.ready();
      cleanups.push(async () => {
        await app.close();
        await close();
      });
      const created = await app.inject({
        method: 'POST',
        url: '/admin/v1/products',
        headers: adminHeaders(),
        payload: { name: 'deadline' },
      });
      const id = created.json().data.id as string;
      const key = (
        await app.inject({
          method: 'POST',
          url: `/admin/v1/products/${id}/keys`,
          headers: adminHeaders(),
          payload: { kind: 'events' },
        })
      ).json().data.key as string;
      let n = 0;
      const send = async () => {
        const started = Date.now();
        const res = await app.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: { ...bearer(key), 'content-type': 'application/json' },
          payload: {
            event_type: 'page',
            action: 'viewed',
            subject_type: 'user',
            subject_id: 'u',
            external_id: `deadline-${n++}`,
          },
        });
        return {
          status: res.statusCode,
          ms: Date.now() - started,
          retryAfter: res.headers['retry-after'],
          type: String(res.headers['content-type']),
          body: res.body,
        };
      };
      return { app, services, send };
    }

    it('one host: a query past the deadline answers 503 with Retry-After, not a hang; ingest resumes by itself', async () => {
      const proxy = await blackholeProxy(realPort);
      cleanups.push(() => proxy.close());
      const { app, send } = await start(`127.0.0.1:${proxy.port}`, 1000);
      assert.equal((await send()).status, 201);

      proxy.vanish();
      const during = await send();
      assert.equal(during.status, 503, during.body);
      assert.ok(during.type.startsWith('application/problem+json'));
      assert.ok(during.retryAfter !== undefined, 'Retry-After');
      // The deadline, plus a connect attempt that also hangs (the pool's connect timeout), never unbounded.
      assert.ok(during.ms < 8000, `answered after ${during.ms} ms`);
      assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);

      proxy.restore();
      const deadline = Date.now() + 10_000;
      let back: Awaited<ReturnType<typeof send>> | undefined;
      while (Date.now() < deadline) {
        back = await send();
        if (back.status === 201) break;
        assert.equal(back.status, 503, back.body);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal(back?.status, 201, 'ingest came back without a restart');
    });

    it('two hosts: when the first vanishes, requests fail at most for the deadline, then land on the second', async () => {
      const proxy = await blackholeProxy(realPort);
      cleanups.push(() => proxy.close());
      const { send } = await start(`127.0.0.1:${proxy.port},127.0.0.1:${realPort}`, 1000);
      assert.equal((await send()).status, 201);
      proxy.vanish();
      const answers: Array<Awaited<ReturnType<typeof send>>> = [];
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline) {
        const answer = await send();
        answers.push(answer);
        assert.ok(answer.status === 201 || answer.status === 503, `${answer.status} ${answer.body}`);
        assert.ok(answer.ms < 8000, `answered after ${answer.ms} ms`);
        if (answer.status === 201) break;
      }
      assert.equal(
        answers.at(-1)?.status,
        201,
        `ingest moved to the second host (${answers.map((a) => a.status).join(',')})`,
      );
      // One request pays the deadline; the pool then drops its other connections to the silent host instead
      // of letting each cost another request its deadline.
      assert.ok(
        answers.filter((a) => a.status === 503).length <= 1,
        `at most one 503 (${answers.map((a) => a.status).join(',')})`,
      );
    });
  },
);
