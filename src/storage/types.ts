// The storage port: what services may ask of storage, whatever the database behind it.
// Every row carries its product; every query is scoped by product except the key lookup by hash.
import type { NameFormat } from '../domain/event-names.js';
import type { IdentifierConflict, IdentifierPatch, Identifiers, TraitPatch, Traits } from '../domain/identity.js';
import type { TrafficReportQuery, TrafficReportRow, TrafficRow } from '../domain/traffic-reports.js';
import type pg from 'pg';

/** Which SQL the storage's own modules speak; outside storage, capabilities say what differs. */
export type Dialect = 'sqlite' | 'postgres';
import type { KeyKind } from '../domain/api-keys.js';
import type { GovernanceStore } from './governance-types.js';
import type { TransformationStore } from './transformation-types.js';
import type { ErasureStore } from './erasure-types.js';
import type { DatabaseBackup } from './backup-types.js';

// The governance part of the port lives in its own file; services and resources see it through this one.
export type * from './governance-types.js';
export type * from './transformation-types.js';
export type * from './erasure-types.js';
export type * from './backup-types.js';

export type ApiKeyKind = KeyKind;

export interface ProductRecord {
  id: string;
  name: string;
  createdAt: string;
  /** Retention (governance.md §4): events older than this many days are deleted; null keeps them. */
  retentionEventsDays?: number | null;
}

export interface ApiKeyRecord {
  id: string;
  productId: string;
  kind: ApiKeyKind;
  name: string | null;
  prefix: string;
  keyHash: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  /** Browser keys only: the origins whose pages may use the key. */
  allowedOrigins?: string[] | null;
}

export interface EventRecord {
  id: string;
  productId: string;
  source: string;
  externalId: string | null;
  eventType: string;
  action: string;
  canonicalName: string;
  nameFormat: NameFormat;
  subjectType: string;
  subjectId: string;
  occurredAt: string;
  receivedAt: string;
  properties: Record<string, unknown>;
  apiKeyId: string | null;
  /**
   * The commit position (events-out §1), set on events read back from storage: an opaque string that
   * only this storage compares ("123" on SQLite, "<tx>.<seq>" on PostgreSQL).
   */
  position?: string;
  /** A Segment item's `context` (null for native events). */
  context?: Record<string, unknown> | null;
  /** Everything else a Segment item carried: its type, event name, ids, raw timestamps, integrations (null for native events). */
  original?: Record<string, unknown> | null;
  /**
   * Set only by reads that asked for `jsonText` (exports): the JSON values as the stored JSON text, not
   * parsed; `properties` is then an empty placeholder and `context`/`original` are not set. Saves a parse
   * and a stringify per value on the export path.
   */
  jsonText?: { properties: string; context: string | null; original: string | null };
}

/** One event to store, with its JSON values also serialised (the ingest path serialises once). */
export interface EventInsert extends EventRecord {
  propertiesJson: string;
  contextJson?: string | null;
  originalJson?: string | null;
}

export type InsertOutcome = { status: 'created'; event: EventRecord } | { status: 'duplicate'; event: EventRecord };

export interface LegacyUsageIncrement {
  productId: string;
  apiKeyId: string;
  eventName: string;
  count: number;
  lastSeenAt: string;
}

export interface LegacyUsageRecord {
  apiKeyId: string;
  keyPrefix: string | null;
  keyName: string | null;
  eventName: string;
  count: number;
  firstSeenAt: string;
  lastSeenAt: string;
}

export interface ProductStore {
  create(product: ProductRecord): Promise<void>;
  get(id: string): Promise<ProductRecord | undefined>;
  list(): Promise<ProductRecord[]>;
}

export interface ApiKeyStore {
  create(key: ApiKeyRecord): Promise<void>;
  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined>;
  get(id: string): Promise<ApiKeyRecord | undefined>;
  listByProduct(productId: string): Promise<ApiKeyRecord[]>;
  /** Marks a key revoked; returns the key, or undefined when no such key exists. Revoking twice keeps the first time. */
  revoke(id: string, at: string): Promise<ApiKeyRecord | undefined>;
  /** Replaces a browser key's allowed origins; returns the key, or undefined when no such key exists. */
  setAllowedOrigins(id: string, origins: string[]): Promise<ApiKeyRecord | undefined>;
  touch(usages: Array<{ id: string; at: string }>): Promise<void>;
}

