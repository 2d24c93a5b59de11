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
//   An instance does not ask the store for every request: it takes a *lease* of up to 1/50 of the window's
//   points at a time (at most 1,000; one at a time for small limits) and spends it in memory until the window
//   ends (leasedLimiter). A store write per request made the store the bottleneck: one hot row per key, a
//   round trip and a commit each (PostgreSQL single events 1,587 req/s with it, 4,514 with the memory store,
//   bench/runs/2026-11-erasure.md). What a lease leaves unspent at the window's end is lost, at most 2 % per instance.

import {
  RateLimiterMemory,
  RateLimiterPostgres,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';

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

/** Points an instance takes from the shared store at a time for a window of `points` (see the top of the file). */
export function leaseSize(points: number): number {
  return Math.max(1, Math.min(1000, Math.floor(points / 50)));
}

interface Lease {
  /** Points taken from the store and not yet spent here. */
  tokens: number;
  /** When the store's window ends (the lease with it), ms since the epoch. */
  endsAt: number;
  /** What the store had left when the lease was taken (RateLimit-Remaining adds what is left of the lease). */
  storeRemaining: number;
  /** The window had no whole lease left: single points from then on, so none is lost. */
  single: boolean;
  /** The window is used up: refused here until it ends, without asking the store. */
  refused: boolean;
}

/**
 * A shared window limiter spent in leases (see the top of the file): a request is decided in memory while its
 * key's lease lasts; when it runs out, one request per key asks the store for the next (the others wait for
 * that answer). A lease the store cannot fill any more is given back, and the rest of the window is taken one
 * point at a time, so the window's last points are not lost either.
 */
export function leasedLimiter(
  limiter: Pick<RateLimiterAbstract, 'consume' | 'reward'>,
  points: number,
  now: () => number = Date.now,
): RateLimiter {
  const size = leaseSize(points);
  const leases = new Map<string, Lease>();
  const asking = new Map<string, Promise<Lease>>();
  let sweepAt = 10_000;
  const decision = (lease: Lease, allowed: boolean, at: number): RateLimitDecision => {
    const ms = Math.max(0, lease.endsAt - at);
    return {
      allowed,
      limit: points,
      remaining: allowed ? Math.max(0, lease.storeRemaining + lease.tokens) : 0,
      resetSeconds: Math.ceil(ms / 1000),
      retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil(ms / 1000)),
    };
  };
  /** The next lease of `key` from the store (kept in `leases`). */
  async function ask(key: string, previous: Lease | undefined): Promise<Lease> {
    const single = previous !== undefined && previous.single && now() < previous.endsAt;
    const want = single ? 1 : size;
    const started = now();
    let lease: Lease;
    try {
      const res = await limiter.consume(key, want);
      lease = {
        tokens: want,
        endsAt: started + res.msBeforeNext,
        storeRemaining: Math.max(0, res.remainingPoints),
        single,
        refused: false,
      };
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      if (want > 1) {
        // Not a whole lease left: give it back and take what is left point by point.
        await limiter.reward(key, want);
        return ask(key, {
          tokens: 0,
          endsAt: started + rejection.msBeforeNext,
          storeRemaining: 0,
          single: true,
          refused: false,
        });
      }
      lease = { tokens: 0, endsAt: started + rejection.msBeforeNext, storeRemaining: 0, single: true, refused: true };
    }
    leases.set(key, lease);
    if (leases.size >= sweepAt) {
      // Leases of windows that ended, dropped now and then (keys come and go).
      const at = now();
      for (const [k, l] of leases) if (l.endsAt <= at && !asking.has(k)) leases.delete(k);
      sweepAt = Math.max(10_000, 2 * leases.size);
    }
    return lease;
  }
  /** A decision from `lease`, or undefined when it has nothing left to give and has not been refused. */
  const spend = (lease: Lease, at: number): RateLimitDecision | undefined => {
    if (lease.tokens > 0) {
      lease.tokens--;
      return decision(lease, true, at);
    }
    return lease.refused ? decision(lease, false, at) : undefined;
  };
  const take = (key: string): RateLimitDecision | Promise<RateLimitDecision> => {
    const at = now();
    const lease = leases.get(key);
    const decided = lease !== undefined && at < lease.endsAt ? spend(lease, at) : undefined;
    if (decided !== undefined) return decided;
    let pending = asking.get(key);
    if (pending === undefined) {
      pending = ask(key, lease).finally(() => asking.delete(key));
      asking.set(key, pending);
    }
    // A lease just taken is spent even if its window ended meanwhile; when other waiters emptied it, ask again.
    return pending.then((fresh) => spend(fresh, now()) ?? take(key));
  };
  return { enabled: true, take };
}

/**
 * Buckets shared through `store`. `ready` resolves once the store's table exists (PostgreSQL).
 * rate-limiter-flexible answers a refusal by rejecting with a RateLimiterRes; an Error means the
 * store failed even after the insurance limiter, which cannot happen with an in-memory insurance.
 */
export function createSharedRateLimiter(
  ratePerSecond: number,
  burst: number,
  store: SharedStore,
): RateLimiter & { ready: Promise<void> } {
  const { points, durationSeconds } = windowFor(ratePerSecond, burst);
  const common = {
    points,
    duration: durationSeconds,
    keyPrefix: 'inlet',
    insuranceLimiter: new RateLimiterMemory({ points, duration: durationSeconds }),
  };
  let limiter: RateLimiterAbstract;
  let ready: Promise<void>;
  if (ratePerSecond <= 0) {
    return {
      enabled: false,
      ready: Promise.resolve(),
      take: () => ({ allowed: true, limit: points, remaining: points, resetSeconds: 0, retryAfterSeconds: 0 }),
    };
  }
  if (store.kind === 'postgres') {
    const create = () =>
      new Promise<void>((resolve, reject) => {
        limiter = new RateLimiterPostgres(
          {
            ...common,
            storeClient: store.pool,
            storeType: 'pool',
            tableName: RATE_LIMIT_TABLE,
            clearExpiredByTimeout: true,
          },
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
    limiter = new RateLimiterRedis({
      ...common,
      storeClient: store.client,
      useRedisPackage: true,
      rejectIfRedisNotReady: true,
    });
    ready = Promise.resolve();
  }
  // Through `limiter` as it is at each call: a failed creation (above) replaces it.
  const leased = leasedLimiter(
    { consume: (key, n) => limiter.consume(key, n), reward: (key, n) => limiter.reward(key, n) },
    points,
  );
  return { enabled: true, ready, take: (key) => leased.take(key) };
}
