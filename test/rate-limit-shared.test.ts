// Rate limits shared across instances (issue 16): two instances, each with its own storage and its own
// limiter, on one PostgreSQL (or one Redis): a key limited to R requests/s gets about R in total, not 2R.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection } from 'node:net';
import { ConfigError, loadConfig } from '../src/config.js';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { createInMemoryRateLimiter, createSharedRateLimiter, windowFor, type RateLimiter } from '../src/services/rate-limiter.js';
import { dialect, testDatabase, type TestDatabase } from './helpers.js';

const RATE = 20;
const RUN_MS = 2500;

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
  assert.ok(allowed <= most, `${label}: ${allowed} allowed in ${seconds.toFixed(1)} s, at most ${most} expected (2R would be ~${Math.round(2 * RATE * seconds)})`);
  assert.ok(allowed >= RATE * Math.floor(seconds), `${label}: ${allowed} allowed in ${seconds.toFixed(1)} s: too few`);
}

describe('rate limit store setting', () => {
  it('defaults: memory on SQLite, postgres on PostgreSQL; misuse stops start-up', () => {
    assert.equal(loadConfig({}).rateLimitStore, 'memory');
    assert.equal(loadConfig({ INLET_DATABASE_URL: 'postgres://h/db' }).rateLimitStore, 'postgres');
    assert.equal(loadConfig({ INLET_DATABASE_URL: 'postgres://h/db', INLET_RATE_LIMIT_STORE: 'memory' }).rateLimitStore, 'memory');
    assert.throws(() => loadConfig({ INLET_RATE_LIMIT_STORE: 'postgres' }), (e: unknown) => e instanceof ConfigError && /needs a PostgreSQL/.test(e.message));
    assert.throws(() => loadConfig({ INLET_RATE_LIMIT_STORE: 'redis' }), (e: unknown) => e instanceof ConfigError && /INLET_REDIS_URL/.test(e.message));
    assert.throws(() => loadConfig({ INLET_RATE_LIMIT_STORE: 'etcd' }), /must be one of memory, postgres, redis/);
  });

  it('window: burst requests per ceil(burst / rate) seconds', () => {
    assert.deepEqual(windowFor(2000, 4000), { points: 4000, durationSeconds: 2 });
    assert.deepEqual(windowFor(20, 20), { points: 20, durationSeconds: 1 });
    assert.deepEqual(windowFor(1, 100), { points: 100, durationSeconds: 100 });
    assert.deepEqual(windowFor(10, 0), { points: 10, durationSeconds: 1 });
  });

  it('in-process limiters of two instances let a key through twice (why the shared store exists)', async () => {
    const { allowed, seconds } = await hammer([createInMemoryRateLimiter(RATE, RATE), createInMemoryRateLimiter(RATE, RATE)], 'k');
    assert.ok(allowed > RATE * (Math.ceil(seconds) + 1), `${allowed} in ${seconds} s`);
  });
});

describe('shared in PostgreSQL: two instances', { skip: dialect !== 'postgres' }, () => {
  let database: TestDatabase;
  const storages: OpenedStorage[] = [];

  before(async () => {
    database = testDatabase();
    for (let i = 0; i < 2; i++) storages.push(await openStorage(database.databaseUrl, { postgresSchema: database.postgresSchema!, postgresPoolSize: 2 }));
  });
  after(async () => {
    for (const storage of storages) await storage.close();
    await database?.drop();
  });

  it('a key limited to R/s gets about R in total through both, not 2R', async () => {
    const limiters = storages.map((storage) => createSharedRateLimiter(RATE, RATE, { kind: 'postgres', pool: storage.rateLimitPool!() }));
    await Promise.all(limiters.map((l) => l.ready));
    const { allowed, seconds } = await hammer(limiters, 'key-shared');
    assertAboutR(allowed, seconds, 'postgres');
  });

  it('a refusal carries Retry-After seconds and the limit; keys are separate', async () => {
    const [a, b] = storages.map((storage) => createSharedRateLimiter(1, 3, { kind: 'postgres', pool: storage.rateLimitPool!() }));
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

describe('shared in Redis: two instances (when Redis runs at 127.0.0.1:6379)', async () => {
  const reachable = await redisReachable();
  it('a key limited to R/s gets about R in total through both, not 2R', { skip: reachable ? false : 'no Redis at 127.0.0.1:6379' }, async () => {
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
