// Issue 35, the compact row: versions 850–899 (docs/design.md, "The compact row").
//
// 851, PostgreSQL: `event_dedup` keeps a 16-byte digest of (source, external_id) instead of their text. The key
// is what the primary key compares and nothing reads it back: the duplicate's original is found through
// `event_id`, and the writer compares the original's own (product, source, external id) with the row's, so a
// digest collision fails the commit (503) instead of answering a false duplicate. `product_id` stays first
// (the primary key of every distributable table starts with it). The digest is the first 16 bytes of SHA-256
// over the source's length, the source and the external id (lengths make the pair unambiguous), written once
// as an SQL function that the writer, the deletes and this migration share. The table is rebuilt (its rows
// shrink only when rewritten); a database distributed with Citus distributes the new table again. SQLite keeps
// its keys as hashes in `event_keys` already.
//
// 852, SQLite: the index of one event by uuid is on the uuid alone, without the product id in front (24 bytes
// of every entry). Event ids are UUIDv7s the service draws, unique across products; a read by id checks the
// product on the row it finds. Still appended at the index's right edge (UUIDv7s are time-ordered).
// PostgreSQL keeps its primary key (product_id, id, received_at): a partitioned table's keys need the partition
// key, and Citus wants product_id first.
import type { Migration } from './index.js';

export const compactRowMigrations: Migration[] = [
  {
    version: 851,
    name: 'PostgreSQL: idempotency keys as a digest of source and external id',
    statements: {
      sqlite: [],
      postgres: [
        // STABLE, not IMMUTABLE: convert_to is. A plain SQL body (no SET clause) so that the planner inlines it.
        `CREATE FUNCTION inlet_event_dedup_key(source text, external_id text)
         RETURNS uuid
         LANGUAGE sql STABLE STRICT PARALLEL SAFE
         AS $fn$
           SELECT encode(substring(sha256(convert_to(length(source)::text || ':' || source || external_id, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid
         $fn$`,
        `CREATE TABLE event_dedup_digest (
           product_id TEXT NOT NULL,
           key_hash UUID NOT NULL,
           event_id UUID NOT NULL,
           received_at TIMESTAMPTZ NOT NULL
         )`,
        `INSERT INTO event_dedup_digest (product_id, key_hash, event_id, received_at)
           SELECT product_id, inlet_event_dedup_key(source, external_id), event_id, received_at
             FROM event_dedup ORDER BY received_at`,
        `DROP TABLE event_dedup`,
        `ALTER TABLE event_dedup_digest RENAME TO event_dedup`,
        `ALTER TABLE event_dedup ADD CONSTRAINT event_dedup_pkey PRIMARY KEY (product_id, key_hash)`,
        // Rows arrive in time order: retention finds a month's keys through a BRIN index, as before.
        `CREATE INDEX event_dedup_by_time ON event_dedup USING brin (received_at)`,
      ],
    },
  },
  {
    version: 852,
    name: 'SQLite: events by uuid without the product id in the index',
    statements: {
      sqlite: [`DROP INDEX events_by_id`, `CREATE UNIQUE INDEX events_by_id ON events (id)`],
      postgres: [],
    },
  },
];
