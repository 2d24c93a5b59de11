// What a database backend gives connect.ts (sqlite/backend.ts, postgres/backend.ts): the database it opened and
// tuned and, once the schema is migrated, everything of it that is not the same on both databases. connect.ts
// migrates the schema and assembles the shared stores from these parts.
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { EventDeletes } from './erasure/event-deletes.js';
import type { StoreDialect } from './store-dialect.js';
import type { DestinationStore, Dialect, EventStore, StorageCapabilities } from './types.js';

export interface Backend {
  /** The SQL dialect of the migrations, and of the event reads and the destination store, which pick SQL by it. */
  readonly dialect: Dialect;
  readonly db: Kysely<Database>;
  /**
   * Builds what needs the migrated schema (statements prepared against its tables), once migrations ran
   * (`migrated`) or were skipped.
   */
  ready(migrated: boolean): Promise<ReadyBackend>;
}

export interface ReadyBackend {
  /** The port's display name. */
  readonly name: string;
  readonly capabilities: StorageCapabilities;
  /** What the shared stores (identity, traffic, governance, erasure) do differently here. */
  readonly storeDialect: StoreDialect;
  readonly events: EventStore;
  readonly destinations: DestinationStore;
  /** How erasure and retention delete events and reclaim the space. */
  readonly eventDeletes: EventDeletes;
  /** Throws when the database cannot be reached (or cannot take writes). */
  ping(): Promise<void>;
  isUnavailable(error: unknown): boolean;
  /** Stops the backend's background work and closes its connections. */
  close(): Promise<void>;
}
