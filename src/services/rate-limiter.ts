// Per-key rate limits (contract §7), in one of two forms chosen by INLET_RATE_LIMIT_STORE:
// - `memory`: a token bucket per key in this process. Exact and free, but each instance has its own:
//   N instances behind a balancer let a key through N times. The default on SQLite (one process).
// - `postgres` (the default on PostgreSQL): buckets shared by every instance, kept in PostgreSQL by
//   rate-limiter-flexible (a maintained library; no hand-written SQL here). `redis` keeps them in Redis
//   instead (INLET_REDIS_URL). Both are fixed windows, not token buckets: a window of
//   W = ceil(burst / rate) seconds holds `burst` requests, so a key averages `rate` requests/s and can
//   get up to 2 × burst across a window boundary. While the store is unreachable (a failover), each
//   instance falls back to an in-process window of the same size (the library's insurance limiter), so
//   limits loosen to per-instance for those seconds instead of failing requests.

import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';

export interface RateLimitDecision {
  allowed: boolean;
  /** Bucket capacity (the burst). */
  limit: number;
  /** Whole tokens left after this request. */
  remaining: number;
  /** Seconds until the bucket is full again. */
  resetSeconds: number;
  /** Seconds until one token is available (for Retry-After), when refused. */
  retryAfterSeconds: number;
}

export interface RateLimiter {
  readonly enabled: boolean;
  /** Synchronous for the in-process limiter (no promise on the hot path), a promise for a shared one. */
  take(key: string, now?: number): RateLimitDecision | Promise<RateLimitDecision>;
  close?(): Promise<void>;
}

export interface InMemoryRateLimiter extends RateLimiter {
  take(key: string, now?: number): RateLimitDecision;
}

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export function createInMemoryRateLimiter(ratePerSecond: number, burst: number): InMemoryRateLimiter {
  const capacity = Math.max(1, burst || ratePerSecond);
  const buckets = new Map<string, Bucket>();
  return {
    enabled: ratePerSecond > 0,
    take(key, now = Date.now()) {
      let bucket = buckets.get(key);
      if (bucket === undefined) {
        bucket = { tokens: capacity, updatedAt: now };
        buckets.set(key, bucket);
      } else {
        const elapsed = Math.max(0, now - bucket.updatedAt) / 1000;
        bucket.tokens = Math.min(capacity, bucket.tokens + elapsed * ratePerSecond);
        // Never move backwards: a clock step back would otherwise re-credit time already counted.
        bucket.updatedAt = Math.max(bucket.updatedAt, now);
      }
      const allowed = bucket.tokens >= 1;
      if (allowed) bucket.tokens -= 1;
      return {
        allowed,
        limit: capacity,
        remaining: Math.floor(bucket.tokens),
        resetSeconds: Math.ceil((capacity - bucket.tokens) / ratePerSecond),
        retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((1 - bucket.tokens) / ratePerSecond)),
      };
    },
  };
}

/** The table rate-limiter-flexible keeps its windows in (it creates it: key, points, expire). */
export const RATE_LIMIT_TABLE = 'inlet_rate_limits';

export type SharedStore = { kind: 'postgres'; pool: unknown } | { kind: 'redis'; client: unknown };

/** Window size and points for a rate and burst (see the top of this file). */
export function windowFor(ratePerSecond: number, burst: number): { points: number; durationSeconds: number } {
  const points = Math.max(1, burst || ratePerSecond);
  return { points, durationSeconds: Math.max(1, Math.ceil(points / ratePerSecond)) };
}

/**
 * Buckets shared through `store`. `ready` resolves once the store's table exists (PostgreSQL).
 * rate-limiter-flexible answers a refusal by rejecting with a RateLimiterRes; an Error means the
 * store failed even after the insurance limiter, which cannot happen with an in-memory insurance.
 */
export function createSharedRateLimiter(ratePerSecond: number, burst: number, store: SharedStore): RateLimiter & { ready: Promise<void> } {
  const { points, durationSeconds } = windowFor(ratePerSecond, burst);
  const common = { points, duration: durationSeconds, keyPrefix: 'inlet', insuranceLimiter: new RateLimiterMemory({ points, duration: durationSeconds }) };
  let limiter: RateLimiterAbstract;
  let ready: Promise<void>;
  if (ratePerSecond <= 0) {
    return { enabled: false, ready: Promise.resolve(), take: () => ({ allowed: true, limit: points, remaining: points, resetSeconds: 0, retryAfterSeconds: 0 }) };
  }
  if (store.kind === 'postgres') {
    const create = () =>
      new Promise<void>((resolve, reject) => {
        limiter = new RateLimiterPostgres(
          { ...common, storeClient: store.pool, storeType: 'pool', tableName: RATE_LIMIT_TABLE, clearExpiredByTimeout: true },
          (error?: Error) => (error ? reject(error) : resolve()),
        );
      });
    // The library creates its table with CREATE TABLE IF NOT EXISTS, which two instances starting at once on
    // a fresh database can both run: the loser fails with a duplicate table, type or key (42P07, 42710, 23505).
    // The table is there then: create the limiter again.
    ready = create().catch((error: unknown) => {
      const code = (error as { code?: unknown }).code;
      if (code !== '42P07' && code !== '42710' && code !== '23505') throw error;
      return new Promise((resolve) => setTimeout(resolve, 50)).then(create);
    });
  } else {
    limiter = new RateLimiterRedis({ ...common, storeClient: store.client, useRedisPackage: true, rejectIfRedisNotReady: true });
    ready = Promise.resolve();
  }
  const decide = (res: RateLimiterRes, allowed: boolean): RateLimitDecision => ({
    allowed,
    limit: points,
    remaining: Math.max(0, res.remainingPoints),
    resetSeconds: Math.ceil(res.msBeforeNext / 1000),
    retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil(res.msBeforeNext / 1000)),
  });
  return {
    enabled: true,
    ready,
    take(key) {
      return limiter.consume(key, 1).then(
        (res) => decide(res, true),
        (rejection: unknown) => {
          if (rejection instanceof RateLimiterRes) return decide(rejection, false);
          throw rejection;
        },
      );
    },
  };
}
