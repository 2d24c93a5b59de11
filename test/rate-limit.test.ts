// Contract §7 rate limits: a token bucket per API key, 429 rate_limited with Retry-After, and the
// RateLimit-* headers on every response to an authenticated request.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { createInMemoryRateLimiter } from '../src/services/rate-limiter.js';

const event = { subject_type: 'user', subject_id: 'u', event_type: 'rate', action: 'tested' };

describe('rate limiting over HTTP (5 rps, burst 5)', () => {
  let ctx: TestContext;
  /** The limiter's clock, frozen: "immediate" requests stay immediate however slow the machine is. */
  let now = Date.now();
  before(async () => {
    ctx = await createTestApp({ rateLimitRps: 5, rateLimitBurst: 5 });
    const limiter = ctx.services.rateLimiter;
    const take = limiter.take.bind(limiter);
    limiter.take = (key: string) => take(key, now);
  });
  after(async () => ctx.close());

  const post = (key: string, payload: unknown = event, url = '/api/v2/events') =>
    ctx.app.inject({ method: 'POST', url, headers: bearer(key), payload: payload as object });

  it('carries RateLimit-Limit/Remaining/Reset; the 6th immediate request → 429 rate_limited with Retry-After', async () => {
    const p = await ctx.product('rl-basic');
    const remaining: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await post(p.eventsKey);
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(res.headers['ratelimit-limit'], '5');
      remaining.push(Number(res.headers['ratelimit-remaining']));
      assert.equal(res.headers['ratelimit-reset'], '1'); // seconds until the bucket is full again
    }
    assert.deepEqual(remaining, [4, 3, 2, 1, 0]);
    const countBefore = await ctx.services.storage.events.count(p.id);
    const limited = await post(p.eventsKey);
    assert.equal(limited.statusCode, 429, limited.body);
    assert.equal(problemOf(limited).code, 'rate_limited');
    assert.equal(limited.headers['retry-after'], '1'); // one token per 200 ms, rounded up to whole seconds
    assert.equal(limited.headers['ratelimit-limit'], '5');
    assert.equal(limited.headers['ratelimit-remaining'], '0');
    assert.equal(limited.headers['ratelimit-reset'], '1');
    assert.equal(await ctx.services.storage.events.count(p.id), countBefore, 'a limited request stores nothing');
    // 200 ms later one token is back: one request passes, the next is limited again.
    now += 200;
    assert.equal((await post(p.eventsKey)).statusCode, 201);
    assert.equal((await post(p.eventsKey)).statusCode, 429);
  });

  it('headers are on error responses of authenticated requests too', async () => {
    const p = await ctx.product('rl-errors');
    const invalid = await post(p.eventsKey, { ...event, subject_type: 'team' });
    assert.equal(invalid.statusCode, 400);
    assert.equal(invalid.headers['ratelimit-limit'], '5');
    assert.ok(invalid.headers['ratelimit-remaining'] !== undefined);
    assert.ok(invalid.headers['ratelimit-reset'] !== undefined);
    const badJson = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { ...bearer(p.eventsKey), 'content-type': 'application/json' },
      payload: '{',
    });
    assert.equal(badJson.statusCode, 400);
    assert.equal(badJson.headers['ratelimit-limit'], '5');
    const forbidden = await post(p.reportsKey);
    assert.equal(forbidden.statusCode, 403);
    const batch = await post(p.eventsKey, { events: [event, { bad: true }] }, '/api/v2/events/batch');
    assert.equal(batch.statusCode, 207);
    assert.equal(batch.headers['ratelimit-limit'], '5');
  });

  it('the limit is per key: another key (same or other product) is unaffected', async () => {
    const p = await ctx.product('rl-per-key');
    const q = await ctx.product('rl-other');
    const second = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${p.id}/keys`,
      headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' },
      payload: { kind: 'events' },
    });
    const secondKey = second.json().data.key as string;
    for (let i = 0; i < 5; i++) await post(p.eventsKey);
    assert.equal((await post(p.eventsKey)).statusCode, 429);
    const other = await post(secondKey);
    assert.equal(other.statusCode, 201);
    assert.equal(other.headers['ratelimit-remaining'], '4');
    assert.equal((await post(q.eventsKey)).statusCode, 201);
  });

  it('concurrent bursts never let more than the burst through', async () => {
    const p = await ctx.product('rl-concurrent');
    const responses = await Promise.all(Array.from({ length: 20 }, () => post(p.eventsKey)));
    const ok = responses.filter((r) => r.statusCode === 201).length;
    const limited = responses.filter((r) => r.statusCode === 429).length;
    assert.equal(ok, 5);
    assert.equal(ok + limited, 20);
  });

  it('unauthenticated requests are answered 401, not 429, and carry no RateLimit headers', async () => {
    const res = await ctx.app.inject({ method: 'POST', url: '/api/v2/events', payload: event });
    assert.equal(res.statusCode, 401);
    assert.equal(res.headers['ratelimit-limit'], undefined);
  });
});

describe('rate limiting off (rateLimitRps: 0)', () => {
  let ctx: TestContext;
  before(async () => {
    ctx = await createTestApp({ rateLimitRps: 0, rateLimitBurst: 0 });
  });
  after(async () => ctx.close());

  it('never limits and sends no RateLimit headers', async () => {
    const p = await ctx.product('rl-off');
    const responses = await Promise.all(
      Array.from({ length: 30 }, () =>
        ctx.app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(p.eventsKey), payload: event }),
      ),
    );
    for (const res of responses) {
      assert.equal(res.statusCode, 201);
      assert.equal(res.headers['ratelimit-limit'], undefined);
      assert.equal(res.headers['ratelimit-remaining'], undefined);
      assert.equal(res.headers['ratelimit-reset'], undefined);
    }
  });
});

describe('token bucket (injected clock)', () => {
  it('starts full at the burst, refuses when empty, refills at the rate', () => {
    const limiter = createInMemoryRateLimiter(10, 20);
    assert.equal(limiter.enabled, true);
    const t0 = 1_000_000;
    for (let i = 0; i < 20; i++) {
      const d = limiter.take('k', t0);
      assert.equal(d.allowed, true, `request ${i}`);
      assert.equal(d.limit, 20);
      assert.equal(d.remaining, 19 - i);
    }
    const refused = limiter.take('k', t0);
    assert.equal(refused.allowed, false);
    assert.equal(refused.remaining, 0);
    assert.equal(refused.retryAfterSeconds, 1);
    assert.equal(refused.resetSeconds, 2); // 20 tokens at 10/s
    // 100 ms later: one token.
    assert.equal(limiter.take('k', t0 + 100).allowed, true);
    assert.equal(limiter.take('k', t0 + 100).allowed, false);
    // A long pause refills only up to the burst.
    const later = t0 + 60_000;
    let allowed = 0;
    while (limiter.take('k', later).allowed) allowed++;
    assert.equal(allowed, 20);
  });

  const table: Array<{ rps: number; burst: number; expectLimit: number }> = [
    { rps: 5, burst: 5, expectLimit: 5 },
    { rps: 2000, burst: 4000, expectLimit: 4000 },
    { rps: 1, burst: 3, expectLimit: 3 },
    { rps: 10, burst: 0, expectLimit: 10 }, // burst unset: the rate
  ];
  for (const { rps, burst, expectLimit } of table) {
    it(`rps ${rps}, burst ${burst}: capacity ${expectLimit}`, () => {
      const limiter = createInMemoryRateLimiter(rps, burst);
      let n = 0;
      while (limiter.take('k', 0).allowed) n++;
      assert.equal(n, expectLimit);
    });
  }

  it('Retry-After is the time until one token, rounded up to whole seconds', () => {
    const limiter = createInMemoryRateLimiter(0.5 as number, 1);
    assert.equal(limiter.take('k', 0).allowed, true);
    const refused = limiter.take('k', 0);
    assert.equal(refused.allowed, false);
    assert.equal(refused.retryAfterSeconds, 2);
    assert.equal(limiter.take('k', 1000).retryAfterSeconds, 1);
    assert.equal(limiter.take('k', 2000).allowed, true);
  });

  it('a clock going backwards does not mint tokens', () => {
    const limiter = createInMemoryRateLimiter(1, 1);
    assert.equal(limiter.take('k', 10_000).allowed, true);
    assert.equal(limiter.take('k', 5_000).allowed, false);
    assert.equal(limiter.take('k', 10_500).allowed, false);
  });

  it('keys have separate buckets', () => {
    const limiter = createInMemoryRateLimiter(1, 1);
    assert.equal(limiter.take('a', 0).allowed, true);
    assert.equal(limiter.take('a', 0).allowed, false);
    assert.equal(limiter.take('b', 0).allowed, true);
  });

  it('rate 0 is disabled', () => {
    assert.equal(createInMemoryRateLimiter(0, 0).enabled, false);
  });
});
