// Kysely table types shared by both adapters. Timestamps are written as ISO strings; SQLite hands
// them back as strings, PostgreSQL (timestamptz) as Date: the row mappers accept both.
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date | string, string, string>;
type NullableTimestamp = ColumnType<Date | string | null, string | null, string | null>;
/** JSON documents: TEXT on SQLite, json or jsonb on PostgreSQL (node-postgres parses both back to an object). */
type Json = ColumnType<string | Record<string, unknown>, string, string>;

export interface ProductsTable {
  id: string;
  name: string;
  created_at: Timestamp;
  /** Migration 700: retention of events in days; null keeps them forever. */
  retention_events_days: ColumnType<number | null, number | null | undefined, number | null>;
}

export interface ApiKeysTable {
  id: string;
  product_id: string;
  kind: 'events' | 'reports' | 'browser';
  name: string | null;
  prefix: string;
  key_hash: string;
  created_at: Timestamp;
  expires_at: NullableTimestamp;
  revoked_at: NullableTimestamp;
  last_used_at: NullableTimestamp;
  /** JSON array of origins (browser keys only; migration 301). */
  allowed_origins: string | null;
}

/** Event times: timestamptz on PostgreSQL, INTEGER milliseconds on SQLite (migration 853). */
type EventTime = ColumnType<Date | string | number, string | number, string | number>;

export interface EventsTable {
  id: string;
  product_id: string;
  source: string;
  external_id: string | null;
  event_type: string;
  action: string;
  canonical_name: string;
  name_format: string;
  subject_type: string;
  subject_id: string;
  occurred_at: EventTime;
  received_at: EventTime;
  properties: Json;
  api_key_id: string | null;
  /** Segment items only (migration 300): the item's context and everything else it carried. */
  context: Json | null;
  original: Json | null;
}

export interface LegacyUsageTable {
  product_id: string;
  api_key_id: string;
  event_name: string;
  count: ColumnType<number | string, number, number>;
  first_seen_at: Timestamp;
  last_seen_at: Timestamp;
}

export interface MigrationsTable {
  version: number;
  name: string;
  applied_at: Timestamp;
}

/** Items a client sent that were not stored (or stored with a failed side effect): migration 302. */
export interface RejectionsTable {
  id: string;
  product_id: string;
  received_at: Timestamp;
  key_id: string | null;
  route: string;
  item_index: number;
  message_id: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  item: string;
}

/** Per product and hour: rejections counted but not recorded once the hourly cap was reached. */
export interface RejectionHoursTable {
  product_id: string;
  hour: string;
  unrecorded: number;
}

export interface Database {
  rejections: RejectionsTable;
  rejection_hours: RejectionHoursTable;
  products: ProductsTable;
  api_keys: ApiKeysTable;
  events: EventsTable;
  legacy_usage: LegacyUsageTable;
  inlet_migrations: MigrationsTable;
}

export type { Generated };

/** A stored time as ISO text: a Date (PostgreSQL), milliseconds since 1970 (SQLite's event times) or the text. */
export function toIso(value: Date | string | number): string {
  return typeof value === 'string' ? value : (value instanceof Date ? value : new Date(value)).toISOString();
}

export function toIsoOrNull(value: Date | string | null): string | null {
  return value === null ? null : toIso(value);
}

export function fromJson(value: string | Record<string, unknown>): Record<string, unknown> {
  return typeof value === 'string' ? (JSON.parse(value) as Record<string, unknown>) : value;
}