/** The filters of the admin reads (events-out §3), already validated. */
export interface EventFilter {
  canonicalNames?: string[];
  eventType?: string;
  action?: string;
  source?: string;
  keyId?: string;
  subjectType?: string;
  /** With subjectType: any of these ids (the user filter passes every external id of the user). */
  subjectIds?: string[];
  /** Inclusive, ISO 8601 UTC with milliseconds. */
  receivedFrom?: string;
  /** Exclusive, ISO 8601 UTC with milliseconds. */
  receivedTo?: string;
}

export interface EventPageQuery {
  productId: string;
  filter: EventFilter;
  order: 'asc' | 'desc';
  /** Continue after this position (in `order`); undefined starts at the newest (desc) or oldest (asc). */
  after?: string;
  /** Ascending reads stop at this position (inclusive): exports end where they started. */
  upTo?: string;
  limit: number;
  /** Return the JSON values as stored text (`EventRecord.jsonText`) instead of parsed objects. */
  jsonText?: boolean;
}

export interface EventPage {
  /** At most `limit` events, in `order`, each with its position. */
  events: EventRecord[];
  /**
   * Where the next page starts (pass as `after`), or null when nothing more matches now. A page may hold
   * fewer than `limit` events and still have a next position: a read scans a bounded number of rows.
   */
  next: string | null;
}

export interface EventStore {
  /**
   * Stores the rows in one transaction (one commit, one fsync). Rows whose (product, source,
   * external_id) is already stored — or appears earlier in `rows` — are not written; their outcome
   * is `duplicate` with the original record. Outcomes are in the order of `rows`.
   */
  insertMany(rows: EventInsert[]): Promise<InsertOutcome[]>;
  get(productId: string, id: string): Promise<EventRecord | undefined>;
  count(productId: string): Promise<number>;
  /** Most recent first. */
  listBySubjects(productId: string, subjectType: string, subjectIds: string[], limit: number): Promise<EventRecord[]>;
  /** One page of the product's events in position order; never skips an event committed later. */
  page(query: EventPageQuery): Promise<EventPage>;
  /** The product's current end: the highest position a reader may see now (null: none yet). */
  endPosition(productId: string): Promise<string | null>;
  /** Whether `position` is well-formed for this storage (cursors come from clients). */
  isPosition(position: string): boolean;
  /** Orders two positions: negative, zero or positive. */
  comparePositions(a: string, b: string): number;
}

export interface LegacyUsageStore {
  record(increments: LegacyUsageIncrement[]): Promise<void>;
  list(productId: string): Promise<LegacyUsageRecord[]>;
}

export type TrafficProviderName = 'plausible' | 'ga4';

/** A product's connected analytics source, without its secret: safe to show. */
export interface TrafficSourceSummary {
  productId: string;
  provider: TrafficProviderName;
  /** Non-secret settings: site_id / property_id, base_url, token_url. */
  config: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
}

/** The source with its secret (API key or service-account credentials): only for the sync, never for HTTP output. */
export interface TrafficSourceRecord extends TrafficSourceSummary {
  secret: Record<string, unknown>;
}

export type SyncRunKind = 'schedule' | 'admin' | 'cli' | 'import';
export type SyncRunOutcome = 'running' | 'succeeded' | 'failed';

export interface SyncRunRecord {
  id: string;
  productId: string;
  /** `plausible`, `ga4` or `csv`. */
  provider: string;
  kind: SyncRunKind;
  startedAt: string;
  finishedAt: string | null;
  from: string;
  to: string;
  rows: number | null;
  outcome: SyncRunOutcome;
  error: string | null;
}

export interface TrafficReportPage {
  /** The group_by dimensions and every metric of each group, in sort order. */
  rows: TrafficReportRow[];
  /** Whether more rows follow the last one of this page. */
  hasMore: boolean;
  totals: Omit<TrafficRow, 'date' | 'source' | 'medium' | 'campaign' | 'landing_page'>;
}

