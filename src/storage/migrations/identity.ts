// Identity tables (contract §6). Every key starts with product_id (one tenant's rows stay together,
// and Citus can distribute by product). The constraints, not the locking, are what guarantee that an
// identifier belongs to at most one user and an external id resolves to exactly one user: user_ids
// is keyed by (product, external id), and a user's own external id must map to that user (a deferred
// foreign key, checked at commit, because a user and its mapping are written in one transaction).
//
// Traits are TEXT holding JSON on both dialects: they are never queried inside the database, and
// TEXT keeps them byte-for-byte as the client sent them (jsonb would reorder keys and refuse \u0000).
import type { Migration } from './index.js';

export const identityMigrations: Migration[] = [
  {
    version: 100,
    name: 'users, user ids, identifiers, merges',
    statements: {
      sqlite: [
        `CREATE TABLE users (
           product_id TEXT NOT NULL REFERENCES products(id),
           id TEXT NOT NULL,
           external_id TEXT NOT NULL,
           traits TEXT NOT NULL,
           created_at TEXT NOT NULL,
           updated_at TEXT NOT NULL,
           PRIMARY KEY (product_id, id),
           UNIQUE (product_id, external_id),
           FOREIGN KEY (product_id, external_id, id) REFERENCES user_ids (product_id, external_id, user_id) DEFERRABLE INITIALLY DEFERRED
         )`,
        `CREATE TABLE user_ids (
           product_id TEXT NOT NULL,
           external_id TEXT NOT NULL,
           user_id TEXT NOT NULL,
           PRIMARY KEY (product_id, external_id),
           FOREIGN KEY (product_id, user_id) REFERENCES users (product_id, id)
         ) WITHOUT ROWID`,
        `CREATE INDEX user_ids_by_user ON user_ids (product_id, user_id)`,
        `CREATE UNIQUE INDEX user_ids_mapping ON user_ids (product_id, external_id, user_id)`,
        `CREATE TABLE user_identifiers (
           product_id TEXT NOT NULL,
           kind TEXT NOT NULL,
           value TEXT NOT NULL,
           user_id TEXT NOT NULL,
           PRIMARY KEY (product_id, kind, value),
           UNIQUE (product_id, user_id, kind),
           FOREIGN KEY (product_id, user_id) REFERENCES users (product_id, id)
         ) WITHOUT ROWID`,
        `CREATE TABLE user_merges (
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           from_external_id TEXT NOT NULL,
           from_user_id TEXT,
           into_user_id TEXT NOT NULL,
           into_external_id TEXT NOT NULL,
           merged_at TEXT NOT NULL,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX user_merges_by_from ON user_merges (product_id, from_external_id)`,
      ],
      postgres: [
        `CREATE TABLE users (
           product_id TEXT NOT NULL REFERENCES products(id),
           id TEXT NOT NULL,
           external_id TEXT NOT NULL,
           traits TEXT NOT NULL,
           created_at TIMESTAMPTZ NOT NULL,
           updated_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, id),
           UNIQUE (product_id, external_id)
         )`,
        `CREATE TABLE user_ids (
           product_id TEXT NOT NULL,
           external_id TEXT NOT NULL,
           user_id TEXT NOT NULL,
           PRIMARY KEY (product_id, external_id),
           FOREIGN KEY (product_id, user_id) REFERENCES users (product_id, id)
         )`,
        `CREATE INDEX user_ids_by_user ON user_ids (product_id, user_id)`,
        `CREATE UNIQUE INDEX user_ids_mapping ON user_ids (product_id, external_id, user_id)`,
        `ALTER TABLE users ADD CONSTRAINT users_canonical_id_maps_to_self
           FOREIGN KEY (product_id, external_id, id) REFERENCES user_ids (product_id, external_id, user_id)
           DEFERRABLE INITIALLY DEFERRED`,
        `CREATE TABLE user_identifiers (
           product_id TEXT NOT NULL,
           kind TEXT NOT NULL,
           value TEXT NOT NULL,
           user_id TEXT NOT NULL,
           PRIMARY KEY (product_id, kind, value),
           UNIQUE (product_id, user_id, kind),
           FOREIGN KEY (product_id, user_id) REFERENCES users (product_id, id)
         )`,
        `CREATE TABLE user_merges (
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           from_external_id TEXT NOT NULL,
           from_user_id TEXT,
           into_user_id TEXT NOT NULL,
           into_external_id TEXT NOT NULL,
           merged_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX user_merges_by_from ON user_merges (product_id, from_external_id)`,
      ],
    },
  },
];
