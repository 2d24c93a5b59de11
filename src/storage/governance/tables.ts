// The governance tables (migration governance.ts) as Kysely sees them, and what their modules share.
import type { ColumnType, Kysely } from 'kysely';
import type { Database } from '../database.js';
import type { CatalogScope } from '../governance-types.js';

type Timestamp = ColumnType<Date | string, string, string>;
type Count = ColumnType<number | string, number, number>;
type Json = ColumnType<string | Record<string, unknown> | unknown[], string, string>;

export interface GovernanceTables {
  catalog_events: {
    product_id: string;
    canonical_name: string;
    event_type: string;
    action: string;
    count: Count;
    first_seen: Timestamp;
    last_seen: Timestamp;
    properties_overflow: Count;
  };
  catalog_event_origins: { product_id: string; canonical_name: string; kind: 'source' | 'key'; value: string };
  catalog_properties: {
    product_id: string;
    scope: CatalogScope;
    canonical_name: string;
    path: string;
    json_type: string;
    count: Count;
    first_seen: Timestamp;
    last_seen: Timestamp;
  };
  catalog_overflow: { product_id: string; scope: CatalogScope; count: Count };
  tracking_plans: { product_id: string; version: number; plan: Json; created_at: Timestamp };
  plan_violations: {
    id: string;
    product_id: string;
    received_at: Timestamp;
    key_id: string | null;
    route: string;
    canonical_name: string;
    code: string;
    severity: 'rejected' | 'warning';
    plan_version: number;
    message_id: string | null;
    subject_id: string | null;
    errors: Json;
  };
  plan_violation_hours: { product_id: string; hour: string; unrecorded: number };
}

export type GovernanceDb = Kysely<Database & GovernanceTables>;

/** Rows per statement: well under every dialect's parameter limit. */
const CHUNK = 200;

export function chunks<T>(rows: T[]): T[][] {
  const out: T[][] = [];
  for (let at = 0; at < rows.length; at += CHUNK) out.push(rows.slice(at, at + CHUNK));
  return out;
}

export function parseJson<T>(value: unknown): T {
  return (typeof value === 'string' ? JSON.parse(value) : value) as T;
}
