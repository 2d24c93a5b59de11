// The traffic tables (migration traffic.ts) as Kysely sees them, and their rows as records.
import type { ColumnType, Kysely, Selectable } from 'kysely';
import { fromJson, toIso, toIsoOrNull, type Database } from '../database.js';
import type { SyncRunRecord, TrafficProviderName, TrafficSourceSummary } from '../types.js';

type Timestamp = ColumnType<Date | string, string, string>;
type NullableTimestamp = ColumnType<Date | string | null, string | null, string | null>;
type Json = ColumnType<string | Record<string, unknown>, string, string>;
/** BIGINT sums and counts may come back as strings from some drivers; always read through Number(). */
type Count = ColumnType<number | string | null, number | null, number | null>;

type TrafficSourcesTable = {
  product_id: string;
  provider: TrafficProviderName;
  config: Json;
  secret: Json;
  created_at: Timestamp;
  updated_at: Timestamp;
};

type TrafficRowsTable = {
  product_id: string;
  date: string;
  source: string;
  medium: string;
  campaign: string;
  landing_page: string;
  provider: string;
  sessions: Count;
  users: Count;
  new_users: Count;
  pageviews: Count;
  engaged_sessions: Count;
  bounce_rate: number | null;
  avg_session_duration: number | null;
  conversions: Count;
};

type SyncRunsTable = {
  product_id: string;
  id: string;
  provider: string;
  kind: SyncRunRecord['kind'];
  started_at: Timestamp;
  finished_at: NullableTimestamp;
  range_from: string;
  range_to: string;
  row_count: Count;
  outcome: SyncRunRecord['outcome'];
  error: string | null;
};

export type TrafficTables = {
  traffic_sources: TrafficSourcesTable;
  traffic_rows: TrafficRowsTable;
  sync_runs: SyncRunsTable;
};

export type TrafficDb = Kysely<Database & TrafficTables>;

export function toNumberOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

export function summaryFromRow(row: Selectable<TrafficSourcesTable>): TrafficSourceSummary {
  return {
    productId: row.product_id,
    provider: row.provider,
    config: fromJson(row.config),
    createdAt: toIso(row.created_at),
    updatedAt: toIso(row.updated_at),
  };
}

export function runFromRow(row: Selectable<SyncRunsTable>): SyncRunRecord {
  return {
    id: row.id,
    productId: row.product_id,
    provider: row.provider,
    kind: row.kind,
    startedAt: toIso(row.started_at),
    finishedAt: toIsoOrNull(row.finished_at),
    from: row.range_from,
    to: row.range_to,
    rows: toNumberOrNull(row.row_count),
    outcome: row.outcome,
    error: row.error,
  };
}
