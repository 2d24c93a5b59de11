// Destinations storage (events-out §6), one implementation over Kysely for both dialects, with SQLite's hot paths
// as prepared statements: the destinations and their leases (destinations/rows.ts), the delivery state and log
// (destinations/state.ts), and the one read deliverers make, the product's messages after a destination's
// cursor (destinations/reads.ts).
//
// Leases: `lease_holder` and `lease_until` (epoch ms) on the destination row. A holder renews its lease
// while it delivers; another instance takes it once `lease_until` has passed. Every write of delivery
// state is fenced by `lease_holder = me`, so an instance that lost its lease cannot move the cursor.
// PostgreSQL: a holder stopped inside a state write's transaction holds the row's lock for at most the lease's
// length (`leaseMs`), and a takeover waits for that lock only briefly per pass (destinations/state.ts, rows.ts).
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import { destinationReads } from './destinations/reads.js';
import { destinationFigures, destinationRows } from './destinations/rows.js';
import { deliveryState } from './destinations/state.js';
import type { DestinationDb, DestinationTables } from './destinations/tables.js';
import type { DestinationStore, Dialect } from './types.js';

export type { DestinationTables } from './destinations/tables.js';

/** INLET_DESTINATION_LEASE_MS's default, for a store opened without the setting. */
const DEFAULT_LEASE_MS = 15_000;

export function destinationStore(
  database: Kysely<Database>,
  dialect: Dialect,
  rawSqlite?: BetterSqlite3.Database,
  leaseMs = DEFAULT_LEASE_MS,
): DestinationStore {
  const db = database.withTables<DestinationTables>() as DestinationDb;
  return {
    ...destinationRows(db, dialect, leaseMs),
    ...destinationFigures(db, dialect, leaseMs),
    ...deliveryState(db, dialect, rawSqlite, leaseMs),
    ...destinationReads(database, dialect, rawSqlite),
  };
}
