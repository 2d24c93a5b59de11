// Identity storage (contract §6): one implementation over Kysely for both dialects.
//
// Every identify and alias is one transaction that locks before it reads, then decides with the pure
// rules of domain/identity.ts, then writes:
// - SQLite (sqlite/store-dialect.ts): `BEGIN IMMEDIATE` on the single connection. Kysely's connection mutex
//   already serialises this process; IMMEDIATE takes the write lock up front so another process (the CLI)
//   cannot make a read-then-write transaction fail half-way with SQLITE_BUSY.
// - PostgreSQL (postgres/store-dialect.ts): transaction-scoped advisory locks, in two phases, each in sorted order:
//   1. the (product, external id) pairs named by the request, and the identifiers it claims;
//   2. the users those external ids resolve to — a user can be reached through several external ids,
//      so two requests naming different ids of one user must still exclude each other.
//   Nobody takes a phase-1 lock while holding a phase-2 lock, so there is no deadlock. If a resolution
//   changed between reading it and locking its user (the user was merged away), the transaction is
//   retried, as it is on a unique violation, serialization failure or deadlock.
// Destinations (events-out §6, clarifications §26): an identify that changed the user writes a
// `user.identified` message, an alias that merged a `user.merged` message, to `identity_messages` in the
// same transaction. On PostgreSQL the transaction first takes ROW EXCLUSIVE on `events` (before any
// write gives it an xid), so the read horizon of event-reads.ts, which waits for transactions holding a
// lock on `events`, covers these messages too: a message can never commit behind a reader.
// The unique keys are the real guarantee: if the locking were wrong, a second holder of an
// identifier or a second user for one external id would fail on a constraint, not be stored.
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { IdentityStore } from './types.js';
import { alias } from './identity/alias.js';
import { identify, type IdentityDialect } from './identity/identify.js';
import { identifiedStatus, markIdentified } from './identity/identified.js';
import { holdersOf, readUser, type IdentityTables } from './identity/tables.js';

export type { IdentityTables } from './identity/tables.js';

export function identityStore(database: Kysely<Database>, dialect: IdentityDialect): IdentityStore {
  const db = database.withTables<IdentityTables>();
  return {
    markIdentified: (productId, externalId, now) => markIdentified(db, productId, externalId, now),
    identifiedStatus: (productId, externalIds) => identifiedStatus(db, productId, externalIds),
    identify: (productId, input, now) => identify(db, dialect, productId, input, now),
    alias: (productId, fromExternalId, toExternalId, now) =>
      alias(db, dialect, productId, fromExternalId, toExternalId, now),
    // One snapshot, so a merge committing in between cannot show half a user.
    getUser: (productId, externalId) => dialect.snapshot(db, (q) => readUser(q, productId, externalId)),
    async externalIdByIdentifier(productId, kind, value) {
      const holders = await holdersOf(db, productId, { [kind]: value });
      return holders.get(`${kind}\u0000${value}`);
    },
  };
}