export interface TrafficStore {
  putSource(source: TrafficSourceRecord): Promise<void>;
  getSource(productId: string): Promise<TrafficSourceRecord | undefined>;
  /** Every connected source, without secrets. */
  listSources(): Promise<TrafficSourceSummary[]>;
  /**
   * For each date of `rowsByDate`, deletes the product's rows of that date and inserts the given
   * ones, in one transaction (an empty list clears the date). Returns the number of rows inserted.
   */
  replaceSlices(
    productId: string,
    provider: string,
    rowsByDate: ReadonlyMap<string, readonly TrafficRow[]>,
  ): Promise<number>;
  countRows(productId: string, from: string, to: string): Promise<number>;
  /** Aggregated in SQL by the rules of contract §8, one keyset page. */
  report(productId: string, query: TrafficReportQuery): Promise<TrafficReportPage>;
  startRun(run: SyncRunRecord): Promise<void>;
  finishRun(
    productId: string,
    id: string,
    outcome: { finishedAt: string; rows: number | null; outcome: SyncRunOutcome; error: string | null },
  ): Promise<void>;
  /** Most recent first. */
  listRuns(productId: string, limit: number): Promise<SyncRunRecord[]>;
  /** When the last successful sync or import of the product finished (of that provider, if given). */
  lastSucceededAt(productId: string, provider?: string): Promise<string | null>;
  /**
   * Runs `fn` holding an exclusive lock on the product's sync across every instance sharing the database
   * (PostgreSQL: a session advisory lock held on one connection). Returns `{ acquired: false }` at once when
   * another holder has it. SQLite has one writer process, so the lock is process-local there.
   */
  withSyncLock<T>(productId: string, fn: () => Promise<T>): Promise<{ acquired: true; value: T } | { acquired: false }>;
}

export interface RejectionRecord {
  /** uuidv7: id order is time order. */
  id: string;
  productId: string;
  receivedAt: string;
  keyId: string | null;
  route: string;
  index: number;
  messageId: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  /** The item as received, as JSON text, at most 32 KiB. */
  item: string;
  /** External ids the item names (userId, anonymousId, subject_id, …), indexed so an erasure finds the row. */
  subjectIds?: string[];
}

export interface RejectionQuery {
  limit: number;
  beforeId?: string;
  code?: string;
  keyId?: string;
  severity?: 'rejected' | 'warning';
  receivedFrom?: string;
  receivedTo?: string;
}

export interface RejectionStore {
  insertMany(rows: RejectionRecord[]): Promise<void>;
  /** Adds to the per-hour count of rejections past the recording cap. `hour` is `YYYY-MM-DDTHH`. */
  addUnrecorded(counts: Array<{ productId: string; hour: string; count: number }>): Promise<void>;
  /** Newest first. */
  list(productId: string, query: RejectionQuery): Promise<RejectionRecord[]>;
  deleteOlderThan(at: string): Promise<void>;
}

/** A connection pool's state (PostgreSQL), read by the pool gauges at scrape time. */
export interface PoolStats {
  max: number;
  open: number;
  idle: number;
  /** Queries waiting for a free connection. */
  waiting: number;
}

/**
 * PostgreSQL: how the primary this process writes to replicates, as its sessions see it. Commits wait for a
 * standby only with `synchronous_standby_names` set and `synchronous_commit` on, remote_write or remote_apply;
 * otherwise a failover can lose acknowledged events (docs/scaling-out.md).
 */
export interface ReplicationStatus {
  synchronousStandbyNames: string;
  synchronousCommit: string;
  /** `pg_stat_replication.sync_state` of each standby connected to it (null without the privilege to see it). */
  standbys: Array<{ syncState: string | null }>;
}

/**
 * PostgreSQL: the server's checkpoints and WAL so far (cluster-wide counters since its statistics were last reset;
 * they start over on another server after a failover), with the settings that decide when it checkpoints.
 */
export interface PostgresWalStats {
  /** The server that answered, `address:port` as it sees itself (`local` over a Unix socket): counters are its own. */
  server: string;
  /** Checkpoints started by `checkpoint_timeout`. */
  timedCheckpoints: number;
  /** Checkpoints requested: the WAL reached `max_wal_size`, or a `CHECKPOINT` command, a base backup, a restart. */
  requestedCheckpoints: number;
  /** pg_stat_wal (PostgreSQL 14 and later; undefined before): bytes of WAL written, and whole pages among its records. */
  walBytes?: number;
  walFullPageImages?: number;
  /** The settings as PostgreSQL shows them (`SHOW`): `1GB`, `5min`. */
  maxWalSize: string;
  checkpointTimeout: string;
}

