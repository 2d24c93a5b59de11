// Builds the rate limiter INLET_RATE_LIMIT_STORE asks for (see rate-limiter.ts). It takes its
// settings and, for the PostgreSQL store, the pool to use: the composition root (src/services.ts)
// hands them over, so this service knows neither the config module nor the storage adapter.
import type pg from 'pg';
import { createInMemoryRateLimiter, createSharedRateLimiter, type RateLimiter } from './rate-limiter.js';

export interface RateLimiterSettings {
  store: 'memory' | 'postgres' | 'redis';
  /** Requests per second per key; 0 switches limiting off. */
  rps: number;
  burst: number;
  /** The redis store's server. */
  redisUrl: string | undefined;
  /** The postgres store's pool (PostgreSQL storage only). */
  postgresPool: (() => pg.Pool) | undefined;
}

export async function createRateLimiter(settings: RateLimiterSettings): Promise<RateLimiter> {
  const { rps: rate, burst } = settings;
  if (settings.store === 'memory' || rate <= 0) return createInMemoryRateLimiter(rate, burst);
  if (settings.store === 'postgres') {
    const pool = settings.postgresPool?.();
    if (pool === undefined) throw new Error('INLET_RATE_LIMIT_STORE=postgres needs PostgreSQL storage');
    const limiter = createSharedRateLimiter(rate, burst, { kind: 'postgres', pool });
    // The library creates its table (CREATE TABLE IF NOT EXISTS) once, at start-up, after migrations.
    await limiter.ready;
    return limiter;
  }
  const { createClient } = await import('redis');
  const client = createClient({ url: settings.redisUrl!, disableOfflineQueue: true, socket: { connectTimeout: 2000 } });
  client.on('error', () => {}); // reconnects by itself; the insurance limiter covers the gap
  await client.connect().catch(() => {});
  const limiter = createSharedRateLimiter(rate, burst, { kind: 'redis', client });
  return {
    ...limiter,
    async close() {
      await client.quit().catch(() => {});
    },
  };
}
