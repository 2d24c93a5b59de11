// Maintenance of the monthly partitions of `events` on PostgreSQL. The work is done by two SQL
// functions created by migration 1 (so operators can also call them from psql or pg_cron); these
// are their TypeScript entry points.
import { sql, type Kysely } from 'kysely';
import type { Database } from '../database.js';

/** Months created ahead of the current (UTC) one. */
export const PARTITION_MONTHS_AHEAD = 3;

/** How often a running instance re-checks its partitions: well under a month, cheap when nothing is due. */
export const PARTITION_MAINTENANCE_INTERVAL_MS = 6 * 3_600_000;

/**
 * Creates the partitions of this month and the next `monthsAhead` months that are missing (moving
 * any of their rows out of the default partition). Idempotent; safe from several instances at once.
 * Returns how many partitions were created.
 */
export async function ensureEventPartitions(db: Kysely<Database>, monthsAhead = PARTITION_MONTHS_AHEAD): Promise<number> {
  const result = await sql<{ created: number }>`SELECT inlet_ensure_event_partitions(${monthsAhead}::integer) AS created`.execute(db);
  return Number(result.rows[0]?.created ?? 0);
}

/**
 * Retention: drops every monthly partition that ends on or before the start of `cutoff`'s UTC month,
 * deletes older rows of the default partition, and the idempotency keys of all of them. Returns the
 * dropped partitions. After this, a retry of a dropped event's external_id is stored as a new event.
 */
export async function dropEventPartitionsBefore(db: Kysely<Database>, cutoff: Date | string): Promise<string[]> {
  const at = typeof cutoff === 'string' ? cutoff : cutoff.toISOString();
  const result = await sql<{ name: string }>`SELECT name FROM inlet_drop_event_partitions_before(${at}::timestamptz) AS name`.execute(db);
  return result.rows.map((row) => row.name);
}

export interface EventPartition {
  name: string;
  /** `DEFAULT` or `FOR VALUES FROM (…) TO (…)`. */
  bounds: string;
}

/** The partitions of `events` with their bounds (for operators and tests). */
export async function listEventPartitions(db: Kysely<Database>): Promise<EventPartition[]> {
  const result = await sql<{ name: string; bounds: string }>`
    SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bounds
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'events'::regclass
     ORDER BY c.relname`.execute(db);
  return result.rows.map((row) => ({ name: row.name, bounds: row.bounds }));
}
