import type { Migration } from './index.js';

export const coreMigrations: Migration[] = [
  {
    version: 1,
    name: 'products, api keys, events, legacy usage',
    statements: {
      sqlite: [
        `CREATE TABLE products (
           id TEXT PRIMARY KEY,
           name TEXT NOT NULL,
           created_at TEXT NOT NULL
         )`,
        `CREATE TABLE api_keys (
           id TEXT PRIMARY KEY,
           product_id TEXT NOT NULL REFERENCES products(id),
           kind TEXT NOT NULL CHECK (kind IN ('events', 'reports')),
           name TEXT,
           prefix TEXT NOT NULL,
           key_hash TEXT NOT NULL UNIQUE,
           created_at TEXT NOT NULL,
           expires_at TEXT,
           revoked_at TEXT,
           last_used_at TEXT
         )`,
        `CREATE INDEX api_keys_by_product ON api_keys (product_id, created_at)`,
        `CREATE TABLE events (
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
           PRIMARY KEY (product_id, id)
         ) WITHOUT ROWID`,
        // The idempotency key: NULL external ids never collide, in SQLite as in PostgreSQL.
        `CREATE UNIQUE INDEX events_dedup ON events (product_id, source, external_id)`,
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id, occurred_at)`,
        `CREATE TABLE legacy_usage (
           product_id TEXT NOT NULL,
           api_key_id TEXT NOT NULL,
           event_name TEXT NOT NULL,
           count INTEGER NOT NULL,
           first_seen_at TEXT NOT NULL,
           last_seen_at TEXT NOT NULL,
           PRIMARY KEY (product_id, api_key_id, event_name)
         )`,
      ],
      postgres: [
        `CREATE TABLE products (
           id TEXT PRIMARY KEY,
           name TEXT NOT NULL,
           created_at TIMESTAMPTZ NOT NULL
         )`,
        `CREATE TABLE api_keys (
           id TEXT PRIMARY KEY,
           product_id TEXT NOT NULL REFERENCES products(id),
           kind TEXT NOT NULL CHECK (kind IN ('events', 'reports')),
           name TEXT,
           prefix TEXT NOT NULL,
           key_hash TEXT NOT NULL UNIQUE,
           created_at TIMESTAMPTZ NOT NULL,
           expires_at TIMESTAMPTZ,
           revoked_at TIMESTAMPTZ,
           last_used_at TIMESTAMPTZ
         )`,
        `CREATE INDEX api_keys_by_product ON api_keys (product_id, created_at)`,
        `CREATE TABLE events (
           id UUID NOT NULL,
           product_id TEXT NOT NULL,
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at TIMESTAMPTZ NOT NULL,
           received_at TIMESTAMPTZ NOT NULL,
           properties JSONB NOT NULL,
           api_key_id TEXT,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE UNIQUE INDEX events_dedup ON events (product_id, source, external_id)`,
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id, occurred_at)`,
        `CREATE TABLE legacy_usage (
           product_id TEXT NOT NULL,
           api_key_id TEXT NOT NULL,
           event_name TEXT NOT NULL,
           count BIGINT NOT NULL,
           first_seen_at TIMESTAMPTZ NOT NULL,
           last_seen_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, api_key_id, event_name)
         )`,
      ],
    },
  },
];
