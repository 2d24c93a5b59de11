import type { Migration } from './index.js';

// Segment-compatible ingestion (segment-compat.md). Versions 300–399.
export const segmentMigrations: Migration[] = [
  {
    version: 300,
    name: 'events keep what a Segment item carried: context and original',
    statements: {
      // Nullable and without a default: adding them rewrites nothing, native events leave them NULL.
      sqlite: ['ALTER TABLE events ADD COLUMN context TEXT', 'ALTER TABLE events ADD COLUMN original TEXT'],
      postgres: ['ALTER TABLE events ADD COLUMN context JSONB', 'ALTER TABLE events ADD COLUMN original JSONB'],
    },
  },
  {
    version: 301,
    name: 'browser keys (inlet_pk_) with allowed origins',
    statements: {
      // SQLite cannot change a CHECK constraint in place: the table is rebuilt (nothing references it).
      sqlite: [
        `CREATE TABLE api_keys_next (
           id TEXT PRIMARY KEY,
           product_id TEXT NOT NULL REFERENCES products(id),
           kind TEXT NOT NULL CHECK (kind IN ('events', 'reports', 'browser')),
           name TEXT,
           prefix TEXT NOT NULL,
           key_hash TEXT NOT NULL UNIQUE,
           created_at TEXT NOT NULL,
           expires_at TEXT,
           revoked_at TEXT,
           last_used_at TEXT,
           allowed_origins TEXT
         )`,
        `INSERT INTO api_keys_next (id, product_id, kind, name, prefix, key_hash, created_at, expires_at, revoked_at, last_used_at)
           SELECT id, product_id, kind, name, prefix, key_hash, created_at, expires_at, revoked_at, last_used_at FROM api_keys`,
        'DROP TABLE api_keys',
        'ALTER TABLE api_keys_next RENAME TO api_keys',
        'CREATE INDEX api_keys_by_product ON api_keys (product_id, created_at)',
      ],
      postgres: [
        'ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_kind_check',
        "ALTER TABLE api_keys ADD CONSTRAINT api_keys_kind_check CHECK (kind IN ('events', 'reports', 'browser'))",
        'ALTER TABLE api_keys ADD COLUMN allowed_origins TEXT',
      ],
    },
  },
  {
    version: 302,
    name: 'rejections: what a client sent that was not stored, kept for a while',
    statements: {
      sqlite: [
        `CREATE TABLE rejections (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL,
           received_at TEXT NOT NULL,
           key_id TEXT,
           route TEXT NOT NULL,
           item_index INTEGER NOT NULL,
           message_id TEXT,
           code TEXT NOT NULL,
           detail TEXT NOT NULL,
           severity TEXT NOT NULL CHECK (severity IN ('rejected', 'warning')),
           item TEXT NOT NULL,
           PRIMARY KEY (product_id, id)
         ) WITHOUT ROWID`,
        'CREATE INDEX rejections_by_time ON rejections (received_at)',
        `CREATE TABLE rejection_hours (
           product_id TEXT NOT NULL,
           hour TEXT NOT NULL,
           unrecorded INTEGER NOT NULL,
           PRIMARY KEY (product_id, hour)
         )`,
      ],
      postgres: [
        `CREATE TABLE rejections (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL,
           received_at TIMESTAMPTZ NOT NULL,
           key_id TEXT,
           route TEXT NOT NULL,
           item_index INTEGER NOT NULL,
           message_id TEXT,
           code TEXT NOT NULL,
           detail TEXT NOT NULL,
           severity TEXT NOT NULL CHECK (severity IN ('rejected', 'warning')),
           item TEXT NOT NULL,
           PRIMARY KEY (product_id, id)
         )`,
        'CREATE INDEX rejections_by_time ON rejections (received_at)',
        `CREATE TABLE rejection_hours (
           product_id TEXT NOT NULL,
           hour TEXT NOT NULL,
           unrecorded INTEGER NOT NULL,
           PRIMARY KEY (product_id, hour)
         )`,
      ],
    },
  },
  {
    version: 303,
    name: 'users: identified flag (a userId of some call or a native identify; clarifications §18)',
    statements: {
      sqlite: ['ALTER TABLE users ADD COLUMN identified_at TEXT'],
      postgres: ['ALTER TABLE users ADD COLUMN identified_at TIMESTAMPTZ'],
    },
  },
];
