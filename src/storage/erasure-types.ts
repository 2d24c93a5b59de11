// The erasure and retention part of the storage port (governance.md §3–4).

/** A monthly partition of `events` on PostgreSQL (`events_pYYYY_MM`): its name and [start, end) in UTC. */
export interface EventMonth {
  name: string;
  start: string;
  end: string;
}

/** Where a walk over a month's events goes on: after this (product_id, id), the partition's key order. */
export interface EventMonthCursor {
  productId: string;
  id: string;
}

export type EventMonthDrop =
  | { dropped: true; counts: Record<string, number> }
  /** `lock_timeout`: a lock was not granted in time (55P03, or a deadlock, 40P01); `refused`: a product with
   * rows in the month does not allow it (any more); `gone`: the partition no longer exists. */
  | { dropped: false; reason: 'lock_timeout' | 'refused' | 'gone'; counts?: Record<string, number> };

export type ErasureStatus = 'pending' | 'running' | 'done' | 'failed';
/** Where a job is; each phase can be run again from its start (a resumed job does). */
export type ErasurePhase = 'events' | 'identity' | 'records' | 'finish' | 'done';

export interface ErasureCounts {
  /** External ids linked to the person (the requested one, aliases, anonymous ids). */
  ids: number;
  events: number;
  identifiers: number;
  /** Trait keys of the deleted user rows. */
  traits: number;
  merges: number;
  identity_messages: number;
  rejections: number;
  violations: number;
}

/** A job and its audit record: never the external id, only its HMAC. */
export interface ErasureRecord {
  id: string;
  productId: string;
  status: ErasureStatus;
  phase: ErasurePhase;
  reason: string | null;
  idHmac: string;
  requestedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  counts: ErasureCounts;
  error: string | null;
}

export interface SuppressionRecord {
  id: string;
  productId: string;
  idHmac: string;
  erasureId: string | null;
  createdAt: string;
}

export interface ErasureRequestInput {
  productId: string;
  erasureId: string;
  externalId: string;
  reason: string | null;
  requestedAt: string;
  /** HMAC of an external id of this product (the suppression and audit key). */
  hmac(externalId: string): string;
  newSuppressionId(): string;
  /** The id of the `user.erased` message. */
  messageId: string;
}

export interface ErasureTargets {
  externalIds: string[];
  userIds: string[];
}

