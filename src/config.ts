// The only module that reads process.env. Every setting is validated once, at start-up;
// a bad value stops the process with a message that names the variable.
import { postgresTarget } from './storage/postgres/connection-url.js';

export type LegacyFlatMode = 'accept' | 'reject';
export type SqliteSynchronous = 'full' | 'normal';

export interface Config {
  port: number;
  host: string;
  databaseUrl: string;
  adminToken: string | undefined;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  legacyFlat: LegacyFlatMode;
  sqliteSynchronous: SqliteSynchronous;
  rateLimitRps: number;
  rateLimitBurst: number;
  maxBodyBytes: number;
  maxEventBytes: number;
  maxBatchEvents: number;
  keyCacheTtlMs: number;
  postgresPoolSize: number;
  trafficSyncIntervalMs: number;
  /** How long a traffic sync keeps retrying a provider's 429/5xx before it gives up. */
  trafficRetryMaxMs: number;
  shutdownTimeoutMs: number;
  /** Receiving a request's headers, from the connection (or the previous answer) on. */
  headersTimeoutMs: number;
  /** Receiving a whole request, headers and body; answers (long ones included) are not timed. */
  requestTimeoutMs: number;
  /** How long an idle keep-alive connection stays open between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections at most; further ones are closed at once. */
  maxConnections: number;
  /** Largest request line plus headers, in bytes. */
  maxHeaderBytes: number;
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw.trim());
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = raw.trim().toLowerCase();
  if (!(allowed as readonly string[]).includes(value)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  }
  return value as T;
}

function databaseUrl(env: Env): string {
  const raw = env.INLET_DATABASE_URL?.trim() || 'sqlite:./data/inlet.db';
  if (!/^(sqlite:|postgres:\/\/|postgresql:\/\/)/.test(raw)) {
    throw new ConfigError(
      `INLET_DATABASE_URL must start with sqlite: (for example sqlite:./data/inlet.db) or postgres://, got "${raw}"`,
    );
  }
  if (raw.startsWith('sqlite:') && raw.slice('sqlite:'.length).length === 0) {
    throw new ConfigError('INLET_DATABASE_URL=sqlite: needs a file path, for example sqlite:./data/inlet.db');
  }
  if (!raw.startsWith('sqlite:')) {
    try {
      postgresTarget(raw);
    } catch (error) {
      throw new ConfigError(`INLET_DATABASE_URL: ${(error as Error).message}`);
    }
  }
  return raw;
}

export function loadConfig(env: Env = process.env): Config {
  const adminToken = env.INLET_ADMIN_TOKEN?.trim() || undefined;
  if (adminToken !== undefined && adminToken.length < 16) {
    throw new ConfigError('INLET_ADMIN_TOKEN must be at least 16 characters long (use a random secret)');
  }
  const rateLimitRps = integer(env, 'INLET_RATE_LIMIT_RPS', 2000, 0, 10_000_000);
  // A public ingest endpoint: clients send small bodies fast, so a slow sender is most likely an
  // attacker holding sockets (slowloris). 10 s for headers and 30 s for a whole 5 MiB body are far
  // above what a real SDK needs on a mobile link; keep-alive outlasts the 60 s idle timeout of common
  // load balancers, so a balancer never reuses a socket Inlet is closing.
  const headersTimeoutMs = integer(env, 'INLET_HEADERS_TIMEOUT_MS', 10_000, 100, 600_000);
  const requestTimeoutMs = integer(env, 'INLET_REQUEST_TIMEOUT_MS', 30_000, 100, 3_600_000);
  if (requestTimeoutMs < headersTimeoutMs) {
    throw new ConfigError(`INLET_REQUEST_TIMEOUT_MS (${requestTimeoutMs}) must be at least INLET_HEADERS_TIMEOUT_MS (${headersTimeoutMs})`);
  }
  return {
    port: integer(env, 'PORT', 3000, 0, 65535),
    host: env.HOST?.trim() || '127.0.0.1',
    databaseUrl: databaseUrl(env),
    adminToken,
    logLevel: oneOf(env, 'INLET_LOG_LEVEL', LOG_LEVELS, 'info'),
    legacyFlat: oneOf(env, 'INLET_LEGACY_FLAT', ['accept', 'reject'] as const, 'accept'),
    sqliteSynchronous: oneOf(env, 'INLET_SQLITE_SYNCHRONOUS', ['full', 'normal'] as const, 'full'),
    rateLimitRps,
    rateLimitBurst: integer(env, 'INLET_RATE_LIMIT_BURST', rateLimitRps * 2, 0, 20_000_000),
    maxBodyBytes: integer(env, 'INLET_MAX_BODY_BYTES', 5 * 1024 * 1024, 1024, 512 * 1024 * 1024),
    maxEventBytes: integer(env, 'INLET_MAX_EVENT_BYTES', 32 * 1024, 256, 16 * 1024 * 1024),
    maxBatchEvents: integer(env, 'INLET_MAX_BATCH_EVENTS', 1000, 1, 100_000),
    keyCacheTtlMs: integer(env, 'INLET_KEY_CACHE_TTL_MS', 1000, 0, 3_600_000),
    postgresPoolSize: integer(env, 'INLET_PG_POOL_SIZE', 10, 1, 1000),
    trafficSyncIntervalMs: integer(env, 'INLET_TRAFFIC_SYNC_INTERVAL_MS', 3_600_000, 0, 7 * 24 * 3_600_000),
    trafficRetryMaxMs: integer(env, 'INLET_TRAFFIC_RETRY_MAX_MS', 60_000, 0, 3_600_000),
    shutdownTimeoutMs: integer(env, 'INLET_SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000),
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: integer(env, 'INLET_KEEP_ALIVE_TIMEOUT_MS', 72_000, 100, 3_600_000),
    maxConnections: integer(env, 'INLET_MAX_CONNECTIONS', 10_000, 1, 10_000_000),
    maxHeaderBytes: integer(env, 'INLET_MAX_HEADER_BYTES', 16_384, 1024, 1_048_576),
  };
}