/** One WAL checkpoint on SQLite: by the checkpoint thread, or by the writer on the event loop (sqlite/checkpointer.ts). */
export interface CheckpointEvent {
  by: 'thread' | 'writer';
  seconds: number;
  /** Frames in the WAL, and how many of them are in the database file, after it (-1: busy or failed). */
  walFrames: number;
  backfilled: number;
  /** Frames this checkpoint copied (the writer's: beyond what the thread's last pass had copied). */
  copied: number;
}

/** How ingest groups events into commits (services/group-commit.ts). */
export interface CommitPolicy {
  /** The most events in one commit. */
  readonly maxItems: number;
  /** Commits in flight at once. */
  readonly maxInFlight: number;
  /** With a commit in flight, the next one starts only once this many events wait. */
  readonly minItemsToOverlap: number;
}

/**
 * The pacing of background deletes (erasure, retention; services/gentle-batches.ts): a batch's size is tuned after
 * each batch to take about `targetMs`, between `min` and `max` rows, and the runner then rests `restRatio` times as
 * long as the batch took.
 */
export interface DeletePacing {
  readonly initial: number;
  readonly min: number;
  readonly max: number;
  readonly targetMs: number;
  readonly restRatio: number;
}

/** What the database tells about itself for metrics: each member present is registered (services/storage-metrics.ts). */
export interface StorageTelemetry {
  /** The connection pool's state. */
  readonly poolStats?: () => PoolStats;
  /** How the primary replicates, as this pool's sessions see it. */
  readonly replicationStatus?: () => Promise<ReplicationStatus>;
  /** The server's checkpoints and WAL written (metrics, and the checkpoint advice in the log). */
  readonly walStats?: () => Promise<PostgresWalStats>;
  /** Calls `listener` after each WAL checkpoint of the checkpoint thread. */
  readonly observeCheckpoints?: (listener: (event: CheckpointEvent) => void) => void;
  /** The idempotency keys held in memory and the merges so far (sqlite/event-keys.ts). */
  readonly eventKeyStats?: () => EventKeyStats;
  /** The subject index's entries in memory, merges and sweeps (the same figures). */
  readonly eventSubjectStats?: () => EventKeyStats;
}

/** Indexes of events the storage keeps partly in memory (SQLite's key and subject indexes, sqlite/event-keys.ts). */
export interface EventIndexes {
  /**
   * For the server at start: takes in the rows written since the indexes were last merged now, rather than in the
   * first write, and builds the key filter in the background; resolves once it is built. Until then every keyed
   * event is looked up on disk.
   */
  warm(): Promise<void>;
  /** Resolves once no merge (move, sweep) of either index runs or is due (benches). */
  settle(): Promise<void>;
}

/**
 * What the database behind the port can do and how the services pace themselves on it, declared by its backend
 * (storage/sqlite/backend.ts, storage/postgres/backend.ts): services read these instead of asking which database
 * it is.
 */
export interface StorageCapabilities {
  readonly commits: CommitPolicy;
  readonly deletePacing: DeletePacing;
  readonly telemetry: StorageTelemetry;
  readonly eventIndexes?: EventIndexes;
  /**
   * A small pool of its own for the shared rate limiter (INLET_RATE_LIMIT_STORE=postgres), following the primary
   * like the main one. Its sessions commit with synchronous_commit=off: a counter lost in a crash costs a few
   * requests of budget, while waiting for a synchronous standby on every request would cost latency.
   */
  readonly rateLimitPool?: () => pg.Pool;
  /** Run once by the destination delivery worker on the storage it opened, before it delivers (delivery-worker.ts). */
  prepareDeliveryWorker(): Promise<void>;
  /** Online backups of the database (`inlet backup`, INLET_BACKUP_*), or why Inlet leaves them to the database's own tools. */
  readonly backup: DatabaseBackup;
}

