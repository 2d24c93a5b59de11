// The only module that reads process.env. Every setting is validated once, at start-up;
// a bad value stops the process with a message that names the variable.
import { accessSync, constants } from 'node:fs';
import { resolve } from 'node:path';
import type { LegacyFlatMode } from './domain/legacy-policy.js';
import { checkDatabaseUrl } from './storage/connect.js';
import { parseAllowList } from './services/outbound-guard.js';
import { parseInterval } from './domain/backups.js';

export type { LegacyFlatMode };
export type SqliteSynchronous = 'full' | 'normal';

export interface Config {
  port: number;
  host: string;
  databaseUrl: string;
  adminToken: string | undefined;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  legacyFlat: LegacyFlatMode;
  sqliteSynchronous: SqliteSynchronous;
  /** SQLite file: events stored in-process before the writer thread takes the commits over (Infinity: never). */
  sqliteWriterThreadAfter: number;
  rateLimitRps: number;
  rateLimitBurst: number;
  /** Where rate-limit buckets live: this process (`memory`), or shared by every instance (`postgres`, `redis`). */
  rateLimitStore: 'memory' | 'postgres' | 'redis';
  /** For INLET_RATE_LIMIT_STORE=redis. */
  redisUrl: string | undefined;
  maxBodyBytes: number;
  maxEventBytes: number;
  maxBatchEvents: number;
  keyCacheTtlMs: number;
  postgresPoolSize: number;
  /** PostgreSQL: client-side deadline per query (ms; 0 = none). */
  databaseQueryTimeoutMs: number;
  trafficSyncIntervalMs: number;
  /** How long a traffic sync keeps retrying a provider's 429/5xx before it gives up. */
  trafficRetryMaxMs: number;
  shutdownTimeoutMs: number;
  /** Receiving a request's line and headers: from its first byte (a new connection: from the connection) on. */
  headersTimeoutMs: number;
  /** Receiving a whole request, headers and body, from its first byte on. Answers are never timed. */
  requestTimeoutMs: number;
  /** How long an idle keep-alive connection stays open between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections at most; further ones are closed at once. */
  maxConnections: number;
  /** Largest request line plus headers, in bytes. */
  maxHeaderBytes: number;
  /** Live event streams open at once on this instance; one more → 503 with Retry-After. */
  eventStreamsMax: number;
  /** Bytes a live stream may have waiting for a slow consumer before it is cut off. */
  eventStreamBufferBytes: number;
  /** How often the live stream's tail reader polls storage. */
  eventStreamPollMs: number;
  /** INLET_PUBLIC_URL: the URL browsers reach this server at (Segment settings' apiHost); else the request's Host. */
  publicUrl: string | undefined;
  /** Requests per second a browser key may send from one client IP (burst twice that); 0 switches it off. */
  browserRateLimitPerIp: number;
  rejectionsRetentionDays: number;
  rejectionsMaxPerHour: number;
  /** INLET_TRUST_PROXY: false (default), a hop count, or the proxies' addresses/CIDRs (clarifications §23). */
  trustProxy: false | number | string[];
  /** INLET_OUTBOUND_ALLOW: hosts, addresses and CIDRs outbound connections may reach; undefined: any public address. */
  outboundAllow: string[] | undefined;
  /**
   * INLET_OUTBOUND_ALLOW_PRIVATE: allow loopback, private and link-local targets for every outbound connection
   * (webhooks, NATS, PostgreSQL warehouses, traffic providers; outbound-guard.ts). Its old name
   * INLET_DESTINATIONS_ALLOW_PRIVATE still works.
   */
  outboundAllowPrivate: boolean;
  /** Settings given under a deprecated name (still honoured): what the process warns about at start. */
  deprecations: string[];
  /** A delivery attempt's time limit (webhook request, NATS publish acknowledgements). */
  destinationTimeoutMs: number;
  /** A destination failing for this long without one success is disabled. */
  destinationDisableAfterMs: number;
  /** How often each instance looks for destinations to deliver and takes or renews their leases. */
  destinationPollMs: number;
  /** How long a deliverer's lease lasts without renewal (takeover time after its instance died). */
  destinationLeaseMs: number;
  /** How long the delivery log keeps attempts. */
  destinationLogRetentionDays: number;
  /** INLET_WAREHOUSE_MAX_TABLES (500): event tables per warehouse schema (warehouses.md §1). */
  warehouseMaxTables: number;
  /** INLET_WAREHOUSE_MAX_COLUMNS (1000): property columns per warehouse table. */
  warehouseMaxColumns: number;
  /** INLET_FILE_DESTINATIONS_ROOT: the folder Parquet destinations write under; unset: the type is refused. */
  fileDestinationsRoot: string | undefined;
  /** INLET_DESTINATIONS_WORKER (default on): deliver in a worker thread with its own storage connection, off the request loop. */
  destinationsWorker: boolean;
  /** INLET_DESTINATIONS_WORKER_NICE (10; 0–19): the delivery worker thread's nice value on Linux, 0 to keep the process's. */
  destinationsWorkerNice: number;
  /** The web console at /console (issue 14): INLET_CONSOLE on|off; served only while the admin API is on. */
  consoleEnabled: boolean;
  /** The event catalogue (governance.md §1): INLET_CATALOG on|off, its bounds and flush interval. */
  catalogEnabled: boolean;
  catalogMaxEvents: number;
  catalogMaxProperties: number;
  catalogFlushMs: number;
  /** How old a cached tracking plan may get before an instance asks storage for a newer version. */
  trackingPlanRefreshMs: number;
  violationsRetentionDays: number;
  violationsMaxPerHour: number;
  /**
   * INLET_INSTALLATION_SECRET: the HMAC key of suppressions and the erasure audit (governance.md §3).
   * Unset: a random key generated once and kept in the database (table installation_secrets).
   */
  installationSecret: string | undefined;
  /** How old an instance's copy of the suppressions may be; an erasure request answers after this long. */
  suppressionRefreshMs: number;
  /** How often a job runner looks for erasure jobs. */
  erasurePollMs: number;
  /** How long a `user.erased` message is kept for destinations that have not passed it. */
  erasureMessageKeepDays: number;
  /** How often the retention task runs (governance.md §4); 0: never. */
  retentionIntervalMs: number;
  /** Scheduled backups (docs/operations.md): INLET_BACKUP_DIR (made absolute), INLET_BACKUP_INTERVAL, INLET_BACKUP_KEEP; off by default. */
  backupSchedule: { dir: string; intervalMs: number; keep: number } | undefined;
  /** CPU time of one call of a transformation's `function` step on one item (transformations.md §4). */
  transformFunctionCpuMs: number;
  /** Memory a transformation's function may allocate, array buffers included (transformations.md §4, §8). */
  transformFunctionMemoryMb: number;
  /** INLET_GEOIP_DATABASE: the MaxMind-format file the `geoip` step reads (made absolute); unset, the step is refused. */
  geoipDatabase: string | undefined;
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

/** INLET_FILE_DESTINATIONS_ROOT: an absolute path (the folder need not exist yet). */
function fileDestinationsRoot(env: Env): string | undefined {
  const raw = env.INLET_FILE_DESTINATIONS_ROOT?.trim() ?? '';
  if (raw === '') return undefined;
  if (!raw.startsWith('/'))
    throw new ConfigError(`INLET_FILE_DESTINATIONS_ROOT must be an absolute path, got "${raw}"`);
  return raw.length > 1 ? raw.replace(/\/+$/, '') : raw;
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

/** INLET_SQLITE_WRITER_THREAD_AFTER: a number of events, or `off` (never a writer thread: the default, until the
 *  thread is measured to pay; docs/design.md, "A writer thread for SQLite"). */
function writerThreadAfter(env: Env): number {
  const raw = env.INLET_SQLITE_WRITER_THREAD_AFTER;
  if (raw?.trim().toLowerCase() === 'off') return Infinity;
  try {
    return raw === undefined || raw.trim() === ''
      ? Infinity
      : integer(env, 'INLET_SQLITE_WRITER_THREAD_AFTER', 0, 0, 1_000_000_000);
  } catch {
    throw new ConfigError(`INLET_SQLITE_WRITER_THREAD_AFTER must be a whole number of events or "off", got "${raw}"`);
  }
}

function databaseUrl(env: Env): string {
  const raw = env.INLET_DATABASE_URL?.trim() || 'sqlite:./data/inlet.db';
  if (!/^(sqlite:|postgres:\/\/|postgresql:\/\/)/.test(raw)) {
    throw new ConfigError(
      `INLET_DATABASE_URL must start with sqlite: (for example sqlite:./data/inlet.db) or postgres://, got "${raw.replace(/\/\/([^@/]*):[^@/]*@/, '//$1:***@')}"`,
    );
  }
  if (raw.startsWith('sqlite:') && raw.slice('sqlite:'.length).length === 0) {
    throw new ConfigError('INLET_DATABASE_URL=sqlite: needs a file path, for example sqlite:./data/inlet.db');
  }
  if (!raw.startsWith('sqlite:')) {
    try {
      checkDatabaseUrl(raw);
    } catch (error) {
      throw new ConfigError(`INLET_DATABASE_URL: ${(error as Error).message}`);
    }
  }
  return raw;
}

function trustProxy(env: Env): false | number | string[] {
  const raw = env.INLET_TRUST_PROXY?.trim();
  if (raw === undefined || raw === '' || raw === 'false' || raw === '0') return false;
  if (/^\d+$/.test(raw)) return Number(raw);
  const entries = raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  for (const entry of entries) {
    if (!/^[0-9A-Fa-f:.]+(\/\d{1,3})?$/.test(entry)) {
      throw new ConfigError(
        `INLET_TRUST_PROXY must be a hop count or a comma list of proxy addresses/CIDRs (such as 10.0.0.0/8), got "${raw}"`,
      );
    }
  }
  return entries;
}

function flag(env: Env, name: string): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return false;
  if (['1', 'true', 'on', 'yes'].includes(raw)) return true;
  if (['0', 'false', 'off', 'no'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

function outboundAllow(env: Env): string[] | undefined {
  const raw = env.INLET_OUTBOUND_ALLOW?.trim();
  if (raw === undefined || raw === '') return undefined;
  const entries = raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  try {
    parseAllowList(entries);
  } catch (error) {
    throw new ConfigError(
      `INLET_OUTBOUND_ALLOW must be a comma list of host names, addresses and CIDRs (such as 127.0.0.0/8,::1): ${(error as Error).message}`,
    );
  }
  return entries;
}

/**
 * INLET_OUTBOUND_ALLOW_PRIVATE, or its old name INLET_DESTINATIONS_ALLOW_PRIVATE (clarifications §33), which
 * still works with a warning at start; both given and disagreeing stops start-up.
 */
function outboundAllowPrivate(env: Env, deprecations: string[]): boolean {
  const value = flag(env, 'INLET_OUTBOUND_ALLOW_PRIVATE');
  const old = env.INLET_DESTINATIONS_ALLOW_PRIVATE?.trim() ?? '';
  if (old === '') return value;
  const oldValue = flag(env, 'INLET_DESTINATIONS_ALLOW_PRIVATE');
  if ((env.INLET_OUTBOUND_ALLOW_PRIVATE?.trim() ?? '') === '') {
    deprecations.push(
      'INLET_DESTINATIONS_ALLOW_PRIVATE is deprecated: set INLET_OUTBOUND_ALLOW_PRIVATE instead (it covers webhooks, NATS, PostgreSQL warehouses and traffic providers)',
    );
    return oldValue;
  }
  if (value !== oldValue) {
    throw new ConfigError(
      `INLET_OUTBOUND_ALLOW_PRIVATE=${env.INLET_OUTBOUND_ALLOW_PRIVATE} and its deprecated name INLET_DESTINATIONS_ALLOW_PRIVATE=${old} disagree: remove INLET_DESTINATIONS_ALLOW_PRIVATE`,
    );
  }
  deprecations.push(
    'INLET_DESTINATIONS_ALLOW_PRIVATE is deprecated and not needed with INLET_OUTBOUND_ALLOW_PRIVATE set: remove it',
  );
  return value;
}

function publicUrl(env: Env): string | undefined {
  const raw = env.INLET_PUBLIC_URL?.trim();
  if (raw === undefined || raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(
      `INLET_PUBLIC_URL must be an absolute http(s) URL such as https://events.example.com, got "${raw}"`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError(`INLET_PUBLIC_URL must use http or https, got "${raw}"`);
  return raw;
}

export function loadConfig(env: Env = process.env): Config {
  const adminToken = env.INLET_ADMIN_TOKEN?.trim() || undefined;
  if (adminToken !== undefined && adminToken.length < 16) {
    throw new ConfigError('INLET_ADMIN_TOKEN must be at least 16 characters long (use a random secret)');
  }
  const rateLimitRps = integer(env, 'INLET_RATE_LIMIT_RPS', 2000, 0, 10_000_000);
  // A public ingest endpoint: SDKs send a few hundred bytes of headers and small bodies, so a sender
  // slower than this is most likely holding sockets on purpose (slowloris). 10 s for the headers and
  // 30 s for a whole request (a 1 MB batch needs ~35 KB/s) are far above what a real client needs on a
  // mobile link. Keep-alive outlasts the 60 s idle timeout of common load balancers, so a balancer
  // never reuses a socket Inlet is closing.
  const headersTimeoutMs = integer(env, 'INLET_HEADERS_TIMEOUT_MS', 10_000, 100, 300_000);
  const requestTimeoutMs = integer(env, 'INLET_REQUEST_TIMEOUT_MS', 30_000, 100, 3_600_000);
  if (requestTimeoutMs < headersTimeoutMs) {
    throw new ConfigError(
      `INLET_REQUEST_TIMEOUT_MS (${requestTimeoutMs}) must be at least INLET_HEADERS_TIMEOUT_MS (${headersTimeoutMs}): the request includes its headers`,
    );
  }
  const url = databaseUrl(env);
  const deprecations: string[] = [];
  // Several instances share one PostgreSQL: by default they share the buckets too.
  const rateLimitStore = oneOf(
    env,
    'INLET_RATE_LIMIT_STORE',
    ['memory', 'postgres', 'redis'] as const,
    url.startsWith('sqlite:') ? 'memory' : 'postgres',
  );
  if (rateLimitStore === 'postgres' && url.startsWith('sqlite:')) {
    throw new ConfigError(
      'INLET_RATE_LIMIT_STORE=postgres needs a PostgreSQL INLET_DATABASE_URL (with SQLite there is one instance: use memory)',
    );
  }
  const redisUrl = env.INLET_REDIS_URL?.trim() || undefined;
  if (rateLimitStore === 'redis' && redisUrl === undefined)
    throw new ConfigError('INLET_RATE_LIMIT_STORE=redis needs INLET_REDIS_URL (for example redis://127.0.0.1:6379)');
  return {
    port: integer(env, 'PORT', 3000, 0, 65535),
    host: env.HOST?.trim() || '127.0.0.1',
    databaseUrl: url,
    adminToken,
    logLevel: oneOf(env, 'INLET_LOG_LEVEL', LOG_LEVELS, 'info'),
    legacyFlat: oneOf(env, 'INLET_LEGACY_FLAT', ['accept', 'reject'] as const, 'accept'),
    sqliteSynchronous: oneOf(env, 'INLET_SQLITE_SYNCHRONOUS', ['full', 'normal'] as const, 'full'),
    sqliteWriterThreadAfter: writerThreadAfter(env),
    rateLimitRps,
    rateLimitBurst: integer(env, 'INLET_RATE_LIMIT_BURST', rateLimitRps * 2, 0, 20_000_000),
    rateLimitStore,
    redisUrl,
    maxBodyBytes: integer(env, 'INLET_MAX_BODY_BYTES', 5 * 1024 * 1024, 1024, 512 * 1024 * 1024),
    maxEventBytes: integer(env, 'INLET_MAX_EVENT_BYTES', 32 * 1024, 256, 16 * 1024 * 1024),
    maxBatchEvents: integer(env, 'INLET_MAX_BATCH_EVENTS', 1000, 1, 100_000),
    keyCacheTtlMs: integer(env, 'INLET_KEY_CACHE_TTL_MS', 1000, 0, 3_600_000),
    eventStreamsMax: integer(env, 'INLET_EVENT_STREAMS_MAX', 100, 0, 100_000),
    eventStreamBufferBytes: integer(env, 'INLET_EVENT_STREAM_BUFFER_BYTES', 1024 * 1024, 16 * 1024, 1024 * 1024 * 1024),
    eventStreamPollMs: integer(env, 'INLET_EVENT_STREAM_POLL_MS', 250, 10, 5_000),
    postgresPoolSize: integer(env, 'INLET_PG_POOL_SIZE', 10, 1, 1000),
    databaseQueryTimeoutMs: integer(env, 'INLET_DATABASE_QUERY_TIMEOUT_MS', 15_000, 0, 3_600_000),
    trafficSyncIntervalMs: integer(env, 'INLET_TRAFFIC_SYNC_INTERVAL_MS', 3_600_000, 0, 7 * 24 * 3_600_000),
    trafficRetryMaxMs: integer(env, 'INLET_TRAFFIC_RETRY_MAX_MS', 60_000, 0, 3_600_000),
    shutdownTimeoutMs: integer(env, 'INLET_SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000),
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: integer(env, 'INLET_KEEP_ALIVE_TIMEOUT_MS', 72_000, 100, 3_600_000),
    maxConnections: integer(env, 'INLET_MAX_CONNECTIONS', 10_000, 1, 10_000_000),
    maxHeaderBytes: integer(env, 'INLET_MAX_HEADER_BYTES', 16_384, 1024, 1_048_576),
    publicUrl: publicUrl(env),
    browserRateLimitPerIp: integer(env, 'INLET_BROWSER_RATE_LIMIT_PER_IP', 50, 0, 1_000_000),
    rejectionsRetentionDays: integer(env, 'INLET_REJECTIONS_RETENTION_DAYS', 14, 1, 3650),
    trustProxy: trustProxy(env),
    rejectionsMaxPerHour: integer(env, 'INLET_REJECTIONS_MAX_PER_HOUR', 10_000, 0, 10_000_000),
    outboundAllow: outboundAllow(env),
    outboundAllowPrivate: outboundAllowPrivate(env, deprecations),
    destinationTimeoutMs: integer(env, 'INLET_DESTINATION_TIMEOUT_MS', 15_000, 100, 120_000),
    destinationDisableAfterMs: integer(env, 'INLET_DESTINATION_DISABLE_AFTER_HOURS', 24, 1, 24 * 365) * 3_600_000,
    destinationPollMs: integer(env, 'INLET_DESTINATION_POLL_MS', 500, 10, 10_000),
    destinationLeaseMs: integer(env, 'INLET_DESTINATION_LEASE_MS', 15_000, 1_000, 20_000),
    destinationLogRetentionDays: integer(env, 'INLET_DESTINATION_LOG_RETENTION_DAYS', 7, 1, 3650),
    warehouseMaxTables: integer(env, 'INLET_WAREHOUSE_MAX_TABLES', 500, 1, 100_000),
    warehouseMaxColumns: integer(env, 'INLET_WAREHOUSE_MAX_COLUMNS', 1000, 1, 1600),
    fileDestinationsRoot: fileDestinationsRoot(env),
    destinationsWorker: (env.INLET_DESTINATIONS_WORKER?.trim() ?? '') === '' || flag(env, 'INLET_DESTINATIONS_WORKER'),
    destinationsWorkerNice: integer(env, 'INLET_DESTINATIONS_WORKER_NICE', 10, 0, 19),
    consoleEnabled: oneOf(env, 'INLET_CONSOLE', ['on', 'off'] as const, 'on') === 'on',
    catalogEnabled: oneOf(env, 'INLET_CATALOG', ['on', 'off'] as const, 'on') === 'on',
    catalogMaxEvents: integer(env, 'INLET_CATALOG_MAX_EVENTS', 5000, 1, 1_000_000),
    catalogMaxProperties: integer(env, 'INLET_CATALOG_MAX_PROPERTIES', 500, 1, 100_000),
    // governance.md §1: flushed at least every 10 s.
    catalogFlushMs: integer(env, 'INLET_CATALOG_FLUSH_MS', 5000, 10, 10_000),
    trackingPlanRefreshMs: integer(env, 'INLET_TRACKING_PLAN_REFRESH_MS', 5000, 0, 600_000),
    violationsRetentionDays: integer(env, 'INLET_VIOLATIONS_RETENTION_DAYS', 30, 1, 3650),
    violationsMaxPerHour: integer(env, 'INLET_VIOLATIONS_MAX_PER_HOUR', 10_000, 0, 10_000_000),
    installationSecret: installationSecret(env),
    suppressionRefreshMs: integer(env, 'INLET_SUPPRESSION_REFRESH_MS', 1000, 10, 60_000),
    erasurePollMs: integer(env, 'INLET_ERASURE_POLL_MS', 1000, 10, 60_000),
    erasureMessageKeepDays: integer(env, 'INLET_ERASURE_MESSAGE_KEEP_DAYS', 30, 1, 3650),
    retentionIntervalMs: integer(env, 'INLET_RETENTION_INTERVAL_MS', 600_000, 0, 86_400_000),
    backupSchedule: backupSchedule(env),
    // transformations.md §4: 50 ms of CPU and 32 MB per call.
    transformFunctionCpuMs: integer(env, 'INLET_TRANSFORM_FUNCTION_CPU_MS', 50, 1, 10_000),
    transformFunctionMemoryMb: integer(env, 'INLET_TRANSFORM_FUNCTION_MEMORY_MB', 32, 16, 1024),
    geoipDatabase: readableFile(env, 'INLET_GEOIP_DATABASE'),
    deprecations,
  };
}

/** A path to a file this process can read, or undefined when unset; whether its content is valid is the opener's to say. */
function readableFile(env: Env, name: string): string | undefined {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return undefined;
  const path = resolve(raw);
  try {
    accessSync(path, constants.R_OK);
  } catch (error) {
    throw new ConfigError(
      `${name} names a file that cannot be read: "${raw}" (${(error as NodeJS.ErrnoException).code})`,
    );
  }
  return path;
}

function installationSecret(env: Env): string | undefined {
  const raw = env.INLET_INSTALLATION_SECRET?.trim();
  if (raw === undefined || raw === '') return undefined;
  if (raw.length < 32)
    throw new ConfigError(
      'INLET_INSTALLATION_SECRET must be at least 32 characters long (use a random secret, e.g. openssl rand -base64 32)',
    );
  return raw;
}

function backupSchedule(env: Env): Config['backupSchedule'] {
  let intervalMs: number | undefined;
  try {
    intervalMs = parseInterval(env.INLET_BACKUP_INTERVAL);
  } catch (error) {
    throw new ConfigError(`INLET_BACKUP_INTERVAL ${(error as Error).message}`);
  }
  if (intervalMs !== undefined && (intervalMs < 1000 || intervalMs > 366 * 86_400_000))
    throw new ConfigError(`INLET_BACKUP_INTERVAL must be between 1s and 366d, got "${env.INLET_BACKUP_INTERVAL}"`);
  const keep = integer(env, 'INLET_BACKUP_KEEP', 7, 1, 100_000);
  const dir = env.INLET_BACKUP_DIR?.trim() || undefined;
  if (intervalMs !== undefined && dir === undefined)
    throw new ConfigError('INLET_BACKUP_INTERVAL is set but INLET_BACKUP_DIR is not: set where the backups go');
  if (intervalMs === undefined && dir !== undefined)
    throw new ConfigError(
      'INLET_BACKUP_DIR is set but INLET_BACKUP_INTERVAL is not: set how often to back up, e.g. 6h',
    );
  return intervalMs === undefined || dir === undefined ? undefined : { dir: resolve(dir), intervalMs, keep };
}
