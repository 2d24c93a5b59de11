// PostgreSQL: an event's `properties`, `context` and `original` stored as `json` (the text as the writer sends
// it) instead of `jsonb` (issue 11; docs/design.md, "JSON columns as text on PostgreSQL"). Nothing queries
// inside them but erasure's `->>` (which `json` has too); every read hands them back as text or parses them in
// Node. jsonb cost ~44 bytes more per row on the bench's 300-byte properties, its binary form was built on every
// insert and printed back on every read, and it reordered keys, so PostgreSQL read events back with their keys
// in another order than SQLite (which stores the text). SQLite: nothing to do (TEXT already).
//
// The ALTER rewrites every partition of `events` and rebuilds its indexes, under an exclusive lock, before the
// server listens: linear in the events stored (timed in docs/cli.md, `inlet migrate`).
// Rows stored before it keep jsonb's text form (`{"a": 1}`, keys reordered): the same values.
import type { Migration } from './index.js';

export const eventJsonMigrations: Migration[] = [
  {
    version: 805,
    name: 'PostgreSQL: event properties, context and original as json text instead of jsonb',
    rewrites: { postgres: 'every stored event' },
    statements: {
      sqlite: [],
      postgres: [
        `ALTER TABLE events
           ALTER COLUMN properties TYPE json USING properties::json,
           ALTER COLUMN context TYPE json USING context::json,
           ALTER COLUMN original TYPE json USING original::json`,
      ],
    },
  },
];
