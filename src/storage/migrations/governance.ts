import type { Migration } from './index.js';

// Data governance (governance.md §1–2): the event catalogue, tracking plans and their violations.
// Versions 600–649.
//
// The catalogue holds names, paths and types with counts and times, never a value or an id, so it
// survives retention and erasure. Every counter row is merged with `count = count + excluded.count`,
// so several instances flushing the same name at once add up instead of overwriting each other.
export const governanceMigrations: Migration[] = [
  {
    version: 600,
    name: 'event catalogue: names, property paths with their JSON types, traits, overflow',
    statements: {
      sqlite: [
        `CREATE TABLE catalog_events (
           product_id TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           count INTEGER NOT NULL,
           first_seen TEXT NOT NULL,
           last_seen TEXT NOT NULL,
           properties_overflow INTEGER NOT NULL DEFAULT 0,
           PRIMARY KEY (product_id, canonical_name)
         ) WITHOUT ROWID`,
        `CREATE TABLE catalog_event_origins (
           product_id TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           kind TEXT NOT NULL CHECK (kind IN ('source', 'key')),
           value TEXT NOT NULL,
           PRIMARY KEY (product_id, canonical_name, kind, value)
         ) WITHOUT ROWID`,
        `CREATE TABLE catalog_properties (
           product_id TEXT NOT NULL,
           scope TEXT NOT NULL CHECK (scope IN ('event', 'trait')),
           canonical_name TEXT NOT NULL,
           path TEXT NOT NULL,
           json_type TEXT NOT NULL,
           count INTEGER NOT NULL,
           first_seen TEXT NOT NULL,
           last_seen TEXT NOT NULL,
           PRIMARY KEY (product_id, scope, canonical_name, path, json_type)
         ) WITHOUT ROWID`,
        `CREATE TABLE catalog_overflow (
           product_id TEXT NOT NULL,
           scope TEXT NOT NULL CHECK (scope IN ('event', 'trait')),
           count INTEGER NOT NULL,
           PRIMARY KEY (product_id, scope)
         ) WITHOUT ROWID`,
      ],
      postgres: [
        `CREATE TABLE catalog_events (
           product_id TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           count BIGINT NOT NULL,
           first_seen TIMESTAMPTZ NOT NULL,
           last_seen TIMESTAMPTZ NOT NULL,
           properties_overflow BIGINT NOT NULL DEFAULT 0,
           PRIMARY KEY (product_id, canonical_name)
         )`,
        `CREATE TABLE catalog_event_origins (
           product_id TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           kind TEXT NOT NULL CHECK (kind IN ('source', 'key')),
           value TEXT NOT NULL,
           PRIMARY KEY (product_id, canonical_name, kind, value)
         )`,
        `CREATE TABLE catalog_properties (
           product_id TEXT NOT NULL,
           scope TEXT NOT NULL CHECK (scope IN ('event', 'trait')),
           canonical_name TEXT NOT NULL,
           path TEXT NOT NULL,
           json_type TEXT NOT NULL,
           count BIGINT NOT NULL,
           first_seen TIMESTAMPTZ NOT NULL,
           last_seen TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, scope, canonical_name, path, json_type)
         )`,
        `CREATE TABLE catalog_overflow (
           product_id TEXT NOT NULL,
           scope TEXT NOT NULL CHECK (scope IN ('event', 'trait')),
           count BIGINT NOT NULL,
           PRIMARY KEY (product_id, scope)
         )`,
      ],
    },
  },
  {
    version: 601,
    name: 'tracking plans (every version kept) and their violations',
    statements: {
      sqlite: [
        `CREATE TABLE tracking_plans (
           product_id TEXT NOT NULL,
           version INTEGER NOT NULL,
           plan TEXT NOT NULL,
           created_at TEXT NOT NULL,
           PRIMARY KEY (product_id, version)
         ) WITHOUT ROWID`,
        `CREATE TABLE plan_violations (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL,
           received_at TEXT NOT NULL,
           key_id TEXT,
           route TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           code TEXT NOT NULL,
           severity TEXT NOT NULL CHECK (severity IN ('rejected', 'warning')),
           plan_version INTEGER NOT NULL,
           message_id TEXT,
           subject_id TEXT,
           errors TEXT NOT NULL,
           PRIMARY KEY (product_id, id)
         ) WITHOUT ROWID`,
        'CREATE INDEX plan_violations_by_time ON plan_violations (received_at)',
        'CREATE INDEX plan_violations_by_subject ON plan_violations (product_id, subject_id)',
        `CREATE TABLE plan_violation_hours (
           product_id TEXT NOT NULL,
           hour TEXT NOT NULL,
           unrecorded INTEGER NOT NULL,
           PRIMARY KEY (product_id, hour)
         )`,
      ],
      postgres: [
        `CREATE TABLE tracking_plans (
           product_id TEXT NOT NULL,
           version INTEGER NOT NULL,
           plan JSONB NOT NULL,
           created_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, version)
         )`,
        `CREATE TABLE plan_violations (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL,
           received_at TIMESTAMPTZ NOT NULL,
           key_id TEXT,
           route TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           code TEXT NOT NULL,
           severity TEXT NOT NULL CHECK (severity IN ('rejected', 'warning')),
           plan_version INTEGER NOT NULL,
           message_id TEXT,
           subject_id TEXT,
           errors JSONB NOT NULL,
           PRIMARY KEY (product_id, id)
         )`,
        'CREATE INDEX plan_violations_by_time ON plan_violations (received_at)',
        'CREATE INDEX plan_violations_by_subject ON plan_violations (product_id, subject_id)',
        `CREATE TABLE plan_violation_hours (
           product_id TEXT NOT NULL,
           hour TEXT NOT NULL,
           unrecorded INTEGER NOT NULL,
           PRIMARY KEY (product_id, hour)
         )`,
      ],
    },
  },
];
