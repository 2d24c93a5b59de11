// The storage port: what services may ask of storage, whatever the database behind it.
// Every row carries its product; every query is scoped by product except the key lookup by hash.
import type { NameFormat } from '../domain/event-names.js';

export type Dialect = 'sqlite' | 'postgres';
export type ApiKeyKind = 'events' | 'reports';

export interface ProductRecord {
  id: string;
  name: string;
  createdAt: string;
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
}

/** One event to store, with its properties also serialised (the ingest path serialises once). */
export interface EventInsert extends EventRecord {
  propertiesJson: string;
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
  touch(usages: Array<{ id: string; at: string }>): Promise<void>;
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
}

export interface LegacyUsageStore {
  record(increments: LegacyUsageIncrement[]): Promise<void>;
  list(productId: string): Promise<LegacyUsageRecord[]>;
}

export interface Storage {
  readonly dialect: Dialect;
  readonly products: ProductStore;
  readonly apiKeys: ApiKeyStore;
  readonly events: EventStore;
  readonly legacyUsage: LegacyUsageStore;
  /** Throws when the database cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
