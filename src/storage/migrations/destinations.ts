// Destinations (events-out §6, clarifications §26): versions 500–599.
//
// - `destinations`: one row per destination with its settings, its delivery state (the cursor, retry
//   schedule, failures) and its lease (`lease_holder`, `lease_until`: the one instance delivering it).
// - `destination_deliveries`: the delivery log, one row per attempt (id: a UUIDv7, so newest first is
//   id order), pruned after a retention time.
// Keys start with product_id (test/distribution-keys.test.ts); SQLite's identity_messages position is
// its rowid, like events' (one node: nothing to distribute).
// - `identity_messages`: `user.identified` and `user.merged`, written in the same transaction as the
//   identity change, with a position in the same order as events:
//   - PostgreSQL: (tx, seq) like events, `seq` drawn from the events' own sequence, so (tx, seq) is one
//     total order over both tables. The identity transaction takes ROW EXCLUSIVE on `events` before its
//     first write, so the read horizon of event-reads.ts covers it too (see identity-store.ts).
//   - SQLite: its own AUTOINCREMENT position plus `after_event`, the last event position drawn when it
//     was written (writes are serialised, so that is exact): an identity message sorts after that event
//     and before the next.
// Timestamps are ISO text and times used for scheduling are epoch milliseconds, in both dialects.
import type { Migration } from './index.js';

export const destinationMigrations: Migration[] = [
  {
    version: 500,
    name: 'destinations, delivery log and identity messages',
    statements: {
      sqlite: [
        `CREATE TABLE destinations (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL REFERENCES products(id),
           type TEXT NOT NULL,
           name TEXT NOT NULL,
           status TEXT NOT NULL,
           disabled_reason TEXT,
           config TEXT NOT NULL,
           credentials TEXT,
           filter TEXT NOT NULL,
           batch TEXT NOT NULL,
           secret TEXT,
           previous_secret TEXT,
           previous_secret_until INTEGER,
           event_cursor TEXT,
           identity_cursor TEXT,
           consecutive_failures INTEGER NOT NULL DEFAULT 0,
           failing_since INTEGER,
           next_attempt_at INTEGER,
           last_success_at TEXT,
           last_error TEXT,
           last_error_at TEXT,
           delivered INTEGER NOT NULL DEFAULT 0,
           created_at TEXT NOT NULL,
           updated_at TEXT NOT NULL,
           lease_holder TEXT,
           lease_until INTEGER NOT NULL DEFAULT 0,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX destinations_by_id ON destinations (id)`,
        `CREATE TABLE destination_deliveries (
           product_id TEXT NOT NULL,
           destination_id TEXT NOT NULL,
           id TEXT NOT NULL,
           attempted_at TEXT NOT NULL,
           attempt INTEGER NOT NULL,
           webhook_id TEXT NOT NULL,
           message_ids TEXT NOT NULL,
           outcome TEXT NOT NULL,
           status INTEGER,
           error TEXT,
           duration_ms INTEGER NOT NULL,
           PRIMARY KEY (product_id, destination_id, id)
         )`,
        `CREATE INDEX destination_deliveries_by_time ON destination_deliveries (attempted_at)`,
        `CREATE TABLE identity_messages (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           after_event INTEGER NOT NULL,
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           type TEXT NOT NULL,
           created_at TEXT NOT NULL,
           data TEXT NOT NULL
         )`,
        `CREATE INDEX identity_messages_by_product ON identity_messages (product_id)`,
      ],
      postgres: [
        `CREATE TABLE destinations (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL REFERENCES products(id),
           type TEXT NOT NULL,
           name TEXT NOT NULL,
           status TEXT NOT NULL,
           disabled_reason TEXT,
           config TEXT NOT NULL,
           credentials TEXT,
           filter TEXT NOT NULL,
           batch TEXT NOT NULL,
           secret TEXT,
           previous_secret TEXT,
           previous_secret_until BIGINT,
           event_cursor TEXT,
           identity_cursor TEXT,
           consecutive_failures INTEGER NOT NULL DEFAULT 0,
           failing_since BIGINT,
           next_attempt_at BIGINT,
           last_success_at TEXT,
           last_error TEXT,
           last_error_at TEXT,
           delivered BIGINT NOT NULL DEFAULT 0,
           created_at TEXT NOT NULL,
           updated_at TEXT NOT NULL,
           lease_holder TEXT,
           lease_until BIGINT NOT NULL DEFAULT 0,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX destinations_by_id ON destinations (id)`,
        `CREATE TABLE destination_deliveries (
           product_id TEXT NOT NULL,
           destination_id TEXT NOT NULL,
           id TEXT NOT NULL,
           attempted_at TEXT NOT NULL,
           attempt INTEGER NOT NULL,
           webhook_id TEXT NOT NULL,
           message_ids TEXT NOT NULL,
           outcome TEXT NOT NULL,
           status INTEGER,
           error TEXT,
           duration_ms INTEGER NOT NULL,
           PRIMARY KEY (product_id, destination_id, id)
         )`,
        `CREATE INDEX destination_deliveries_by_time ON destination_deliveries (attempted_at)`,
        `CREATE TABLE identity_messages (
           tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
           seq bigint NOT NULL DEFAULT nextval('event_seq'),
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           type TEXT NOT NULL,
           created_at TEXT NOT NULL,
           data TEXT NOT NULL
         )`,
        `CREATE INDEX identity_messages_by_position ON identity_messages (product_id, tx, seq)`,
      ],
    },
  },
];
