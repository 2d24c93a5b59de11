// One place builds the world: storage and every service. Used by the HTTP server, the CLI and the
// background jobs alike; nothing else opens storage.
import type { Config } from './config.js';
import { openStorage, type OpenedStorage } from './storage/connect.js';
import { createIdentityService, type IdentityService } from './services/identity-service.js';
import { createIngestService, type IngestService } from './services/ingest-service.js';
import { createKeyService, type KeyService } from './services/key-service.js';
import { createMetrics, type Metrics } from './services/metrics.js';
import { createInMemoryRateLimiter, type RateLimiter } from './services/rate-limiter.js';

export interface Services {
  config: Config;
  storage: OpenedStorage;
  metrics: Metrics;
  keys: KeyService;
  ingest: IngestService;
  identity: IdentityService;
  rateLimiter: RateLimiter;
  /** Flushes pending writes and closes storage. */
  close(): Promise<void>;
}

export interface CreateServicesOptions {
  postgresSchema?: string;
  defaultMetrics?: boolean;
}

export async function createServices(config: Config, options: CreateServicesOptions = {}): Promise<Services> {
  const storage = await openStorage(config.databaseUrl, {
    sqliteSynchronous: config.sqliteSynchronous,
    ...(options.postgresSchema === undefined ? {} : { postgresSchema: options.postgresSchema }),
  });
  const metrics = createMetrics({ defaultMetrics: options.defaultMetrics ?? true });
  const keys = createKeyService(storage, { cacheTtlMs: config.keyCacheTtlMs });
  const ingest = createIngestService(storage, metrics);
  const identity = createIdentityService(storage);
  const rateLimiter = createInMemoryRateLimiter(config.rateLimitRps, config.rateLimitBurst);
  let closed: Promise<void> | undefined;
  return {
    config,
    storage,
    metrics,
    keys,
    ingest,
    identity,
    rateLimiter,
    close() {
      closed ??= (async () => {
        await ingest.close();
        await keys.close();
        await storage.close();
      })();
      return closed;
    },
  };
}
