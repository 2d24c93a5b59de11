// One place builds the world: storage and every service. Used by the HTTP server, the CLI and the
// background jobs alike; nothing else opens storage.
import { ConfigError, type Config } from './config.js';
import { openStorage, type OpenedStorage, type OpenStorageOptions } from './storage/connect.js';
import { createIdentityService, type IdentityService } from './services/identity-service.js';
import { createIngestService, type IngestService } from './services/ingest/service.js';
import { createEventReadService, type EventReadService } from './services/event-read-service.js';
import { createEventStreams, type EventStreams } from './services/event-stream/service.js';
import { createKeyService, type KeyService } from './services/key-service.js';
import { createSegmentService, type SegmentService } from './services/segment-service.js';
import { createRejectionService, type RejectionService } from './services/rejection-service.js';
import { createCatalogService, type CatalogService } from './services/catalog-service.js';
import { createTrackingPlanService, type TrackingPlanService } from './services/tracking-plan-service.js';
import {
  createTransformationService,
  type TransformationLog,
  type TransformationService,
} from './services/transformations/service.js';
import type { TransformRuntime } from './services/transformations/runtime.js';
import { createTransformRuntime, destinationServiceOptions } from './transform-runtime.js';
import { createMetrics, type Metrics } from './services/metrics.js';
import { registerStorageMetrics } from './services/storage-metrics.js';
import { createRateLimiter } from './services/rate-limiter-store.js';
import { createInMemoryRateLimiter, type InMemoryRateLimiter, type RateLimiter } from './services/rate-limiter.js';
import { createTrafficReportService, type TrafficReportService } from './services/traffic-report-service.js';
import { createTrafficSyncService, type TrafficSyncService } from './sync/sync-service.js';
import { createTrafficScheduler, type TrafficScheduler } from './sync/scheduler.js';
import { DEFAULT_RETRY_POLICY } from './sync/provider.js';
import { createOutboundGuard, type OutboundGuard } from './services/outbound-guard.js';
import { createDestinationService, type DestinationService } from './services/destinations/service.js';
import { createStatsService, type StatsService } from './services/stats-service.js';
import { createErasureService, KeyChangedError, type ErasureService } from './services/erasure/service.js';
import { createRetentionService, type RetentionService } from './services/retention-service.js';
import { createCheckpointWatch, type CheckpointWatch } from './services/postgres-checkpoints.js';
import { createBackupService, scheduleRefusal, type BackupService } from './services/backup-service.js';

export interface Services {
  config: Config;
  storage: OpenedStorage;
  metrics: Metrics;
  keys: KeyService;
  ingest: IngestService;
  identity: IdentityService;
  /** Admin reads, the live stream's tail and exports of stored events (events-out §3–5). */
  events: { reads: EventReadService; streams: EventStreams };
  /** Segment-compatible ingestion: translation into the accept pipeline, and identity side effects. */
  segment: SegmentService;
  /** Recorded rejections and warnings (listed by the admin API and the CLI). */
  rejections: RejectionService;
  /** Data governance (governance.md §1–2): the event catalogue and tracking plans with their violations. */
  governance: { catalog: CatalogService; plans: TrackingPlanService };
  /** Product transformations (transformations.md): versions, the accept stage's cache, the test runs. */
  transformations: TransformationService;
  rateLimiter: RateLimiter;
  /** Browser keys: per key and client IP (INLET_BROWSER_RATE_LIMIT_PER_IP). */
  browserIpLimiter: InMemoryRateLimiter;
  /** Traffic reports: reading, syncing sources, and the interval scheduler (started by main). */
  traffic: { reports: TrafficReportService; sync: TrafficSyncService; scheduler: TrafficScheduler };
  /** Destinations (events-out §6): admin operations and the deliverers (started by main). */
  destinations: DestinationService;
  /** GET /admin/v1/stats: this process's metrics, its pool and the destinations by status (the console's health page). */
  stats: StatsService;
  /** Erasure of a person and suppressions (governance.md §3); the job runner is started by main. */
  erasure: ErasureService;
  /** Retention of events per product (governance.md §4); the background task is started by main. */
  retention: RetentionService;
  /** Backups (docs/operations.md): `inlet backup`, and the schedule of INLET_BACKUP_* (started by main). */
  backups: BackupService;
  /** PostgreSQL: warns in the log when the server keeps checkpointing because its WAL reaches max_wal_size (started by main). */
  checkpointWatch?: CheckpointWatch;
  /** Flushes pending writes and closes storage. */
  close(): Promise<void>;
}

