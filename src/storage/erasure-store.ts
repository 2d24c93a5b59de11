// Erasure jobs, suppressions and retention (governance.md §3–4), written once for both databases: the jobs
// (erasure/jobs.ts), what a job deletes of the person (erasure/person.ts), suppressions
// (erasure/suppressions.ts) and retention (erasure/retention.ts). The backend gives how events are deleted
// and the space reclaimed (erasure/event-deletes.ts) and the few expressions and transactions that differ
// (store-dialect.ts).
//
// Deletions run in small transactions (a batch of events at a time), so ingest's group commits go on
// between them. On SQLite `secure_delete` is on for the connection (sqlite/backend.ts), so a deleted row's
// bytes are zeroed in the page instead of left in free space; `reclaim` then empties the WAL into the
// file (TRUNCATE checkpoint), whose older frames still held the rows. On PostgreSQL deleted rows stay on
// disk as dead tuples until VACUUM, which `reclaim` runs on the touched tables after a job.
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { StoreDialect } from './store-dialect.js';
import type { ErasureStore } from './types.js';
import type { EventDeletes } from './erasure/event-deletes.js';
import {
  claim,
  deleteTargets,
  getJob,
  installationSecret,
  keyFingerprint,
  listJobs,
  release,
  request,
  save,
  targets,
} from './erasure/jobs.js';
import { deleteEvents, deleteIdentity, deleteRecords, sweepErasedMessages } from './erasure/person.js';
import {
  deleteEventsBefore,
  dropEventMonth,
  monthsOf,
  oldestEvent,
  releaseLease,
  retentionProducts,
  setRetention,
  takeLease,
} from './erasure/retention.js';
import { allSuppressions, liftSuppression, listSuppressions, suppressionsMarker } from './erasure/suppressions.js';
import type { ErasureDb, ErasureTables } from './erasure/tables.js';

export type ErasureDialect = Pick<
  StoreDialect,
  | 'writeTransaction'
  | 'nowMs'
  | 'lockIdentityLog'
  | 'appendIdentityMessage'
  | 'jsonText'
  | 'timestamp'
  | 'eventTime'
  | 'eventProduct'
  | 'eventNamed'
  | 'identityPosition'
>;

export function erasureStore(database: Kysely<Database>, dialect: ErasureDialect, deletes: EventDeletes): ErasureStore {
  const db = database.withTables<ErasureTables>() as ErasureDb;
  return {
    installationSecret: (generate) => installationSecret(db, generate),
    keyFingerprint: (fingerprint) => keyFingerprint(db, dialect, fingerprint),
    request: (input) => request(db, dialect, input),
    get: (productId, id) => getJob(db, productId, id),
    list: (productId, query) => listJobs(db, productId, query),
    claim: (holder, leaseMs, only) => claim(db, dialect.nowMs, holder, leaseMs, only),
    save: (record, holder, leaseMs) => save(db, dialect.nowMs, record, holder, leaseMs),
    release: (productId, id, holder) => release(db, productId, id, holder),
    targets: (productId, erasureId) => targets(db, productId, erasureId),
    deleteEvents: (productId, externalIds, limit) => deleteEvents(deletes, dialect, productId, externalIds, limit),
    deleteIdentity: (productId, of) => deleteIdentity(db, dialect, productId, of),
    deleteRecords: (productId, externalIds, limit) => deleteRecords(db, dialect, productId, externalIds, limit),
    deleteTargets: (productId, erasureId) => deleteTargets(db, productId, erasureId),
    sweepErasedMessages: (productId, olderThan) => sweepErasedMessages(db, dialect, productId, olderThan),
    reclaim: (only) => deletes.reclaim(only),
    roomToWrite: () => deletes.roomToWrite(),
    suppressionsMarker: () => suppressionsMarker(db),
    allSuppressions: () => allSuppressions(db),
    listSuppressions: (productId, query) => listSuppressions(db, productId, query),
    liftSuppression: (productId, id) => liftSuppression(db, productId, id),
    retentionProducts: () => retentionProducts(db),
    setRetention: (productId, eventsDays) => setRetention(db, productId, eventsDays),
    deleteEventsBefore: (productId, cutoff, limit) => deleteEventsBefore(deletes, dialect, productId, cutoff, limit),
    eventMonthsEndingBy: async (end) => (deletes.months === undefined ? [] : deletes.months.endingBy(end)),
    productsInEventMonth: (name) => monthsOf(deletes).products(name),
    deleteEventMonthKeys: (name, productIds, after, limit) =>
      monthsOf(deletes).deleteKeys(name, productIds, after, limit),
    dropEventMonth: (month, now, lockTimeoutMs) => dropEventMonth(monthsOf(deletes), month, now, lockTimeoutMs),
    oldestEvent: (productId) => oldestEvent(db, dialect, productId),
    takeLease: (name, holder, leaseMs) => takeLease(db, dialect.nowMs, name, holder, leaseMs),
    releaseLease: (name, holder) => releaseLease(db, name, holder),
  };
}
