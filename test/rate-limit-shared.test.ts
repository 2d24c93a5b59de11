// Rate limits shared across instances (issue 16): two instances, each with its own storage and its own
// limiter, on one PostgreSQL (or one Redis): a key limited to R requests/s gets about R in total, not 2R.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection } from 'node:net';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { createSharedRateLimiter, type RateLimiter } from '../src/services/rate-limiter.js';
import { dialect, testDatabase, type TestDatabase } from './helpers.js';

const RATE = 20;
const RUN_MS = 2000;

/** Two limiters hammered at once for RUN_MS; how many requests they let through together. */
async function hammer(limiters: RateLimiter[], key: string): Promise<{ allowed: number; seconds: number }> {
  const started = Date.now();
  let allowed = 0;
  await Promise.all(
    limiters.map(async (limiter) => {
      while (Date.now() - started < RUN_MS) {
        const decisions = await Promise.all(Array.from({ length: 5 }, () => limiter.take(key)));
        allowed += decisions.filter((d) => d.allowed).length;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }),
  );
  return { allowed, seconds: (Date.now() - started) / 1000 };
}

/** Fixed windows of one second (burst = rate): at most one window more than the whole seconds elapsed. */
function assertAboutR(allowed: number, seconds: number, label: string): void {
  const most = RATE * (Math.ceil(seconds) + 1);
  assert.ok(
    allowed <= most,
    `${label}: ${allowed} allowed in ${seconds.toFixed(1)} s, at most ${most} expected (2R would be ~${Math.round(2 * RATE * seconds)})`,
  );
  assert.ok(allowed >= RATE * Math.floor(seconds), `${label}: ${allowed} allowed in ${seconds.toFixed(1)} s: too few`);
}

describe('shared in PostgreSQL: two instances', { skip: dialect !== 'postgres' }, () => {
  let database: TestDatabase;
  const storages: OpenedStorage[] = [];

  before(async () => {
    database = testDatabase();
    for (let i = 0; i < 2; i++)
      storages.push(
        await openStorage(database.databaseUrl, { postgresSchema: database.postgresSchema!, postgresPoolSize: 2 }),
      );
  });
  after(async () => {
    for (const storage of storages) await storage.close();
    await database?.drop();
  });

  it('instances starting at once on a fresh database all get their limiter (first test: the table does not exist yet)', async () => {
    // Before the retry in createSharedRateLimiter, one of two concurrent creations failed now and then with
    // 'type "inlet_rate_limits" already exists' (42710): npm test on PostgreSQL, 22:01 UTC.
    const limiters = Array.from({ length: 8 }, (_, i) =>
      createSharedRateLimiter(RATE, RATE, { kind: 'postgres', pool: storages[i % 2]!.capabilities.rateLimitPool!() }),
    );
    await Promise.all(limiters.map((l) => l.ready));
    assert.ok((await limiters[0]!.take('fresh')).allowed);
  });

  it('a key limited to R/s gets about R in total through both, not 2R', async () => {
    const limiters = storages.map((storage) =>
      createSharedRateLimiter(RATE, RATE, { kind: 'postgres', pool: storage.capabilities.rateLimitPool!() }),
    );
    await Promise.all(limiters.map((l) => l.ready));
    const { allowed, seconds } = await hammer(limiters, 'key-shared');
    assertAboutR(allowed, seconds, 'postgres');
  });

  it('a refusal carries Retry-After seconds and the limit; keys are separate', async () => {
    const [a, b] = storages.map((storage) =>
      createSharedRateLimiter(1, 3, { kind: 'postgres', pool: storage.capabilities.rateLimitPool!() }),
    );
    await Promise.all([a!.ready, b!.ready]);
    const first = await a!.take('key-small');
    assert.equal(first.allowed, true);
    assert.equal(first.limit, 3);
    assert.equal((await b!.take('key-small')).allowed, true);
    assert.equal((await a!.take('key-small')).allowed, true);
    const refused = await b!.take('key-small');
    assert.equal(refused.allowed, false);
    assert.ok(refused.retryAfterSeconds >= 1 && refused.retryAfterSeconds <= 3, String(refused.retryAfterSeconds));
    assert.equal((await b!.take('key-other')).allowed, true);
  });
});

async function redisReachable(): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port: 6379 });
    socket.setTimeout(500);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

// Once, in the PostgreSQL pass (Redis does not depend on the backend under test).
describe('shared in Redis: two instances (when Redis runs at 127.0.0.1:6379)', { skip: dialect !== 'postgres' }, () => {
  it('a key limited to R/s gets about R in total through both, not 2R', async (t) => {
    if (!(await redisReachable())) return t.skip('no Redis at 127.0.0.1:6379');
    const { createClient } = await import('redis');
    const clients = [createClient({ url: 'redis://127.0.0.1:6379' }), createClient({ url: 'redis://127.0.0.1:6379' })];
    await Promise.all(clients.map((c) => c.connect()));
    try {
      const limiters = clients.map((client) => createSharedRateLimiter(RATE, RATE, { kind: 'redis', client }));
      const { allowed, seconds } = await hammer(limiters, `key-${process.pid}-${Date.now()}`);
      assertAboutR(allowed, seconds, 'redis');
    } finally {
      await Promise.all(clients.map((c) => c.quit()));
    }
  });
});
