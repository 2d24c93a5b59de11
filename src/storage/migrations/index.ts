// Versioned migrations, one list per dialect. Each migration is a list of single statements run in
// one transaction. Never edit a released migration: add a new one with the next version number.
// Version ranges keep areas apart: 1–99 core, 100–199 identity, 200–299 traffic reports, 300–399 Segment,
// 400–499 events out (positions and reads), 500–549 destinations, 550–599 warehouses, 600–649 governance
// (catalogue, tracking plans), 650–699 transformations, 700–799 erasure and retention, 800–849 the write path,
// 850–899 the compact row (issue 35).
import type { Dialect } from '../types.js';
import { compactRowMigrations } from './compact-row.js';
import { coreMigrations } from './core.js';
import { destinationMigrations } from './destinations.js';
import { erasureMigrations } from './erasure.js';
import { eventJsonMigrations } from './event-json.js';
import { eventKeyMigrations } from './event-keys.js';
import { eventPositionMigrations } from './event-positions.js';
import { governanceMigrations } from './governance.js';
import { identityMigrations } from './identity.js';
import { segmentMigrations } from './segment.js';
import { trafficMigrations } from './traffic.js';
import { transformationMigrations } from './transformations.js';
import { warehouseMigrations } from './warehouses.js';

export interface Migration {
  version: number;
  name: string;
  statements: Record<Dialect, string[]>;
  /**
   * What the migration rewrites row by row on each dialect ("every stored event"), when that takes time in
   * proportion to the data: said in the log before it runs, so that an operator upgrading knows why the
   * server has not started listening yet.
   */
  rewrites?: Partial<Record<Dialect, string>>;
}

export const migrations: Migration[] = [
  ...coreMigrations,
  ...identityMigrations,
  ...trafficMigrations,
  ...segmentMigrations,
  ...eventPositionMigrations,
  ...eventKeyMigrations,
  ...eventJsonMigrations,
  ...destinationMigrations,
  ...warehouseMigrations,
  ...governanceMigrations,
  ...transformationMigrations,
  ...erasureMigrations,
  ...compactRowMigrations,
].sort((a, b) => a.version - b.version);
