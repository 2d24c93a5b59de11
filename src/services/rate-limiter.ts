// Per-key token bucket (contract §7). The store is an interface so a shared one (Redis, PostgreSQL)
// can replace the in-process map when several instances must share one budget.

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
  take(key: string, now?: number): RateLimitDecision;
}

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export function createInMemoryRateLimiter(ratePerSecond: number, burst: number): RateLimiter {
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