export interface Storage {
  /**
   * What /readyz and the start-up log call the database (`sqlite`, `postgres`): a description for people, never
   * something to branch on (capabilities say what differs).
   */
  readonly name: string;
  readonly capabilities: StorageCapabilities;
  readonly products: ProductStore;
  readonly apiKeys: ApiKeyStore;
  readonly events: EventStore;
  readonly legacyUsage: LegacyUsageStore;
  readonly rejections: RejectionStore;
  readonly identity: IdentityStore;
  readonly traffic: TrafficStore;
  readonly destinations: DestinationStore;
  /** Event catalogue, tracking plans and violations (governance.md §1–2). */
  readonly governance: GovernanceStore;
  /** Transformation versions and secrets (transformations.md §3). */
  readonly transformations: TransformationStore;
  /** Erasure jobs, suppressions and retention (governance.md §3–4). */
  readonly erasure: ErasureStore;
  /** Throws when the database cannot be reached. */
  ping(): Promise<void>;
  /** True when `error` means "storage unreachable (or not the primary) right now, retry later": 503, not 500. */
  isUnavailable(error: unknown): boolean;
  close(): Promise<void>;
}

// Identity (contract §6).

export interface UserRecord {
  id: string;
  /** The canonical external id: the one the user was created with, or the `to` of the merge that made it. */
  externalId: string;
  identifiers: Identifiers;
  traits: Traits;
  /** External ids merged into this user, sorted. */
  aliases: string[];
  createdAt: string;
  updatedAt: string;
}

/** One alias operation that changed something, kept for audit. */
export interface UserMergeRecord {
  fromExternalId: string;
  /** The user that `from` was, or null when `from` had never been seen. */
  fromUserId: string | null;
  intoUserId: string;
  /** The canonical external id of the user merged into, at the time of the merge. */
  intoExternalId: string;
  mergedAt: string;
}

/** Validated and normalized input of identify. */
export interface IdentifyInput {
  externalId: string;
  identifiers: IdentifierPatch;
  traits: TraitPatch;
}

export type IdentifyOutcome =
  | { status: 'created'; user: UserRecord }
  | { status: 'updated'; user: UserRecord }
  | { status: 'identifier_conflict'; conflicts: IdentifierConflict[] };

export type AliasOutcome =
  | { status: 'merged'; user: UserRecord }
  | { status: 'unchanged'; user: UserRecord }
  /** `from` is already merged into another user, whose canonical external id is `mergedInto`. */
  | { status: 'alias_conflict'; mergedInto: string }
  | { status: 'identifier_conflict'; conflicts: IdentifierConflict[] };

export interface ResolvedUser {
  user: UserRecord;
  /** Merges into this user (directly or through a user merged into it), oldest first. */
  merges: UserMergeRecord[];
}

/**
 * Each identify and alias is one transaction that locks what it touches before reading it;
 * conflicts are answered as values and leave nothing changed.
 */
export interface IdentityStore {
  identify(productId: string, input: IdentifyInput, now: string): Promise<IdentifyOutcome>;
  alias(productId: string, fromExternalId: string, toExternalId: string, now: string): Promise<AliasOutcome>;
  /** The user an external id (canonical or merged) resolves to. */
  getUser(productId: string, externalId: string): Promise<ResolvedUser | undefined>;
  /** The canonical external id of the user holding this identifier (value as stored, normalised), if any. */
  externalIdByIdentifier(productId: string, kind: string, value: string): Promise<string | undefined>;
  /** Flags the user an external id resolves to as identified (clarifications §18); the first time stays. */
  markIdentified(productId: string, externalId: string, now: string): Promise<void>;
  /** For each external id that is known: its user and whether that user was identified. */
  identifiedStatus(
    productId: string,
    externalIds: string[],
  ): Promise<Map<string, { userId: string; identified: boolean }>>;
}

// Destinations (events-out §6): storage/destination-store.ts and storage/destinations/.

export type DestinationType = 'webhook' | 'nats' | 'postgres' | 'parquet';
export type DestinationStatus = 'active' | 'paused' | 'disabled';
export type MessageType = 'event.created' | 'user.identified' | 'user.merged' | 'user.erased';

export interface DestinationFilter {
  types?: MessageType[];
  canonicalNames?: string[];
  sources?: string[];
}

export interface DestinationBatch {
  maxMessages: number;
  maxWaitMs: number;
}

