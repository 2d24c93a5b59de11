import type { Migration } from './index.js';

// Traffic reports (contract §8). Every key starts with product_id. Dimension columns use the "C"
// collation on PostgreSQL so that sorting and the keyset cursor compare bytes, like SQLite's BINARY.
export const trafficMigrations: Migration[] = [
  {
    version: 200,
    name: 'traffic sources, traffic rows, sync runs',
    statements: {
      sqlite: [
        `CREATE TABLE traffic_sources (
           product_id TEXT PRIMARY KEY REFERENCES products(id),
           provider TEXT NOT NULL CHECK (provider IN ('plausible', 'ga4')),
           config TEXT NOT NULL,
           secret TEXT NOT NULL,
           created_at TEXT NOT NULL,
           updated_at TEXT NOT NULL
         )`,
        // The primary key starts with (product_id, date): it is the index that reports and slice
        // replacement use, so no separate (product_id, date) index is needed.
        `CREATE TABLE traffic_rows (
           product_id TEXT NOT NULL REFERENCES products(id),
           date TEXT NOT NULL,
           source TEXT NOT NULL,
           medium TEXT NOT NULL,
           campaign TEXT NOT NULL,
           landing_page TEXT NOT NULL,
           provider TEXT NOT NULL,
           sessions INTEGER,
           users INTEGER,
           new_users INTEGER,
           pageviews INTEGER,
           engaged_sessions INTEGER,
           bounce_rate REAL,
           avg_session_duration REAL,
           conversions INTEGER,
           PRIMARY KEY (product_id, date, source, medium, campaign, landing_page)
         ) WITHOUT ROWID`,
        `CREATE TABLE sync_runs (
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           provider TEXT NOT NULL,
           kind TEXT NOT NULL,
           started_at TEXT NOT NULL,
           finished_at TEXT,
           range_from TEXT NOT NULL,
           range_to TEXT NOT NULL,
           row_count INTEGER,
           outcome TEXT NOT NULL,
           error TEXT,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX sync_runs_by_start ON sync_runs (product_id, started_at)`,
      ],
      postgres: [
        `CREATE TABLE traffic_sources (
           product_id TEXT PRIMARY KEY REFERENCES products(id),
           provider TEXT NOT NULL CHECK (provider IN ('plausible', 'ga4')),
           config JSONB NOT NULL,
           secret JSONB NOT NULL,
           created_at TIMESTAMPTZ NOT NULL,
           updated_at TIMESTAMPTZ NOT NULL
         )`,
        `CREATE TABLE traffic_rows (
           product_id TEXT NOT NULL REFERENCES products(id),
           date DATE NOT NULL,
           source TEXT COLLATE "C" NOT NULL,
           medium TEXT COLLATE "C" NOT NULL,
           campaign TEXT COLLATE "C" NOT NULL,
           landing_page TEXT COLLATE "C" NOT NULL,
           provider TEXT NOT NULL,
           sessions BIGINT,
           users BIGINT,
           new_users BIGINT,
           pageviews BIGINT,
           engaged_sessions BIGINT,
           bounce_rate DOUBLE PRECISION,
           avg_session_duration DOUBLE PRECISION,
           conversions BIGINT,
           PRIMARY KEY (product_id, date, source, medium, campaign, landing_page)
         )`,
        `CREATE TABLE sync_runs (
           product_id TEXT NOT NULL,
           id TEXT NOT NULL,
           provider TEXT NOT NULL,
           kind TEXT NOT NULL,
           started_at TIMESTAMPTZ NOT NULL,
           finished_at TIMESTAMPTZ,
           range_from DATE NOT NULL,
           range_to DATE NOT NULL,
           row_count BIGINT,
           outcome TEXT NOT NULL,
           error TEXT,
           PRIMARY KEY (product_id, id)
         )`,
        `CREATE INDEX sync_runs_by_start ON sync_runs (product_id, started_at)`,
      ],
    },
  },
];