export interface ErasureStore {
  /** The stored HMAC key (created with `generate` the first time). */
  installationSecret(generate: () => string): Promise<string>;
  /**
   * The fingerprint of the HMAC key stored with the data it keyed: when absent, `fingerprint` is stored and
   * answered. Otherwise the stored one is answered, and replaced by `fingerprint` only when nothing was keyed
   * yet (no suppression, no erasure job), `replaced` then true.
   */
  keyFingerprint(fingerprint: string): Promise<{ stored: string; replaced: boolean }>;
  /**
   * One transaction: resolves the person from the id (aliases, anonymous links), stores the job, its
   * targets and a suppression per linked id, and the `user.erased` message for destinations.
   */
  request(input: ErasureRequestInput): Promise<{ record: ErasureRecord; externalIds: string[] }>;
  get(productId: string, id: string): Promise<ErasureRecord | undefined>;
  /** Newest first. */
  list(
    productId: string,
    query: { beforeId?: string | undefined; limit: number; idHmac?: string | undefined },
  ): Promise<ErasureRecord[]>;
  /**
   * Takes the lease of one pending or running job whose lease is free or expired (or of the given one), for
   * `leaseMs` from the database's clock, by which expiry is judged too (an instance's own clock may be off).
   */
  claim(holder: string, leaseMs: number, only?: { productId: string; id: string }): Promise<ErasureRecord | undefined>;
  /**
   * Saves progress, fenced by the lease holder; false when the lease was lost. Renews the lease for `leaseMs` from
   * the database's clock, or ends it when `leaseMs` is 0.
   */
  save(record: ErasureRecord, holder: string, leaseMs: number): Promise<boolean>;
  release(productId: string, id: string, holder: string): Promise<void>;
  targets(productId: string, erasureId: string): Promise<ErasureTargets>;
  /** Deletes at most `limit` events of these ids (subject, or a Segment group call's user) in one transaction. */
  deleteEvents(productId: string, externalIds: string[], limit: number): Promise<number>;
  /** Users, ids, identifiers, merges and identity messages of the person, in one transaction. */
  deleteIdentity(
    productId: string,
    targets: ErasureTargets,
  ): Promise<Pick<ErasureCounts, 'identifiers' | 'traits' | 'merges' | 'identity_messages'>>;
  /** At most `limit` rejections (and warnings) and violations naming these ids. */
  deleteRecords(
    productId: string,
    externalIds: string[],
    limit: number,
  ): Promise<{ rejections: number; violations: number }>;
  /** Forgets the job's targets (its last step). */
  deleteTargets(productId: string, erasureId: string): Promise<void>;
  /** Deletes `user.erased` messages every active destination of the product has passed. */
  sweepErasedMessages(productId: string, olderThan: string): Promise<number>;
  /** SQLite: a TRUNCATE checkpoint (WAL emptied into the file, whose freed pages were zeroed). PostgreSQL: VACUUM of the touched tables. */
  reclaim(only?: 'identity_messages'): Promise<void>;
  /**
   * Background deletes wait here before each batch. SQLite: while the WAL is due to start over and the
   * checkpoint thread is still copying what earlier batches dirtied (at most a second); else at once.
   */
  roomToWrite(): Promise<void>;

  /** A marker that changes whenever suppressions are added or lifted (cheap to read). */
  suppressionsMarker(): Promise<string>;
  allSuppressions(): Promise<Array<{ productId: string; idHmac: string }>>;
  listSuppressions(
    productId: string,
    query: { beforeId?: string | undefined; limit: number; idHmac?: string | undefined },
  ): Promise<SuppressionRecord[]>;
  liftSuppression(productId: string, id: string): Promise<boolean>;

  /** Retention (§4): products with a limit. */
  retentionProducts(): Promise<Array<{ productId: string; eventsDays: number }>>;
  setRetention(productId: string, eventsDays: number | null): Promise<void>;
  /** Deletes at most `limit` events of the product received before `cutoff`; returns how many. */
  deleteEventsBefore(productId: string, cutoff: string, limit: number): Promise<number>;
  /**
   * Retention by whole months (PostgreSQL; on SQLite there are no partitions: none are listed). The
   * monthly partitions of `events` whose month ends at or before `end`, oldest first.
   */
  eventMonthsEndingBy(end: string): Promise<EventMonth[]>;
  /** The products with rows in the month's partition. */
  productsInEventMonth(name: string): Promise<string[]>;
  /** Deletes the idempotency keys of the next `limit` events of the month (of those products) after `after` (null: the first). */
  deleteEventMonthKeys(
    name: string,
    productIds: string[],
    after: EventMonthCursor | null,
    limit: number,
  ): Promise<{ events: number; keys: number; next: EventMonthCursor }>;
  /**
   * Drops the month's partition if every product with rows in it has a limit that covers the whole
   * month at `now` (read in the drop's transaction); counts its rows per product first. Waits at most
   * `lockTimeoutMs` for each lock.
   */
  dropEventMonth(month: EventMonth, now: number, lockTimeoutMs: number): Promise<EventMonthDrop>;
  /** The receive time of the product's oldest event, or null. */
  oldestEvent(productId: string): Promise<string | null>;
  /** A named lease over background work: true when `holder` has it for `leaseMs` from the database's clock. */
  takeLease(name: string, holder: string, leaseMs: number): Promise<boolean>;
  releaseLease(name: string, holder: string): Promise<void>;
}