export interface CreateServicesOptions {
  postgresSchema?: string;
  defaultMetrics?: boolean;
  /** The key service's clock (expiry, cache TTL, `last_used_at`); default `Date.now`. Tests move it instead of sleeping. */
  now?: () => number;
  /**
   * For a one-shot command (the `inlet` CLI): nothing is rate-limited, so the shared limiter's store
   * (INLET_RATE_LIMIT_STORE: a second PostgreSQL pool and its table, or a Redis connection) is not opened.
   */
  command?: boolean;
  /** Told of each pending migration as the storage applies it (the server logs them; `inlet` prints them). */
  onMigration?: OpenStorageOptions['onMigration'];
  /** The server's log, for what the services find outside any request (a transformation this instance cannot fully run). */
  log?: TransformationLog;
}

export async function createServices(config: Config, options: CreateServicesOptions = {}): Promise<Services> {
  // Every outbound connection (webhooks, NATS, PostgreSQL warehouses, traffic providers) passes this one guard.
  const guard = createOutboundGuard({ allow: config.outboundAllow, allowPrivate: config.outboundAllowPrivate });
  const storage = await openStorage(config.databaseUrl, {
    sqliteSynchronous: config.sqliteSynchronous,
    sqliteWriterThreadAfter: config.sqliteWriterThreadAfter,
    postgresPoolSize: config.postgresPoolSize,
    queryTimeoutMs: config.databaseQueryTimeoutMs,
    destinationLeaseMs: config.destinationLeaseMs,
    ...(options.postgresSchema === undefined ? {} : { postgresSchema: options.postgresSchema }),
    ...(options.onMigration === undefined ? {} : { onMigration: options.onMigration }),
  });
  const backupRefusal = scheduleRefusal(storage.capabilities.backup, config.backupSchedule);
  if (backupRefusal !== undefined) {
    await storage.close();
    throw new ConfigError(backupRefusal);
  }
  const metrics = createMetrics({ defaultMetrics: options.defaultMetrics ?? true });
  const backups = createBackupService(storage.capabilities.backup, metrics, config.backupSchedule);
  const { telemetry } = storage.capabilities;
  registerStorageMetrics(metrics.registry, telemetry);
  const checkpointWatch = telemetry.walStats === undefined ? undefined : createCheckpointWatch(telemetry.walStats);
  const keys = createKeyService(storage, { cacheTtlMs: config.keyCacheTtlMs, now: options.now });
  const rejections = createRejectionService(storage, metrics, {
    maxPerHour: config.rejectionsMaxPerHour,
    retentionDays: config.rejectionsRetentionDays,
  });
  const catalog = createCatalogService(storage, {
    enabled: config.catalogEnabled,
    maxEvents: config.catalogMaxEvents,
    maxProperties: config.catalogMaxProperties,
    flushMs: config.catalogFlushMs,
  });
  const plans = createTrackingPlanService(storage, metrics, catalog, {
    refreshMs: config.trackingPlanRefreshMs,
    maxViolationsPerHour: config.violationsMaxPerHour,
    retentionDays: config.violationsRetentionDays,
  });
  const governance = { catalog, plans };
  const erasure = createErasureService(storage, metrics, rejections, {
    installationSecret: config.installationSecret,
    refreshMs: config.suppressionRefreshMs,
    pollMs: config.erasurePollMs,
    messageKeepDays: config.erasureMessageKeepDays,
  });
  try {
    await erasure.verifyKey();
  } catch (error) {
    await storage.close();
    throw error instanceof KeyChangedError ? new ConfigError(error.message) : error;
  }
  const retention = createRetentionService(storage, metrics, { intervalMs: config.retentionIntervalMs });
  // The same bounded delay as tracking plans for a new version to reach other instances (transformations.md §8).
  let runtime: TransformRuntime;
  try {
    runtime = await createTransformRuntime(config);
  } catch (error) {
    await storage.close();
    throw error;
  }
  const transformations = createTransformationService(storage, metrics, runtime, {
    refreshMs: config.trackingPlanRefreshMs,
    geoip: config.geoipDatabase !== undefined,
    maxEventBytes: config.maxEventBytes,
    ...(options.log === undefined ? {} : { log: options.log }),
  });
  const ingest = createIngestService(storage, metrics, {
    legacyFlat: config.legacyFlat,
    rejections,
    governance,
    suppressions: erasure,
    transformations,
  });
  const identityStages = { suppressions: erasure, plans, catalog, rejections, transformations };
  const identity = createIdentityService(storage, identityStages);
  const events = {
    reads: createEventReadService(storage),
    streams: createEventStreams(storage, { pollMs: config.eventStreamPollMs, maxStreams: config.eventStreamsMax }),
  };
  const segment = createSegmentService(ingest, identity, rejections);
  const rateLimiter = await createRateLimiter({
    store: options.command === true ? 'memory' : config.rateLimitStore,
    rps: config.rateLimitRps,
    burst: config.rateLimitBurst,
    redisUrl: config.redisUrl,
    postgresPool: storage.capabilities.rateLimitPool,
  });
  // Per client IP on the browser routes: a guard against one abusive address, kept in each process.
  const browserIpLimiter = createInMemoryRateLimiter(config.browserRateLimitPerIp, config.browserRateLimitPerIp * 2);
  const trafficSync = createTrafficSyncService(storage, {
    retry: { ...DEFAULT_RETRY_POLICY, maxTotalMs: config.trafficRetryMaxMs },
    guard,
  });
  const traffic = {
    reports: createTrafficReportService(storage),
    sync: trafficSync,
    scheduler: createTrafficScheduler(storage, trafficSync, { intervalMs: config.trafficSyncIntervalMs }),
  };
  const destinations = createDestinations(config, storage, metrics, guard, runtime, options.now);
  const stats = createStatsService({
    metrics,
    poolStats: telemetry.poolStats,
    destinationSummary: () => destinations.summary(),
    ...(options.now === undefined ? {} : { now: options.now }),
  });
  let closed: Promise<void> | undefined;
  return {
    config,
    storage,
    metrics,
    keys,
    ingest,
    transformations,
    identity,
    events,
    segment,
    rejections,
    governance,
    rateLimiter,
    browserIpLimiter,
    traffic,
    destinations,
    stats,
    erasure,
    retention,
    backups,
    ...(checkpointWatch === undefined ? {} : { checkpointWatch }),
    close() {
      closed ??= (async () => {
        checkpointWatch?.stop();
        await backups.close();
        await destinations.close();
        await erasure.close();
        await retention.close();
        await traffic.scheduler.stop();
        await events.streams.close();
        await ingest.close();
        await transformations.close();
        await rejections.close();
        await catalog.close().catch(() => {});
        await plans.close().catch(() => {});
        await keys.close();
        await rateLimiter.close?.();
        await storage.close();
      })();
      return closed;
    },
  };
}

/** Destinations as the settings say, every target through the one outbound guard. */
function createDestinations(
  config: Config,
  storage: OpenedStorage,
  metrics: Metrics,
  guard: OutboundGuard,
  runtime: TransformRuntime,
  now: (() => number) | undefined,
) {
  return createDestinationService(storage.destinations, metrics, {
    ...destinationServiceOptions(config, storage, runtime, guard),
    ...(now === undefined ? {} : { clock: { now } }),
  });
}
