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
];
