// The governance part of the storage port (governance.md §1–2): catalogue aggregates, tracking plan
// versions and plan violations. Kept beside types.ts so this area's changes stay in its own files.

export type CatalogScope = 'event' | 'trait';
export const JSON_TYPES = ['string', 'integer', 'number', 'boolean', 'object', 'array', 'null'] as const;
export type JsonType = (typeof JSON_TYPES)[number];

/** What one instance saw of one event name since its last flush; added to the stored row. */
export interface CatalogEventDelta {
  canonicalName: string;
  eventType: string;
  action: string;
  count: number;
  firstSeen: string;
  lastSeen: string;
  sources: string[];
  keyIds: string[];
  /** Property observations not catalogued because the name has reached its path limit. */
  propertiesOverflow: number;
}

/** One (path, type) pair of an event name (scope `event`) or of the product's traits (scope `trait`, name ''). */
export interface CatalogPropertyDelta {
  scope: CatalogScope;
  canonicalName: string;
  path: string;
  jsonType: JsonType;
  count: number;
  firstSeen: string;
  lastSeen: string;
}

export interface CatalogWrite {
  productId: string;
  events: CatalogEventDelta[];
  properties: CatalogPropertyDelta[];
  /** Items not catalogued because the product reached its name limit (events) or trait path limit (traits). */
  overflow: Record<CatalogScope, number>;
}

/** What is already stored, for the bounds: decided at flush time, against every instance's writes. */
export interface CatalogState {
  /** Names the product has in its catalogue. */
  totalNames: number;
  /** Of the names asked about, those already catalogued. */
  knownNames: Set<string>;
  /** For each name asked about (traits: ''), the paths already catalogued. */
  paths: Map<string, Set<string>>;
}

/** A stored catalogue row: the same fields as a delta, holding the totals of every instance. */
export type CatalogEventRecord = CatalogEventDelta;

export interface CatalogPropertyRecord {
  path: string;
  types: Partial<Record<JsonType, number>>;
  firstSeen: string;
  lastSeen: string;
}

export interface CatalogEventQuery {
  sort: 'last_seen' | 'count' | 'name';
  prefix?: string;
  offset: number;
  limit: number;
}

export interface TrackingPlanVersion {
  version: number;
  plan: Record<string, unknown>;
  createdAt: string;
}

export interface ViolationRecord {
  /** uuidv7: id order is time order. */
  id: string;
  productId: string;
  receivedAt: string;
  keyId: string | null;
  route: string;
  canonicalName: string;
  code: 'tracking_plan_violation' | 'unplanned_event';
  severity: 'rejected' | 'warning';
  planVersion: number;
  messageId: string | null;
  /** The item's subject id, kept in an indexed column so an erasure finds it without reading payloads. */
  subjectId: string | null;
  errors: Array<{ pointer: string; message: string }>;
}

export interface ViolationQuery {
  limit: number;
  beforeId?: string;
  canonicalName?: string;
  code?: string;
  keyId?: string;
  receivedFrom?: string;
  receivedTo?: string;
}

export interface GovernanceStore {
  catalogState(productId: string, scope: CatalogScope, names: string[]): Promise<CatalogState>;
  /** Adds one flush's counts in one transaction (upserts: concurrent instances add up). */
  writeCatalog(write: CatalogWrite): Promise<void>;
  listCatalogEvents(productId: string, query: CatalogEventQuery): Promise<CatalogEventRecord[]>;
  getCatalogEvent(
    productId: string,
    canonicalName: string,
  ): Promise<{ event: CatalogEventRecord; properties: CatalogPropertyRecord[] } | undefined>;
  listCatalogProperties(
    productId: string,
    scope: CatalogScope,
    canonicalName: string,
  ): Promise<CatalogPropertyRecord[]>;
  catalogOverflow(productId: string): Promise<Record<CatalogScope, number>>;
  /** Stores the plan as the product's next version; returns it. */
  putPlan(productId: string, plan: Record<string, unknown>, createdAt: string): Promise<TrackingPlanVersion>;
  currentPlan(productId: string): Promise<TrackingPlanVersion | undefined>;
  /** The current version number alone (0: no plan): what other instances poll. */
  currentPlanVersion(productId: string): Promise<number>;
  /** Newest first. */
  listPlanVersions(productId: string): Promise<TrackingPlanVersion[]>;
  insertViolations(rows: ViolationRecord[]): Promise<void>;
  addUnrecordedViolations(counts: Array<{ productId: string; hour: string; count: number }>): Promise<void>;
  /** Newest first. */
  listViolations(productId: string, query: ViolationQuery): Promise<ViolationRecord[]>;
  deleteViolationsOlderThan(at: string): Promise<void>;
}
