import type { Migration } from './index.js';

// Transformations (transformations.md §3): every version of a product's steps is kept (the newest is in
// force), and each product's secret for `mask` `hash`; a destination's own steps (§1), on its row. Versions 650–699.
export const transformationMigrations: Migration[] = [
  {
    version: 650,
    name: 'transformation versions and secrets',
    statements: {
      sqlite: [
        `CREATE TABLE transformations (
           product_id TEXT NOT NULL,
           version INTEGER NOT NULL,
           steps TEXT NOT NULL,
           created_at TEXT NOT NULL,
           PRIMARY KEY (product_id, version)
         ) WITHOUT ROWID`,
        `CREATE TABLE transformation_secrets (
           product_id TEXT NOT NULL PRIMARY KEY,
           secret TEXT NOT NULL
         ) WITHOUT ROWID`,
      ],
      postgres: [
        `CREATE TABLE transformations (
           product_id TEXT NOT NULL,
           version INTEGER NOT NULL,
           steps JSONB NOT NULL,
           created_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, version)
         )`,
        `CREATE TABLE transformation_secrets (
           product_id TEXT NOT NULL PRIMARY KEY,
           secret TEXT NOT NULL
         )`,
      ],
    },
  },
  {
    version: 651,
    name: 'destination transformations',
    statements: {
      sqlite: [`ALTER TABLE destinations ADD COLUMN transformation TEXT`],
      postgres: [`ALTER TABLE destinations ADD COLUMN transformation TEXT`],
    },
  },
];
