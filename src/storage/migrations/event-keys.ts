// SQLite: idempotency keys move from the UNIQUE index on events (product_id, source, external_id) to the
// compact `event_keys` table that the writer fills by sorted merges (storage/sqlite/event-keys.ts; docs/design.md,
// "Idempotency keys on SQLite"). The existing events' keys are written here, sorted, in one pass; the index
// goes. `inlet_event_key` is the JS hash that Inlet's connection registers before migrations run (only this
// backfill calls it: the schema itself needs no custom function, so any SQLite client can read and delete).
// PostgreSQL keeps its `event_dedup` table (postgres/event-writer.ts): nothing changes there.
import type { Migration } from './index.js';

export const eventKeyMigrations: Migration[] = [
  {
    version: 800,
    name: 'SQLite idempotency keys by hash, merged off the write path',
    rewrites: { sqlite: 'an index entry for every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE event_keys_state (
           id INTEGER PRIMARY KEY CHECK (id = 1),
           seed INTEGER NOT NULL,
           merged_through INTEGER NOT NULL
         )`,
        `INSERT INTO event_keys_state (id, seed, merged_through)
           VALUES (1, abs(random() % 2147483648), (SELECT coalesce(max(position), 0) FROM events))`,
        `CREATE TABLE event_keys (
           h INTEGER NOT NULL,
           position INTEGER NOT NULL,
           PRIMARY KEY (h, position)
         ) WITHOUT ROWID`,
        // The same keys by position: how a deleted row finds its key (the trigger below), written in position
        // order by merges (appended, cheap).
        `CREATE TABLE event_keys_by_position (
           position INTEGER PRIMARY KEY,
           h INTEGER NOT NULL
         )`,
        `INSERT INTO event_keys_by_position (position, h)
           SELECT position, inlet_event_key((SELECT seed FROM event_keys_state), product_id, source, external_id)
           FROM events WHERE external_id IS NOT NULL ORDER BY position`,
        `INSERT INTO event_keys (h, position) SELECT h, position FROM event_keys_by_position ORDER BY h, position`,
        `DROP INDEX IF EXISTS events_dedup`,
        // An erased or expired event takes its key along; a key not merged yet is merged only if its row exists.
        `CREATE TRIGGER events_key_gone AFTER DELETE ON events WHEN OLD.external_id IS NOT NULL BEGIN
           DELETE FROM event_keys WHERE h = (SELECT h FROM event_keys_by_position WHERE position = OLD.position) AND position = OLD.position;
           DELETE FROM event_keys_by_position WHERE position = OLD.position;
         END`,
      ],
      postgres: [],
    },
  },
  {
    // The trigger of 800 deleted each erased or expired row's key at once: a random page of event_keys per row
    // (+1.44 WAL frames and 20–25 µs a row, a fifth of an erasure's writes at 10 M events; bench/runs/2026-11-write-path.md). Now
    // it only notes the position, appended to a small table, and the writer deletes those keys in sorted passes
    // (sqlite/event-keys.ts, sweep). Until then a key whose row is gone is harmless: every candidate position is
    // read back, and a missing row matches nothing.
    version: 801,
    name: 'SQLite: keys of deleted events removed in sorted passes',
    statements: {
      sqlite: [
        `CREATE TABLE event_keys_gone (position INTEGER PRIMARY KEY)`,
        `DROP TRIGGER IF EXISTS events_key_gone`,
        `CREATE TRIGGER events_key_gone AFTER DELETE ON events WHEN OLD.external_id IS NOT NULL BEGIN
           INSERT OR IGNORE INTO event_keys_gone (position) VALUES (OLD.position);
         END`,
      ],
      postgres: [],
    },
  },
  {
    // The subject index on events (product_id, subject_type, subject_id) was the last index the write path kept
    // up with a random page per event: 100,000 subjects spread each commit's rows over as many leaves (at 10 M
    // events, 57 → ~25 µs of write path per event without it; bench/runs/2026-11-write-path.md). Its entries now go where the
    // idempotency keys went (sqlite/event-keys.ts, kind `subjects`): (hash of product_id and subject_id,
    // position), the newest in memory, merged in sorted passes; reads and erasures by subject look up the
    // positions there and read the rows back. The existing rows' entries are written here, sorted.
    version: 802,
    name: 'SQLite: events by subject through a hash index merged off the write path',
    rewrites: { sqlite: 'an index entry for every stored event' },
    statements: {
      sqlite: [
        `ALTER TABLE event_keys_state ADD COLUMN subjects_merged_through INTEGER NOT NULL DEFAULT 0`,
        `CREATE TABLE event_subjects (
           h INTEGER NOT NULL,
           position INTEGER NOT NULL,
           PRIMARY KEY (h, position)
         ) WITHOUT ROWID`,
        `CREATE TABLE event_subjects_by_position (
           position INTEGER PRIMARY KEY,
           h INTEGER NOT NULL
         )`,
        `CREATE TABLE event_subjects_gone (position INTEGER PRIMARY KEY)`,
        `INSERT INTO event_subjects_by_position (position, h)
           SELECT position, inlet_event_key((SELECT seed FROM event_keys_state), product_id, '', subject_id)
           FROM events ORDER BY position`,
        `INSERT INTO event_subjects (h, position) SELECT h, position FROM event_subjects_by_position ORDER BY h, position`,
        `UPDATE event_keys_state SET subjects_merged_through = (SELECT coalesce(max(position), 0) FROM events) WHERE id = 1`,
        `DROP INDEX IF EXISTS events_by_subject`,
        `CREATE TRIGGER events_subject_gone AFTER DELETE ON events BEGIN
           INSERT OR IGNORE INTO event_subjects_gone (position) VALUES (OLD.position);
         END`,
      ],
      postgres: [],
    },
  },
  {
    // Levels (docs/design.md, "Merges whose cost does not grow with the table"): a merge wrote its 250,000 hashes
    // into event_keys (event_subjects) sorted, which at 10 M entries touched nearly every leaf, so each merge
    // rewrote the whole table (~2.7 KB of WAL per event at 10 M against 1.5 KB at an empty table; bench/runs/2026-11-write-path.md).
    // Merges now write into a small recent level, rewritten each time but small, that moves into the big table
    // only once it has grown to about sqrt(2 × big × tail) entries (sqlite/event-keys.ts): each leaf of the big
    // table is written once per several merges. Lookups read both levels; an entry is in one at a time.
    version: 803,
    name: 'SQLite: a recent level in front of event_keys and event_subjects',
    statements: {
      sqlite: [
        `CREATE TABLE event_keys_recent (
           h INTEGER NOT NULL,
           position INTEGER NOT NULL,
           PRIMARY KEY (h, position)
         ) WITHOUT ROWID`,
        `CREATE TABLE event_subjects_recent (
           h INTEGER NOT NULL,
           position INTEGER NOT NULL,
           PRIMARY KEY (h, position)
         ) WITHOUT ROWID`,
      ],
      postgres: [],
    },
  },
  {
    // A merge's first pass wrote each entry again by position (event_keys_by_position, event_subjects_by_position),
    // only so that a sweep could find a deleted row's hash: ~45 % of the merges' time on the event loop (a timing
    // of each phase over 1.5 M events; bench/runs/2026-11-write-path.md) and ~14 bytes an entry on disk. Now each row carries its two
    // hashes (the writer computes them anyway) and the trigger's note takes them from the deleted row. The note
    // holds a hash, never the ids themselves (erasure: no id may outlive its rows). The by-position tables stay for
    // the rows stored before this migration (and bulk loads, mergeAllEventKeys), which have no hashes: the trigger
    // looks those up there, and sweeps delete from them; nothing else writes them.
    version: 804,
    name: 'SQLite: events carry their key and subject hashes; merges write no by-position entries',
    rewrites: { sqlite: 'every stored event' },
    statements: {
      sqlite: [
        `ALTER TABLE events ADD COLUMN key_hash INTEGER`,
        `ALTER TABLE events ADD COLUMN subject_hash INTEGER`,
        // The rows after the last merges (at most a tail or two) get their hashes here, so that whichever of them
        // is deleted after its key is merged leaves a note with the hash.
        `UPDATE events SET key_hash = inlet_event_key((SELECT seed FROM event_keys_state), product_id, source, external_id)
           WHERE position > (SELECT merged_through FROM event_keys_state) AND external_id IS NOT NULL`,
        `UPDATE events SET subject_hash = inlet_event_key((SELECT seed FROM event_keys_state), product_id, '', subject_id)
           WHERE position > (SELECT subjects_merged_through FROM event_keys_state)`,
        ...(['keys', 'subjects'] as const).flatMap((kind) => [
          `ALTER TABLE event_${kind}_gone ADD COLUMN h INTEGER`,
          `UPDATE event_${kind}_gone SET h = (SELECT h FROM event_${kind}_by_position p WHERE p.position = event_${kind}_gone.position)`,
        ]),
        `DROP TRIGGER IF EXISTS events_key_gone`,
        `CREATE TRIGGER events_key_gone AFTER DELETE ON events WHEN OLD.external_id IS NOT NULL BEGIN
           INSERT OR IGNORE INTO event_keys_gone (position, h)
             VALUES (OLD.position, coalesce(OLD.key_hash, (SELECT h FROM event_keys_by_position WHERE position = OLD.position)));
         END`,
        `DROP TRIGGER IF EXISTS events_subject_gone`,
        `CREATE TRIGGER events_subject_gone AFTER DELETE ON events BEGIN
           INSERT OR IGNORE INTO event_subjects_gone (position, h)
             VALUES (OLD.position, coalesce(OLD.subject_hash, (SELECT h FROM event_subjects_by_position WHERE position = OLD.position)));
         END`,
      ],
      postgres: [],
    },
  },
];
