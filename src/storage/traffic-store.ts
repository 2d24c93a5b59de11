// Traffic sources, rows and sync runs, written once for both databases: what the sync writes
// (traffic/sync.ts) and the report (traffic/report.ts). Of the database it needs how averages are rounded
// and how a product's sync is locked.
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { StoreDialect } from './store-dialect.js';
import type { TrafficStore } from './types.js';
import { report } from './traffic/report.js';
import {
  countRows,
  finishRun,
  getSource,
  lastSucceededAt,
  listRuns,
  listSources,
  putSource,
  replaceSlices,
  startRun,
} from './traffic/sync.js';
import type { TrafficTables } from './traffic/tables.js';

export type { TrafficTables } from './traffic/tables.js';

export function trafficStore(
  database: Kysely<Database>,
  dialect: Pick<StoreDialect, 'round' | 'withSyncLock'>,
): TrafficStore {
  const db = database.withTables<TrafficTables>();
  return {
    putSource: (source) => putSource(db, source),
    getSource: (productId) => getSource(db, productId),
    listSources: () => listSources(db),
    replaceSlices: (productId, provider, rowsByDate) => replaceSlices(db, productId, provider, rowsByDate),
    countRows: (productId, from, to) => countRows(db, productId, from, to),
    report: (productId, query) => report(db, dialect.round, productId, query),
    startRun: (run) => startRun(db, run),
    finishRun: (productId, id, result) => finishRun(db, productId, id, result),
    listRuns: (productId, limit) => listRuns(db, productId, limit),
    lastSucceededAt: (productId, provider) => lastSucceededAt(db, productId, provider),
    withSyncLock: (productId, work) => dialect.withSyncLock(database, productId, work),
  };
}