/**
 * webhook: `url`; nats: `servers`, `subject` (a template); postgres: `schema` (its URL is a credential);
 * parquet: `path` (absolute, inside INLET_FILE_DESTINATIONS_ROOT) and `partition`.
 */
export interface DestinationConfig {
  url?: string;
  servers?: string[];
  subject?: string;
  schema?: string;
  path?: string;
  /** Parquet: the folders `path` named before it was edited (not the current one); erasure rewrites their files too. */
  earlierPaths?: string[];
  partition?: 'hour' | 'day';
}

/** NATS credentials, a PostgreSQL warehouse's URL: stored, never echoed. */
export interface DestinationCredentials {
  user?: string;
  pass?: string;
  token?: string;
  url?: string;
}

/** Where a destination is: after these positions (null: from the beginning of that log). */
export interface DestinationCursor {
  event: string | null;
  identity: string | null;
}

export interface DestinationRecord {
  id: string;
  productId: string;
  type: DestinationType;
  name: string;
  status: DestinationStatus;
  disabledReason: string | null;
  config: DestinationConfig;
  credentials: DestinationCredentials | null;
  filter: DestinationFilter;
  batch: DestinationBatch;
  secret: string | null;
  previousSecret: string | null;
  previousSecretUntil: number | null;
  cursor: DestinationCursor;
  consecutiveFailures: number;
  failingSince: number | null;
  nextAttemptAt: number | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  lastErrorAt: string | null;
  delivered: number;
  createdAt: string;
  updatedAt: string;
  leaseHolder: string | null;
  /** When the lease ends, epoch ms on the database's clock (DestinationStore.databaseNow). */
  leaseUntil: number;
  /** The latest warnings (a warehouse reached a table or column limit), oldest first. */
  warnings: DestinationWarning[];
  /** Columns a warehouse's loads added to its tables, and column types they widened (0 for other types). */
  columnsAdded: number;
  typeWidenings: number;
  /** The destination's own transformation (transformations.md §1), applied to its copy only; null: none. */
  transformation: DestinationTransformation | null;
}

/** A destination's steps, as validated and stored (defaults filled in). */
export interface DestinationTransformation {
  steps: unknown[];
}

export interface DestinationWarning {
  at: string;
  message: string;
}

export type IdentityMessageData =
  { user: UserRecord } | { fromExternalId: string; user: UserRecord } | { externalIds: string[]; erasureId: string };

export type StoredMessage =
  | { kind: 'event'; position: string; event: EventRecord }
  | {
      kind: 'identity';
      position: string;
      id: string;
      type: 'user.identified' | 'user.merged' | 'user.erased';
      createdAt: string;
      data: IdentityMessageData;
    };

export interface DeliveryRecord {
  id: string;
  productId: string;
  destinationId: string;
  attemptedAt: string;
  attempt: number;
  webhookId: string;
  messageIds: string[];
  outcome: 'success' | 'failure';
  status: number | null;
  error: string | null;
  durationMs: number;
}

/** What a deliverer writes after a success or a failure (fenced by its lease). */
export interface DeliveryStatePatch {
  cursor?: DestinationCursor;
  deliveredAdd?: number;
  consecutiveFailures?: number;
  failingSince?: number | null;
  nextAttemptAt?: number | null;
  lastSuccessAt?: string;
  lastError?: string | null;
  lastErrorAt?: string | null;
  status?: DestinationStatus;
  disabledReason?: string | null;
}

/** Editable by the admin API. */
export type DestinationPatch = Partial<
  Pick<
    DestinationRecord,
    | 'name'
    | 'config'
    | 'credentials'
    | 'filter'
    | 'batch'
    | 'transformation'
    | 'status'
    | 'disabledReason'
    | 'secret'
    | 'previousSecret'
    | 'previousSecretUntil'
    | 'cursor'
    | 'consecutiveFailures'
    | 'failingSince'
    | 'nextAttemptAt'
  >
> & { updatedAt: string };

