// Catalogue, tracking plans and violations (governance.md §1–2), written once for both databases: the catalogue
// (governance/catalog.ts), plans (governance/plans.ts) and violations (governance/violations.ts). Of the
// database it needs only how first and last seen are widened.
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { GovernanceStore } from './governance-types.js';
import { addHourCounts } from './hour-counts.js';
import {
  catalogOverflow,
  catalogState,
  getCatalogEvent,
  listCatalogEvents,
  listCatalogProperties,
  writeCatalog,
  type Widen,
} from './governance/catalog.js';
import { planStore } from './governance/plans.js';
import type { GovernanceDb } from './governance/tables.js';
import { deleteViolationsOlderThan, insertViolations, listViolations } from './governance/violations.js';

export function governanceStore(kysely: Kysely<Database>, widen: Widen): GovernanceStore {
  const db = kysely as unknown as GovernanceDb;
  return {
    catalogState: (productId, scope, names) => catalogState(db, productId, scope, names),
    writeCatalog: (write) => writeCatalog(db, widen, write),
    listCatalogEvents: (productId, query) => listCatalogEvents(db, productId, query),
    getCatalogEvent: (productId, canonicalName) => getCatalogEvent(db, productId, canonicalName),
    listCatalogProperties: (productId, scope, canonicalName) =>
      listCatalogProperties(db, productId, scope, canonicalName),
    catalogOverflow: (productId) => catalogOverflow(db, productId),
    ...planStore(kysely),
    insertViolations: (rows) => insertViolations(db, rows),
    addUnrecordedViolations: (counts) => addHourCounts(db, 'plan_violation_hours', counts),
    listViolations: (productId, query) => listViolations(db, productId, query),
    deleteViolationsOlderThan: (at) => deleteViolationsOlderThan(db, at),
  };
}
