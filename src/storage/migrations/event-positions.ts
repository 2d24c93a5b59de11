// The commit position of events (events-out §1) and the indexes of the admin reads (§3).
// Why these mechanisms and indexes, and what they cost on ingest: docs/design.md, "Commit position".
//
// SQLite: the table becomes a rowid table whose rowid *is* the position (`position INTEGER PRIMARY KEY
// AUTOINCREMENT`). SQLite has one writer at a time per database file, and a rowid is drawn inside the
// write transaction, so rowid order is commit order, across connections and processes. AUTOINCREMENT
// keeps a position from ever being reused when the newest rows are deleted (erasure), which would
// hide the new row from a reader already past it. Rows are appended at the right edge of the table
// B-tree (cheap for the write path); every secondary index ends in the rowid, so an index on
// (product_id, x) is ordered by (product_id, x, position) for free.
//
// PostgreSQL: sequence values are drawn before commit, so transactions commit out of sequence order.
// The position is the pair (tx, seq): `tx` the inserting transaction's id (xid8, 64-bit, never wraps),
// `seq` a sequence value for the order inside the transaction. Readers only read rows whose `tx` is below
// the oldest transaction still running (`pg_snapshot_xmin(pg_current_snapshot())`): no transaction below
// that horizon can commit later, and every transaction that commits later has a `tx` at or above it,
// so "(tx, seq) > last seen AND tx < horizon" can never skip a row, whatever the connections or instances.
// Version 400 (after Segment's 300, which added context and original): the rebuild carries them along.
import type { Migration } from './index.js';

const SQLITE_EVENT_COLUMNS =
  'id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original';

export const eventPositionMigrations: Migration[] = [
  {
    version: 400,
    name: 'event commit positions and read indexes',
    rewrites: { sqlite: 'every stored event', postgres: 'every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE events_positioned (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           id TEXT NOT NULL,
           product_id TEXT NOT NULL REFERENCES products(id),
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at TEXT NOT NULL,
           received_at TEXT NOT NULL,
           properties TEXT NOT NULL,
           api_key_id TEXT,
           context TEXT,
           original TEXT
         )`,
        // Existing rows get positions in receive order (ids are UUIDv7, so id breaks ties in creation order).
        `INSERT INTO events_positioned (${SQLITE_EVENT_COLUMNS})
           SELECT ${SQLITE_EVENT_COLUMNS} FROM events ORDER BY received_at, id`,
        `DROP TABLE events`,
        `ALTER TABLE events_positioned RENAME TO events`,
        // One event by uuid (and what the old primary key guaranteed). UUIDv7: appended, not scattered.
        `CREATE UNIQUE INDEX events_by_id ON events (product_id, id)`,
        `CREATE UNIQUE INDEX events_dedup ON events (product_id, source, external_id)`,
        // (product_id) + the implicit rowid = (product_id, position): the timeline, stream, export.
        `CREATE INDEX events_by_product ON events (product_id)`,
        // The canonical_name filter, in position order.
        `CREATE INDEX events_by_name ON events (product_id, canonical_name)`,
        // subject_type + subject_id and the user filter, in position order (was ordered by occurred_at).
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id)`,
        // received_from / received_to → position bounds (event-reads.ts). Receive times grow: appended.
        `CREATE INDEX events_by_time ON events (product_id, received_at)`,
      ],
      postgres: [
        // CACHE: each connection takes 64 values at a time. Only the order inside one transaction
        // matters (tx orders transactions), and a session's cached values increase.
        `CREATE SEQUENCE event_seq AS bigint CACHE 64`,
        // Existing rows all get the migration's transaction id, and sequence values in table order.
        `ALTER TABLE events ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id()`,
        `ALTER TABLE events ADD COLUMN seq bigint NOT NULL DEFAULT nextval('event_seq')`,
        `ALTER SEQUENCE event_seq OWNED BY events.seq`,
        `CREATE INDEX events_by_position ON events (product_id, tx, seq)`,
        `CREATE INDEX events_by_name ON events (product_id, canonical_name, tx, seq)`,
        `DROP INDEX events_by_subject`,
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id, tx, seq)`,
        // One event by uuid without knowing its month: the primary key starts (product_id, id) on each
        // partition, so this is one index probe per partition; no extra index.
      ],
    },
  },
];
