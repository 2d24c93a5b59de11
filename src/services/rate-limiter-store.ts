// Builds the rate limiter INLET_RATE_LIMIT_STORE asks for (see rate-limiter.ts).
import type { Config } from '../config.js';
import type { OpenedStorage } from '../storage/connect.js';
import { createInMemoryRateLimiter, createSharedRateLimiter, type RateLimiter } from './rate-limiter.js';

export async function createRateLimiter(config: Config, storage: OpenedStorage): Promise<RateLimiter> {
  const { rateLimitRps: rate, rateLimitBurst: burst } = config;
  if (config.rateLimitStore === 'memory' || rate <= 0) return createInMemoryRateLimiter(rate, burst);
  if (config.rateLimitStore === 'postgres') {
    const pool = storage.rateLimitPool?.();
    if (pool === undefined) throw new Error('INLET_RATE_LIMIT_STORE=postgres needs PostgreSQL storage');
    const limiter = createSharedRateLimiter(rate, burst, { kind: 'postgres', pool });
    // The library creates its table (CREATE TABLE IF NOT EXISTS) once, at start-up, after migrations.
    await limiter.ready;
    return limiter;
  }
  const { createClient } = await import('redis');
  const client = createClient({ url: config.redisUrl!, disableOfflineQueue: true, socket: { connectTimeout: 2000 } });
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
