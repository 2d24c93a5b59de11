// Which rate-limit store a configuration selects, and the window a rate and burst become.
// The stores shared by two instances: test/rate-limit-shared.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config.js';
import { createInMemoryRateLimiter, windowFor } from '../../src/services/rate-limiter.js';

const RATE = 20;

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

  it('in-process limiters of two instances let a key through twice (why the shared store exists)', () => {
    const instances = [createInMemoryRateLimiter(RATE, RATE), createInMemoryRateLimiter(RATE, RATE)];
    let allowed = 0;
    // Three seconds of an injected clock, both instances asked every 10 ms.
    for (let now = 0; now < 3000; now += 10) for (const limiter of instances) for (let i = 0; i < 5; i++) if (limiter.take('k', now).allowed) allowed++;
    assert.ok(allowed >= 2 * RATE * 3, `${allowed}: each instance grants the key its own rate`);
  });
});

