// The database's clock, which leases are taken and judged by (never an instance's own: one whose clock runs ahead
// would take over live leases, one whose clock lags would hold on to dead ones).
import { sql, type RawBuilder } from 'kysely';
import type { Dialect } from './types.js';

/**
 * The database's now in epoch milliseconds. PostgreSQL: the statement's start (a lease's UPDATE that waited for
 * the row compares with the time before it waited: never later than the truth). SQLite: the statement's time.
 */
export const DATABASE_NOW_MS: Record<Dialect, RawBuilder<number>> = {
  postgres: sql<number>`floor(extract(epoch from statement_timestamp()) * 1000)::bigint`,
  sqlite: sql<number>`CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`,
};
