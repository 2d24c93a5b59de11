// Which rate-limit store a configuration selects, and the window a rate and burst become.
// The stores shared by two instances: test/rate-limit-shared.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config.js';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import {
  createInMemoryRateLimiter,
  leasedLimiter,
  leaseSize,
  windowFor,
  type RateLimiter,
} from '../../src/services/rate-limiter.js';

const RATE = 20;

describe('rate limit store setting', () => {
  it('defaults: memory on SQLite, postgres on PostgreSQL; misuse stops start-up', () => {
    assert.equal(loadConfig({}).rateLimitStore, 'memory');
    assert.equal(loadConfig({ INLET_DATABASE_URL: 'postgres://h/db' }).rateLimitStore, 'postgres');
    assert.equal(
      loadConfig({ INLET_DATABASE_URL: 'postgres://h/db', INLET_RATE_LIMIT_STORE: 'memory' }).rateLimitStore,
      'memory',
    );
    assert.throws(
      () => loadConfig({ INLET_RATE_LIMIT_STORE: 'postgres' }),
      (e: unknown) => e instanceof ConfigError && /needs a PostgreSQL/.test(e.message),
    );
    assert.throws(
      () => loadConfig({ INLET_RATE_LIMIT_STORE: 'redis' }),
      (e: unknown) => e instanceof ConfigError && /INLET_REDIS_URL/.test(e.message),
    );
    assert.throws(() => loadConfig({ INLET_RATE_LIMIT_STORE: 'etcd' }), /must be one of memory, postgres, redis/);
  });

  it('window: burst requests per ceil(burst / rate) seconds', () => {
    assert.deepEqual(windowFor(2000, 4000), { points: 4000, durationSeconds: 2 });
    assert.deepEqual(windowFor(20, 20), { points: 20, durationSeconds: 1 });
    assert.deepEqual(windowFor(1, 100), { points: 100, durationSeconds: 100 });
    assert.deepEqual(windowFor(10, 0), { points: 10, durationSeconds: 1 });
  });

  it('in-process limiters of two instances let a key through twice (why the shared store exists)', () => {
    const instances = [createInMemoryRateLimiter(RATE, RATE), createInMemoryRateLimiter(RATE, RATE)];
    let allowed = 0;
    // Three seconds of an injected clock, both instances asked every 10 ms.
    for (let now = 0; now < 3000; now += 10)
      for (const limiter of instances) for (let i = 0; i < 5; i++) if (limiter.take('k', now).allowed) allowed++;
    assert.ok(allowed >= 2 * RATE * 3, `${allowed}: each instance grants the key its own rate`);
  });
});

/** The library's in-process window limiter as the shared store, with its calls counted. */
function countedStore(points: number, durationSeconds: number) {
  const store = new RateLimiterMemory({ points, duration: durationSeconds });
  const calls = { consume: 0, reward: 0 };
  return {
    calls,
    consume: (key: string, n: number) => (calls.consume++, store.consume(key, n)),
    reward: (key: string, n: number) => (calls.reward++, store.reward(key, n)),
  };
}

/** How many of `n` requests for `key`, one after the other, `limiter` allows. */
async function allowedOf(limiter: RateLimiter, key: string, n: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < n; i++) if ((await limiter.take(key)).allowed) allowed++;
  return allowed;
}

describe('shared limits spent in leases', () => {
  it('lease sizes: 1/50 of the window, at least 1, at most 1,000', () => {
    assert.equal(leaseSize(4000), 80);
    assert.equal(leaseSize(20), 1);
    assert.equal(leaseSize(20_000_000), 1000);
  });

  it('asks the store once per lease, not per request, and lets exactly the window through', async () => {
    const store = countedStore(4000, 60);
    const limiter = leasedLimiter(store, 4000);
    assert.equal(await allowedOf(limiter, 'k', 4000), 4000);
    assert.equal(store.calls.consume, 50, '4,000 points in leases of 80');
    const refused = await limiter.take('k');
    assert.equal(refused.allowed, false);
    assert.ok(refused.retryAfterSeconds >= 1 && refused.retryAfterSeconds <= 60, String(refused.retryAfterSeconds));
    const calls = store.calls.consume;
    assert.equal((await limiter.take('k')).allowed, false);
    assert.equal(store.calls.consume, calls, 'a used-up window is refused without asking the store again');
  });

  it('takes the last points of a window one by one, so none is lost to a lease too large for them', async () => {
    // 101 points in leases of 2: the 51st lease finds 1 point left, gives the lease back and takes that point.
    const store = countedStore(101, 60);
    const limiter = leasedLimiter(store, 101);
    assert.equal(await allowedOf(limiter, 'k', 110), 101);
    assert.equal(store.calls.reward, 1);
  });

  it('many requests at once while a lease is being asked for wait for that one answer', async () => {
    const store = countedStore(10_000, 60);
    const limiter = leasedLimiter(store, 10_000);
    const decisions = await Promise.all(Array.from({ length: 150 }, () => limiter.take('k')));
    assert.ok(decisions.every((d) => d.allowed));
    assert.equal(store.calls.consume, 1, 'one lease of 200 serves all 150');
    assert.equal(
      decisions.at(-1)!.remaining,
      10_000 - 200 + 50,
      'remaining: the store’s, plus what is left of the lease',
    );
  });

  it('two instances on one store: together no more than the window, and at most one lease each short of it', async () => {
    const store = countedStore(4000, 60);
    const instances = [leasedLimiter(store, 4000), leasedLimiter(store, 4000)];
    let allowed = 0;
    for (let i = 0; i < 30; i++) for (const limiter of instances) allowed += await allowedOf(limiter, 'k', 100);
    assert.ok(allowed <= 4000 && allowed >= 4000 - 2 * leaseSize(4000), String(allowed));
  });

  it('a used-up window is refused until it ends (Retry-After), then a new lease lets requests through (contract §7)', async () => {
    const store = countedStore(100, 1);
    const limiter = leasedLimiter(store, 100);
    assert.equal(await allowedOf(limiter, 'k', 120), 100);
    const refused = await limiter.take('k');
    assert.equal(refused.allowed, false);
    assert.equal(refused.remaining, 0);
    assert.equal(refused.retryAfterSeconds, 1);
    await new Promise((resolve) => setTimeout(resolve, refused.resetSeconds * 1000 + 100));
    const next = await limiter.take('k');
    assert.equal(next.allowed, true, 'the next window');
    assert.equal(next.remaining, 99);
  });

  it('keys are separate', async () => {
    const store = countedStore(3, 60);
    const limiter = leasedLimiter(store, 3);
    for (let i = 0; i < 3; i++) assert.equal((await limiter.take('a')).allowed, true);
    assert.equal((await limiter.take('a')).allowed, false);
    assert.equal((await limiter.take('b')).allowed, true);
  });
});
