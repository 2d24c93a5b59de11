// The destinations' tables (migrations/destinations.ts) as Kysely sees them, added to the shared Database type
// by the destination store's parts (rows.ts, state.ts) so this area owns its own schema.
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';

export type DestinationTables = {
  destinations: {
    id: string;
    product_id: string;
    type: string;
    name: string;
    status: string;
    disabled_reason: string | null;
    config: string;
    credentials: string | null;
    filter: string;
    batch: string;
    secret: string | null;
    previous_secret: string | null;
    previous_secret_until: number | null;
    event_cursor: string | null;
    identity_cursor: string | null;
    consecutive_failures: number;
    failing_since: number | null;
    next_attempt_at: number | null;
    last_success_at: string | null;
    last_error: string | null;
    last_error_at: string | null;
    delivered: number;
    created_at: string;
    updated_at: string;
    lease_holder: string | null;
    lease_until: number;
    /** JSON list of the latest warnings (a warehouse's limits), newest last; migration 550. */
    warnings: string | null;
    /** Columns a warehouse's loads added to its tables, and column types they widened; migration 551. */
    columns_added: number;
    type_widenings: number;
    /** JSON `{ "steps": [..] }` of the destination's own transformation, or null; migration 651. */
    transformation: string | null;
  };
  destination_deliveries: {
    product_id: string;
    id: string;
    destination_id: string;
    attempted_at: string;
    attempt: number;
    webhook_id: string;
    message_ids: string;
    outcome: string;
    status: number | null;
    error: string | null;
    duration_ms: number;
  };
};

export type DestinationRow = DestinationTables['destinations'];

export type DestinationDb = Kysely<Database & DestinationTables>;