/** Destinations (events-out §6): storage of destinations, their cursors and leases, the delivery log, and the messages they follow. */
export interface DestinationStore {
  /** Whether a text is a position of this storage (cursors from clients are checked with it). */
  isEventPosition(position: string): boolean;
  /** Orders two positions of this storage (negative: `a` first); file destinations compare their files' ranges. */
  orderPositions(a: string, b: string): number;
  insert(record: DestinationRecord): Promise<void>;
  get(productId: string, id: string): Promise<DestinationRecord | undefined>;
  getById(id: string): Promise<DestinationRecord | undefined>;
  list(productId: string): Promise<DestinationRecord[]>;
  /** Every destination of every product (the deliverers' scheduler; the health summary). */
  listAll(): Promise<DestinationRecord[]>;
  /** Whether any product has a destination (the delivery worker starts with the first). */
  any(): Promise<boolean>;
  update(productId: string, id: string, patch: DestinationPatch): Promise<DestinationRecord | undefined>;
  delete(productId: string, id: string): Promise<boolean>;
  /** The database's time (epoch ms): leases are taken and judged by it, never by an instance's own clock. */
  databaseNow(): Promise<number>;
  /**
   * Takes or renews the lease of a destination for `leaseMs` from the database's now (its `leaseUntil`, on the
   * same clock); true when `holder` has it. PostgreSQL: undefined when another transaction kept the row locked
   * past a short wait (nothing is known of the lease).
   */
  acquireLease(id: string, holder: string, leaseMs: number): Promise<boolean | undefined>;
  releaseLease(id: string, holder: string): Promise<void>;
  /** Records warnings on the destination (a warehouse's limit reached); the latest few are kept. */
  addWarnings(id: string, messages: string[], at: string): Promise<void>;
  /** Adds a warehouse load's added columns and widened column types to the destination's totals. */
  countLayoutChanges(id: string, columnsAdded: number, typeWidenings: number): Promise<void>;
  /**
   * The fenced state write, with the cycle's attempts for the delivery log in the same transaction: written only
   * if `holder` still holds the lease and, when `from` is given, the stored cursor is still `from` (the cycle's
   * start; an admin replay may have moved it meanwhile). False when not written.
   */
  writeState(
    id: string,
    holder: string,
    patch: DeliveryStatePatch,
    now: string,
    deliveries?: ReadonlyArray<Omit<DeliveryRecord, 'id'>>,
    from?: DestinationCursor,
  ): Promise<boolean>;
  /** Newest first; `before` is the id of the last row of the previous page. */
  listDeliveries(productId: string, destinationId: string, limit: number, before?: string): Promise<DeliveryRecord[]>;
  pruneDeliveries(olderThan: string): Promise<void>;
  /** Up to `limit` messages (events and identity messages) after `cursor`, in position order; never skips one. */
  readMessages(productId: string, cursor: DestinationCursor, limit: number): Promise<StoredMessage[]>;
  /** The cursor at the current end of the product's messages ("start": "now"). */
  endCursor(productId: string): Promise<DestinationCursor>;
  /** The cursor just after the event at `eventPosition`. */
  cursorAfterEvent(productId: string, eventPosition: string): Promise<DestinationCursor>;
  /** The position of the last event received before `at`, or null. */
  eventPositionBefore(productId: string, at: string): Promise<string | null>;
  /** Messages after the cursor, counted up to `cap` per log (before any filter). */
  lag(productId: string, cursor: DestinationCursor, cap: number): Promise<number>;
}

/** SQLite: the idempotency keys held in memory and the merges so far (sqlite/event-keys.ts). */
export interface EventKeyStats {
  held: number;
  merges: number;
  mergeSeconds: number;
  /** Moves of the recent level into the big table (they run after a merge; their time is in mergeSeconds). */
  moves: number;
  /** Keys of deleted events removed by sweeps, and the sweeps' wall time. */
  swept: number;
  sweepSeconds: number;
  /** Seconds merges, sweeps and the key filter's build held the connection (the event loop), pauses excluded. */
  busySeconds: number;
  /** Bytes of the key filter (0 while it is being built, and for the subject index). */
  filterBytes: number;
}

/**
 * What a run of the migrator says while it works: the plan (the pending versions; `fresh` when the database
 * had none applied), then each migration as it starts (with what it rewrites on this dialect, if anything) and
 * when it is done.
 */
export type MigrationProgress =
  | { phase: 'plan'; pending: number[]; fresh: boolean }
  | { phase: 'start'; version: number; name: string; rewrites: string | undefined }
  | { phase: 'done'; version: number; name: string; seconds: number };
