// Two real service processes on one PostgreSQL schema, as behind a load balancer (docs/scaling-out.md).
// Proves across instances: one event per external_id under concurrent retries split between them
// (contract §4), revocation seen by the other instance within the key cache TTL (§1), rate limits
// shared by the instances (§7, issue 16), one owner per identifier and one user per new external id (§6). Everything on 127.0.0.1; every wait is bounded.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { ADMIN_TOKEN, dialect, testDatabase, type TestDatabase } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';

const skip =
  dialect === 'postgres'
    ? false
    : 'PostgreSQL only: several instances need a shared server database (SQLite is one process)';

/** The documented default of INLET_KEY_CACHE_TTL_MS, which the instances run with. */
const KEY_CACHE_TTL_MS = 1000;
const RATE_LIMIT_BURST = 100;
const START_TIMEOUT_MS = 45_000;
const REQUEST_TIMEOUT_MS = 10_000;

async function stopInstance(instance: ServerProcess): Promise<void> {
  if (instance.child.exitCode !== null || instance.child.signalCode !== null) return;
  instance.child.kill('SIGTERM');
  const stopped = await Promise.race([
    instance.exited.then(() => true),
    new Promise((resolve) => setTimeout(() => resolve(false), 10_000)),
  ]);
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

async function call(
  instance: ServerProcess,
  method: string,
  path: string,
  token: string,
  body?: unknown,
): Promise<Reply> {
  const response = await fetch(`${instance.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text === '' ? undefined : JSON.parse(text) };
}

describe('several instances on one PostgreSQL database', { skip, timeout: 180_000 }, () => {
  // Created in before(): a skipped suite's body still runs, and must not create anything.
  let database: TestDatabase;
  const instances: ServerProcess[] = [];
  let a: ServerProcess;
  let b: ServerProcess;
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
    const env = {
      INLET_DATABASE_URL: `${database.databaseUrl}?schema=${database.postgresSchema}`,
      INLET_ADMIN_TOKEN: ADMIN_TOKEN,
      INLET_KEY_CACHE_TTL_MS: String(KEY_CACHE_TTL_MS),
      INLET_RATE_LIMIT_RPS: '1',
      INLET_RATE_LIMIT_BURST: String(RATE_LIMIT_BURST),
      INLET_PG_POOL_SIZE: '4',
    };
    // Each listens on a port of its own choosing (PORT=0), on 127.0.0.1.
    const started = await Promise.allSettled([
      startServerProcess(env, START_TIMEOUT_MS),
      startServerProcess(env, START_TIMEOUT_MS),
    ]);
    for (const result of started) if (result.status === 'fulfilled') instances.push(result.value);
    for (const result of started) if (result.status === 'rejected') throw result.reason;
    [a, b] = instances as [ServerProcess, ServerProcess];
    for (const instance of instances) {
      const ready = await fetch(`${instance.url}/readyz`, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      assert.equal(ready.status, 200);
    }
    client = new pg.Client({
      connectionString: database.databaseUrl,
      options: `-c search_path=${database.postgresSchema}`,
    });
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
      const body = {
        event_type: 'order',
        action: 'placed',
        subject_type: 'user',
        subject_id: `u${round}`,
        external_id: externalId,
        properties: { round },
      };
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) => call(i % 2 === 0 ? a : b, 'POST', '/api/v2/events', key, body)),
      );
      const statuses = replies.map((r) => r.status).sort();
      assert.deepEqual(
        statuses,
        [200, 200, 200, 200, 200, 200, 200, 200, 200, 201],
        `round ${round}: one 201, the rest replays`,
      );
      const original = replies.find((r) => r.status === 201)!.body.data;
      for (const reply of replies.filter((r) => r.status === 200)) {
        assert.equal(reply.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(reply.body.data, original, 'every replay answers the original record unchanged');
      }
      const stored = await client.query('SELECT id FROM events WHERE product_id = $1 AND external_id = $2', [
        productId,
        externalId,
      ]);
      assert.deepEqual(
        stored.rows.map((row) => row.id),
        [original.uuid],
        'one stored event',
      );
      const keys = await client.query(
        'SELECT event_id FROM event_dedup WHERE product_id = $1 AND key_hash = inlet_event_dedup_key($2, $3)',
        [productId, 'api', externalId],
      );
      assert.deepEqual(
        keys.rows.map((row) => row.event_id),
        [original.uuid],
      );
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

  it('rate limits are shared (INLET_RATE_LIMIT_STORE=postgres, the default on PostgreSQL): once A spent the burst, B refuses too', async () => {
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

    // Instance B has never seen this key, but the bucket is shared: it refuses as well.
    const onB = await call(b, 'POST', '/api/v2/events', key, {});
    assert.equal(onB.status, 429);
    assert.equal(onB.headers.get('ratelimit-remaining'), '0');
  });

  describe('identity across instances (contract §6)', () => {
    it('an identifier claimed by concurrent identifies on both instances ends up with exactly one owner', async () => {
      const { key } = await createKey();
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          call(i % 2 === 0 ? a : b, 'POST', '/api/v2/identify', key, {
            external_id: `claimant-${i}`,
            identifiers: { email: 'Shared@Example.com' },
          }),
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
      const holders = await client.query(
        "SELECT user_id FROM user_identifiers WHERE product_id = $1 AND kind = 'email' AND value = 'shared@example.com'",
        [productId],
      );
      assert.deepEqual(
        holders.rows.map((row) => row.user_id),
        [winners[0]!.body.data.id],
      );
      const users = await client.query(
        "SELECT external_id FROM users WHERE product_id = $1 AND external_id LIKE 'claimant-%'",
        [productId],
      );
      assert.deepEqual(
        users.rows.map((row) => row.external_id),
        [owner],
        'the refused identifies changed nothing',
      );
    });

    it('concurrent identifies of one new external id on both instances create one user and lose no trait', async () => {
      const { key } = await createKey();
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          call(i % 2 === 0 ? a : b, 'POST', '/api/v2/identify', key, {
            external_id: 'newcomer',
            traits: { [`t${i}`]: i },
          }),
        ),
      );
      assert.deepEqual(replies.map((r) => r.status).sort(), [200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      assert.equal(new Set(replies.map((r) => r.body.data.id)).size, 1, 'every answer names one user');
      const final = await call(b, 'POST', '/api/v2/identify', key, { external_id: 'newcomer' });
      assert.equal(final.status, 200);
      assert.deepEqual(final.body.data.traits, Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`t${i}`, i])));
      const users = await client.query("SELECT id FROM users WHERE product_id = $1 AND external_id = 'newcomer'", [
        productId,
      ]);
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
      const mapped = await client.query(
        "SELECT DISTINCT user_id FROM user_ids WHERE product_id = $1 AND external_id IN ('left', 'right')",
        [productId],
      );
      assert.equal(mapped.rows.length, 1, 'both external ids resolve to one user');
    });
  });
});
