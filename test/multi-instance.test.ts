// Two real service processes on one PostgreSQL schema, as behind a load balancer (docs/scaling-out.md).
// Proves across instances: one event per external_id under concurrent retries split between them
// (contract §4), revocation seen by the other instance within the key cache TTL (§1), and rate limits
// kept per instance (§7, documented). Everything on 127.0.0.1; every wait is bounded.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrations } from '../src/storage/migrations/index.js';
import { ADMIN_TOKEN, dialect, testDatabase, type TestDatabase } from './helpers.js';

const skip = dialect === 'postgres' ? false : 'PostgreSQL only: several instances need a shared server database (SQLite is one process)';

/** Identity (contract §6) arrives with migrations 100–199; until then its cross-instance checks are skipped. */
const identitySkip = migrations.some((m) => m.version >= 100 && m.version < 200)
  ? false
  : 'identity is not in this build yet (no migrations 100-199): cross-instance identity checks run once the identity branch is merged';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** The documented default of INLET_KEY_CACHE_TTL_MS, which the instances run with. */
const KEY_CACHE_TTL_MS = 1000;
const RATE_LIMIT_BURST = 100;
const START_TIMEOUT_MS = 45_000;
const REQUEST_TIMEOUT_MS = 10_000;

interface Instance {
  name: string;
  url: string;
  child: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function startInstance(name: string, port: number, databaseUrl: string): Instance {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      INLET_DATABASE_URL: databaseUrl,
      INLET_ADMIN_TOKEN: ADMIN_TOKEN,
      INLET_LOG_LEVEL: 'warn',
      INLET_KEY_CACHE_TTL_MS: String(KEY_CACHE_TTL_MS),
      INLET_RATE_LIMIT_RPS: '1',
      INLET_RATE_LIMIT_BURST: String(RATE_LIMIT_BURST),
      INLET_PG_POOL_SIZE: '4',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const keep = (chunk: Buffer) => {
    output.push(chunk.toString());
    if (output.length > 200) output.shift();
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { name, url: `http://127.0.0.1:${port}`, child, output, exited };
}

async function waitReady(instance: Instance): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  let exitCode: number | null | undefined;
  void instance.exited.then((code) => (exitCode = code));
  while (Date.now() < deadline) {
    if (exitCode !== undefined) throw new Error(`${instance.name} exited with ${exitCode}: ${instance.output.join('')}`);
    try {
      const response = await fetch(`${instance.url}/readyz`, { signal: AbortSignal.timeout(1000) });
      if (response.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${instance.name} not ready within ${START_TIMEOUT_MS} ms: ${instance.output.join('')}`);
}

async function stopInstance(instance: Instance): Promise<void> {
  if (instance.child.exitCode !== null || instance.child.signalCode !== null) return;
  instance.child.kill('SIGTERM');
  const stopped = await Promise.race([instance.exited.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 10_000))]);
  if (!stopped) {
    instance.child.kill('SIGKILL');
    await Promise.race([instance.exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
  }
}

interface Reply {
  status: number;
  headers: Headers;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function call(instance: Instance, method: string, path: string, token: string, body?: unknown): Promise<Reply> {
  const response = await fetch(`${instance.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text === '' ? undefined : JSON.parse(text) };
}

describe('several instances on one PostgreSQL database', { skip, timeout: 180_000 }, () => {
  // Created in before(): a skipped suite's body still runs, and must not create anything.
  let database: TestDatabase;
  const instances: Instance[] = [];
  let a: Instance;
  let b: Instance;
  let client: pg.Client;
  let productId: string;

  async function createKey(kind: 'events' | 'reports' = 'events'): Promise<{ id: string; key: string }> {
    const created = await call(a, 'POST', `/admin/v1/products/${productId}/keys`, ADMIN_TOKEN, { kind });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    return { id: created.body.data.id, key: created.body.data.key };
  }

  before(async () => {
    database = testDatabase();
    // Both start at once on a fresh schema: the migrations race too (each applied once, see
    // postgres-migrations.test.ts); the schema is chosen in the URL.
    const databaseUrl = `${database.databaseUrl}?schema=${database.postgresSchema}`;
    const [portA, portB] = [await freePort(), await freePort()];
    a = startInstance('instance A', portA!, databaseUrl);
    b = startInstance('instance B', portB!, databaseUrl);
    instances.push(a, b);
    await Promise.all([waitReady(a), waitReady(b)]);
    client = new pg.Client({ connectionString: database.databaseUrl, options: `-c search_path=${database.postgresSchema}` });
    await client.connect();
    const product = await call(a, 'POST', '/admin/v1/products', ADMIN_TOKEN, { name: 'Acme' });
    assert.equal(product.status, 201);
    productId = product.body.data.id;
  });

  after(async () => {
    await client?.end().catch(() => {});
    await Promise.all(instances.map(stopInstance));
    await database?.drop();
  });

  it('concurrent retries of one external_id split between the instances store exactly one event with one uuid', async () => {
    const { key } = await createKey();
    for (let round = 0; round < 8; round++) {
      const externalId = `order-${round}`;
      const body = { event_type: 'order', action: 'placed', subject_type: 'user', subject_id: `u${round}`, external_id: externalId, properties: { round } };
      const replies = await Promise.all(Array.from({ length: 10 }, (_, i) => call(i % 2 === 0 ? a : b, 'POST', '/api/v2/events', key, body)));
      const statuses = replies.map((r) => r.status).sort();
      assert.deepEqual(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 201], `round ${round}: one 201, the rest replays`);
      const original = replies.find((r) => r.status === 201)!.body.data;
      for (const reply of replies.filter((r) => r.status === 200)) {
        assert.equal(reply.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(reply.body.data, original, 'every replay answers the original record unchanged');
      }
      const stored = await client.query('SELECT id FROM events WHERE product_id = $1 AND external_id = $2', [productId, externalId]);
      assert.deepEqual(stored.rows.map((row) => row.id), [original.uuid], 'one stored event');
      const keys = await client.query('SELECT event_id FROM event_dedup WHERE product_id = $1 AND external_id = $2', [productId, externalId]);
      assert.deepEqual(keys.rows.map((row) => row.event_id), [original.uuid]);
    }
  });

  it('a key revoked on one instance stops working there at once and on the other within the key cache TTL', async () => {
    const { id, key } = await createKey();
    const body = { event_type: 'session', action: 'started', subject_type: 'user', subject_id: 'u1' };
    // Both instances have the key cached as valid.
    assert.equal((await call(a, 'POST', '/api/v2/events', key, body)).status, 201);
    assert.equal((await call(b, 'POST', '/api/v2/events', key, body)).status, 201);

    const revoked = await call(a, 'DELETE', `/admin/v1/keys/${id}`, ADMIN_TOKEN);
    assert.equal(revoked.status, 204);
    const revokedAt = Date.now();
    const onA = await call(a, 'POST', '/api/v2/events', key, body);
    assert.equal(onA.status, 401, 'the revoking instance refuses at once');
    assert.equal(onA.headers.get('www-authenticate')?.startsWith('Bearer'), true);

    const bound = KEY_CACHE_TTL_MS + 1000; // TTL plus room for one request on a loaded machine
    let refusedAfter: number | undefined;
    while (Date.now() - revokedAt < bound) {
      const reply = await call(b, 'POST', '/api/v2/events', key, body);
      if (reply.status === 401) {
        refusedAfter = Date.now() - revokedAt;
        break;
      }
      assert.equal(reply.status, 201);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.notEqual(refusedAfter, undefined, `instance B still accepted the revoked key ${bound} ms after revocation`);
    // And it stays refused.
    assert.equal((await call(b, 'POST', '/api/v2/events', key, body)).status, 401);
  });

  it('rate limits are per instance: each instance grants a key its own burst', async () => {
    const { key } = await createKey();
    const started = Date.now();
    // An invalid body is refused with 400 after the key and its rate limit are checked: no writes.
    let allowed = 0;
    let limited: Reply | undefined;
    for (let sent = 0; sent < RATE_LIMIT_BURST + 40 && limited === undefined; sent += 10) {
      const replies = await Promise.all(Array.from({ length: 10 }, () => call(a, 'POST', '/api/v2/events', key, {})));
      allowed += replies.filter((r) => r.status === 400).length;
      limited = replies.find((r) => r.status === 429);
    }
    assert.ok(limited, 'instance A refuses once the burst is spent');
    assert.ok(Number(limited.headers.get('retry-after')) >= 1);
    assert.equal(limited.headers.get('ratelimit-limit'), String(RATE_LIMIT_BURST));
    const refill = Math.ceil((Date.now() - started) / 1000) + 1; // 1 token a second
    assert.ok(allowed >= RATE_LIMIT_BURST && allowed <= RATE_LIMIT_BURST + refill, `A allowed ${allowed}`);

    // Instance B has never seen this key: its own bucket is full.
    const onB = await call(b, 'POST', '/api/v2/events', key, {});
    assert.equal(onB.status, 400);
    assert.equal(onB.headers.get('ratelimit-remaining'), String(RATE_LIMIT_BURST - 1));
  });

  describe('identity across instances', { skip: identitySkip }, () => {
    it('an identifier claimed by concurrent identifies on both instances ends up with exactly one owner', async () => {
      const { key } = await createKey();
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          call(i % 2 === 0 ? a : b, 'POST', '/api/v2/identify', key, { external_id: `claimant-${i}`, identifiers: { email: 'Shared@Example.com' } }),
        ),
      );
      const winners = replies.filter((r) => r.status === 201);
      assert.equal(winners.length, 1, `one identify wins: ${replies.map((r) => r.status).join(', ')}`);
      const owner = winners[0]!.body.data.external_id as string;
      for (const reply of replies.filter((r) => r !== winners[0])) {
        assert.equal(reply.status, 409);
        assert.equal(reply.body.code, 'identifier_conflict');
        assert.deepEqual(reply.body.conflicts, [{ kind: 'email', value: 'shared@example.com', external_id: owner }]);
      }
      const holders = await client.query("SELECT user_id FROM user_identifiers WHERE product_id = $1 AND kind = 'email' AND value = 'shared@example.com'", [productId]);
      assert.deepEqual(holders.rows.map((row) => row.user_id), [winners[0]!.body.data.id]);
      const users = await client.query("SELECT external_id FROM users WHERE product_id = $1 AND external_id LIKE 'claimant-%'", [productId]);
      assert.deepEqual(users.rows.map((row) => row.external_id), [owner], 'the refused identifies changed nothing');
    });

    it('concurrent identifies of one new external id on both instances create one user and lose no trait', async () => {
      const { key } = await createKey();
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) => call(i % 2 === 0 ? a : b, 'POST', '/api/v2/identify', key, { external_id: 'newcomer', traits: { [`t${i}`]: i } })),
      );
      assert.deepEqual(replies.map((r) => r.status).sort(), [200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      assert.equal(new Set(replies.map((r) => r.body.data.id)).size, 1, 'every answer names one user');
      const final = await call(b, 'POST', '/api/v2/identify', key, { external_id: 'newcomer' });
      assert.equal(final.status, 200);
      assert.deepEqual(final.body.data.traits, Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`t${i}`, i])));
      const users = await client.query("SELECT id FROM users WHERE product_id = $1 AND external_id = 'newcomer'", [productId]);
      assert.equal(users.rows.length, 1);
    });

    it('opposite aliases sent at once to the two instances merge into one user', async () => {
      const { key } = await createKey();
      const [left, right] = await Promise.all([
        call(a, 'POST', '/api/v2/alias', key, { from_external_id: 'left', to_external_id: 'right' }),
        call(b, 'POST', '/api/v2/alias', key, { from_external_id: 'right', to_external_id: 'left' }),
      ]);
      assert.equal(left.status, 200, JSON.stringify(left.body));
      assert.equal(right.status, 200, JSON.stringify(right.body));
      assert.equal(left.body.data.id, right.body.data.id, 'both answers name the same user');
      const mapped = await client.query("SELECT DISTINCT user_id FROM user_ids WHERE product_id = $1 AND external_id IN ('left', 'right')", [productId]);
      assert.equal(mapped.rows.length, 1, 'both external ids resolve to one user');
    });
  });
});
