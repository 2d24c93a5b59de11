// The erasure tables as Kysely sees them, and what the erasure modules share.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../database.js';
import type { ErasureCounts, ErasurePhase, ErasureRecord, ErasureStatus } from '../types.js';

export type ErasureTables = {
  erasures: {
    product_id: string;
    id: string;
    status: string;
    phase: string;
    reason: string | null;
    id_hmac: string;
    requested_at: string;
    started_at: string | null;
    finished_at: string | null;
    counts: string;
    error: string | null;
    lease_holder: string | null;
    lease_until: number | string;
  };
  erasure_targets: { product_id: string; erasure_id: string; kind: string; value: string };
  suppressions: { product_id: string; id: string; id_hmac: string; erasure_id: string | null; created_at: string };
  rejection_subjects: { product_id: string; external_id: string; rejection_id: string };
  background_leases: { name: string; holder: string | null; lease_until: number | string };
  installation_secrets: { name: string; secret: string; created_at: string };
  user_ids: { product_id: string; external_id: string; user_id: string };
  user_merges: {
    product_id: string;
    id: string;
    from_external_id: string;
    from_user_id: string | null;
    into_user_id: string;
    into_external_id: string;
  };
  users: { product_id: string; id: string; traits: string };
  user_identifiers: { product_id: string; kind: string; value: string; user_id: string };
  plan_violations: { product_id: string; id: string; subject_id: string | null };
  destinations: { product_id: string; id: string; identity_cursor: string | null };
  identity_messages: {
    product_id: string;
    id: string;
    type: string;
    created_at: string;
    data: string;
    user_id: string | null;
  };
};

export type ErasureDb = Kysely<Database & ErasureTables>;

export const EMPTY_COUNTS: ErasureCounts = {
  ids: 0,
  events: 0,
  identifiers: 0,
  traits: 0,
  merges: 0,
  identity_messages: 0,
  rejections: 0,
  violations: 0,
};

/** `(a, b, …)`: a list of parameters for IN. */
export function list(values: string[]): RawBuilder<unknown> {
  return sql`(${sql.join(values.map((v) => sql`${v}`))})`;
}

/** A LIKE pattern matching `value` as a JSON string anywhere in a text column (escape character `\`). */
export function jsonStringPattern(value: string): string {
  return `%${JSON.stringify(value).replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

export function fromRow(row: ErasureTables['erasures']): ErasureRecord {
  return {
    id: row.id,
    productId: row.product_id,
    status: row.status as ErasureStatus,
    phase: row.phase as ErasurePhase,
    reason: row.reason,
    idHmac: row.id_hmac,
    requestedAt: row.requested_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    counts: { ...EMPTY_COUNTS, ...(JSON.parse(row.counts) as Partial<ErasureCounts>) },
    error: row.error,
  };
}

/** Compares two identity-log positions: `tx.seq` (PostgreSQL) or a rowid (SQLite). */
export function positionAtOrBefore(position: string, cursor: string): boolean {
  const a = position.split('.').map(BigInt);
  const b = cursor.split('.').map(BigInt);
  for (let i = 0; i < a.length; i++) {
    if (a[i]! !== b[i]!) return a[i]! < b[i]!;
  }
  return true;
}

/** The tables an erasure deletes from (vacuumed afterwards on PostgreSQL). */
export const TOUCHED_TABLES = [
  'events',
  'event_dedup',
  'users',
  'user_ids',
  'user_identifiers',
  'user_merges',
  'identity_messages',
  'rejections',
  'rejection_subjects',
  'plan_violations',
  'erasure_targets',
];
