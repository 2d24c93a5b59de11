import type { Migration } from './index.js';

// Erasure of a person and retention (governance.md §3–4). Versions 700–799.
//
// - `erasures`: the audit and the job. Never the external id: `id_hmac` is an HMAC of it under the
//   installation secret (services/erasure/key.ts), so "was this id erased?" is answered by hashing
//   it again. `phase` and `counts` let a job resume after a restart; the lease columns keep one runner.
// - `erasure_targets`: the ids a running job deletes (every external id linked to the person, and the
//   user rows' ids). Kept only while the job runs: the job's last step deletes them.
// - `suppressions`: HMACs of suppressed external ids per product; ingest refuses their items.
// - `rejection_subjects`: the ids a recorded rejection names (userId, anonymousId, subject_id, …), so
//   an erasure finds its rejections by index instead of scanning their items.
// - `identity_messages.user_id`: the user a `user.identified`/`user.merged` message is about, for the
//   same reason.
// - `products.retention_events_days`: null keeps events forever.
// - `background_leases`: one named background task (retention) runs on one instance at a time.
// - `installation_secrets`: the generated HMAC key when INLET_INSTALLATION_SECRET is not set.
const common = (text: string, bigint: string) => [
  `CREATE TABLE erasures (
     product_id TEXT NOT NULL REFERENCES products(id),
     id TEXT NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
     phase TEXT NOT NULL,
     reason TEXT,
     id_hmac TEXT NOT NULL,
     requested_at ${text} NOT NULL,
     started_at ${text},
     finished_at ${text},
     counts TEXT NOT NULL,
     error TEXT,
     lease_holder TEXT,
     lease_until ${bigint} NOT NULL DEFAULT 0,
     PRIMARY KEY (product_id, id)
   )`,
  'CREATE INDEX erasures_by_status ON erasures (status)',
  'CREATE INDEX erasures_by_hmac ON erasures (product_id, id_hmac)',
  `CREATE TABLE erasure_targets (
     product_id TEXT NOT NULL,
     erasure_id TEXT NOT NULL,
     kind TEXT NOT NULL CHECK (kind IN ('external_id', 'user_id')),
     value TEXT NOT NULL,
     PRIMARY KEY (product_id, erasure_id, kind, value)
   )`,
  `CREATE TABLE suppressions (
     product_id TEXT NOT NULL REFERENCES products(id),
     id TEXT NOT NULL,
     id_hmac TEXT NOT NULL,
     erasure_id TEXT,
     created_at ${text} NOT NULL,
     PRIMARY KEY (product_id, id),
     UNIQUE (product_id, id_hmac)
   )`,
  `CREATE TABLE rejection_subjects (
     product_id TEXT NOT NULL,
     external_id TEXT NOT NULL,
     rejection_id TEXT NOT NULL,
     PRIMARY KEY (product_id, external_id, rejection_id)
   )`,
  'CREATE INDEX rejection_subjects_by_rejection ON rejection_subjects (product_id, rejection_id)',
  'ALTER TABLE identity_messages ADD COLUMN user_id TEXT',
  'CREATE INDEX identity_messages_by_user ON identity_messages (product_id, user_id)',
  'ALTER TABLE products ADD COLUMN retention_events_days INTEGER',
  `CREATE TABLE background_leases (
     name TEXT PRIMARY KEY,
     holder TEXT,
     lease_until ${bigint} NOT NULL DEFAULT 0
   )`,
  `CREATE TABLE installation_secrets (
     name TEXT PRIMARY KEY,
     secret TEXT NOT NULL,
     created_at ${text} NOT NULL
   )`,
];

export const erasureMigrations: Migration[] = [
  {
    version: 700,
    name: 'erasure jobs, suppressions, indexed subjects of rejections, retention settings',
    statements: { sqlite: common('TEXT', 'INTEGER'), postgres: common('TEXT', 'BIGINT') },
  },
];
