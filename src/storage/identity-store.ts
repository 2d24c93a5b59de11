// Identity storage (contract §6): one implementation over Kysely for both dialects.
//
// Every identify and alias is one transaction that locks before it reads, then decides with the pure
// rules of domain/identity.ts, then writes:
// - SQLite: `BEGIN IMMEDIATE` on the single connection. Kysely's connection mutex already serialises
//   this process; IMMEDIATE takes the write lock up front so another process (the CLI) cannot make a
//   read-then-write transaction fail half-way with SQLITE_BUSY.
// - PostgreSQL: transaction-scoped advisory locks, in two phases, each in sorted order:
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
import { createHash } from 'node:crypto';
import { sql, type ColumnType, type Kysely } from 'kysely';
import type { Database } from './database.js';
import { toIso } from './database.js';
import {
  applyIdentifiers,
  decideMerge,
  identifierOf,
  identifyConflicts,
  mergeTraits,
  type IdentifierPatch,
  type Identifiers,
  type IdentityState,
  type Traits,
} from '../domain/identity.js';
import { prefixedId, uuidv7 } from '../domain/ids.js';
import type {
  AliasOutcome,
  Dialect,
  IdentifyInput,
  IdentifyOutcome,
  IdentityStore,
  ResolvedUser,
  UserMergeRecord,
  UserRecord,
} from './types.js';

type Timestamp = ColumnType<Date | string, string, string>;

/** The identity tables, added to the shared Database type here so this area owns its own schema. */
export type IdentityTables = {
  users: {
    product_id: string;
    id: string;
    external_id: string;
    traits: string;
    created_at: Timestamp;
    updated_at: Timestamp;
    identified_at: Timestamp | null;
  };
  user_ids: { product_id: string; external_id: string; user_id: string };
  user_identifiers: { product_id: string; kind: string; value: string; user_id: string };
  /** Migration 500 (destinations.ts): the log destinations follow; position columns are the dialect's own. */
  identity_messages: {
    product_id: string;
    id: string;
    type: string;
    created_at: string;
    data: string;
    after_event?: number;
    user_id?: string | null;
  };
  user_merges: {
    product_id: string;
    id: string;
    from_external_id: string;
    from_user_id: string | null;
    into_user_id: string;
    into_external_id: string;
    merged_at: Timestamp;
  };
};

type IdentityDb = Kysely<Database & IdentityTables>;

/** How often a PostgreSQL transaction is tried before its error is given to the caller. */
const MAX_ATTEMPTS = 8;
const RETRYABLE_PG_CODES = new Set(['23505', '40001', '40P01']);

class ResolutionChanged extends Error {
  constructor() {
    super('an external id was merged into another user while the transaction waited for its lock');
  }
}

function isRetryable(error: unknown): boolean {
  if (error instanceof ResolutionChanged) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE_PG_CODES.has(code);
}

/** A signed 64-bit advisory lock key for a string. */
function lockKey(...parts: string[]): bigint {
  return createHash('sha256').update(parts.join('\u0000')).digest().readBigInt64BE(0);
}

type Lock = (keys: bigint[]) => Promise<void>;

async function runLocked<R>(
  db: IdentityDb,
  dialect: Dialect,
  work: (q: IdentityDb, lock: Lock) => Promise<R>,
): Promise<R> {
  if (dialect === 'sqlite') {
    return db.connection().execute(async (conn) => {
      await sql`BEGIN IMMEDIATE`.execute(conn);
      try {
        const result = await work(conn, async () => {});
        await sql`COMMIT`.execute(conn);
        return result;
      } catch (error) {
        await sql`ROLLBACK`.execute(conn).catch(() => {});
        throw error;
      }
    });
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().execute(async (trx) => {
        await sql`LOCK TABLE ONLY events IN ROW EXCLUSIVE MODE`.execute(trx);
        return work(trx, async (keys) => {
          for (const key of [...new Set(keys)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) {
            await sql`SELECT pg_advisory_xact_lock(${key.toString()}::bigint)`.execute(trx);
          }
        });
      });
    } catch (error) {
      if (attempt >= MAX_ATTEMPTS || !isRetryable(error)) throw error;
      // Jittered backoff so retrying transactions do not collide again in lockstep.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}

interface LoadedUser {
  id: string;
  externalId: string;
  identifiers: Identifiers;
  traits: Traits;
  traitsJson: string;
  aliases: string[];
  createdAt: string;
  updatedAt: string;
}

function toRecord(user: LoadedUser): UserRecord {
  return {
    id: user.id,
    externalId: user.externalId,
    identifiers: user.identifiers,
    traits: user.traits,
    aliases: user.aliases,
    createdAt: user.createdAt,
    updatedAt: user.updatedAt,
  };
}

async function resolve(q: IdentityDb, productId: string, externalIds: string[]): Promise<Map<string, string>> {
  const rows = await q
    .selectFrom('user_ids')
    .select(['external_id', 'user_id'])
    .where('product_id', '=', productId)
    .where('external_id', 'in', externalIds)
    .execute();
  return new Map(rows.map((row) => [row.external_id, row.user_id]));
}

async function loadUser(q: IdentityDb, productId: string, userId: string): Promise<LoadedUser> {
  const row = await q
    .selectFrom('users')
    .selectAll()
    .where('product_id', '=', productId)
    .where('id', '=', userId)
    .executeTakeFirstOrThrow();
  const identifierRows = await q
    .selectFrom('user_identifiers')
    .select(['kind', 'value'])
    .where('product_id', '=', productId)
    .where('user_id', '=', userId)
    .orderBy('kind')
    .execute();
  const idRows = await q
    .selectFrom('user_ids')
    .select('external_id')
    .where('product_id', '=', productId)
    .where('user_id', '=', userId)
    .orderBy('external_id')
    .execute();
  return {
    id: row.id,
    externalId: row.external_id,
    identifiers: Object.fromEntries(identifierRows.map((r) => [r.kind, r.value])),
    traits: JSON.parse(row.traits) as Traits,
    traitsJson: row.traits,
    aliases: idRows.map((r) => r.external_id).filter((id) => id !== row.external_id),
    createdAt: toIso(row.created_at),
    updatedAt: toIso(row.updated_at),
  };
}

/** The external id of the user holding each requested (kind, value), keyed `kind\0value`. */
async function holdersOf(q: IdentityDb, productId: string, patch: IdentifierPatch): Promise<Map<string, string>> {
  const claimed = Object.entries(patch).filter((entry): entry is [string, string] => entry[1] !== null);
  if (claimed.length === 0) return new Map();
  const rows = await q
    .selectFrom('user_identifiers')
    .innerJoin('users', (join) =>
      join
        .onRef('users.product_id', '=', 'user_identifiers.product_id')
        .onRef('users.id', '=', 'user_identifiers.user_id'),
    )
    .select(['user_identifiers.kind', 'user_identifiers.value', 'users.external_id'])
    .where('user_identifiers.product_id', '=', productId)
    .where((eb) =>
      eb.or(
        claimed.map(([kind, value]) =>
          eb.and([eb('user_identifiers.kind', '=', kind), eb('user_identifiers.value', '=', value)]),
        ),
      ),
    )
    .execute();
  return new Map(rows.map((row) => [`${row.kind}\u0000${row.value}`, row.external_id]));
}

async function createUser(
  q: IdentityDb,
  productId: string,
  externalId: string,
  traits: Traits,
  now: string,
): Promise<string> {
  const id = prefixedId('usr');
  await q
    .insertInto('users')
    .values({
      product_id: productId,
      id,
      external_id: externalId,
      traits: JSON.stringify(traits),
      created_at: now,
      updated_at: now,
    })
    .execute();
  await q.insertInto('user_ids').values({ product_id: productId, external_id: externalId, user_id: id }).execute();
  return id;
}

/** Writes the difference between the stored identifiers and the wanted ones; returns whether anything changed. */
async function writeIdentifiers(
  q: IdentityDb,
  productId: string,
  userId: string,
  stored: Identifiers,
  wanted: Identifiers,
): Promise<boolean> {
  let changed = false;
  for (const kind of Object.keys(stored)) {
    if (identifierOf(wanted, kind) === undefined) {
      await q
        .deleteFrom('user_identifiers')
        .where('product_id', '=', productId)
        .where('user_id', '=', userId)
        .where('kind', '=', kind)
        .execute();
      changed = true;
    }
  }
  for (const [kind, value] of Object.entries(wanted)) {
    const current = identifierOf(stored, kind);
    if (current === value) continue;
    if (current === undefined) {
      await q.insertInto('user_identifiers').values({ product_id: productId, kind, value, user_id: userId }).execute();
    } else {
      await q
        .updateTable('user_identifiers')
        .set({ value })
        .where('product_id', '=', productId)
        .where('user_id', '=', userId)
        .where('kind', '=', kind)
        .execute();
    }
    changed = true;
  }
  return changed;
}

/** The id of an identity message: random, time-ordered, stable once written (re-deliveries reuse it). */
function identityMessageId(): string {
  return `idm_${uuidv7().replace(/-/g, '')}`;
}

/** Appends one identity message (see the header): its position is drawn by the database. */
async function writeIdentityMessage(
  q: IdentityDb,
  dialect: Dialect,
  productId: string,
  type: 'user.identified' | 'user.merged',
  data: { user: UserRecord; fromExternalId?: string },
  now: string,
): Promise<void> {
  // user_id (migration 700): an erasure finds the person's messages by index (governance.md §3).
  const row = {
    product_id: productId,
    id: identityMessageId(),
    type,
    created_at: now,
    data: JSON.stringify(data),
    user_id: data.user.id,
  };
  if (dialect === 'sqlite') {
    await sql`INSERT INTO identity_messages (after_event, product_id, id, type, created_at, data, user_id)
              VALUES (COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), ${row.product_id}, ${row.id}, ${row.type}, ${row.created_at}, ${row.data}, ${row.user_id})`.execute(
      q,
    );
    return;
  }
  await q.insertInto('identity_messages').values(row).execute();
}

const externalIdLock = (productId: string, externalId: string) => lockKey('external_id', productId, externalId);
const identifierLock = (productId: string, kind: string, value: string) =>
  lockKey('identifier', productId, kind, value);
const userLock = (productId: string, userId: string) => lockKey('user', productId, userId);

/**
 * Phase 2 of the locking: locks the users the external ids resolve to, then checks that the
 * resolutions still hold (else the transaction is retried).
 */
async function lockResolvedUsers(
  q: IdentityDb,
  lock: Lock,
  productId: string,
  externalIds: string[],
): Promise<Map<string, string>> {
  const resolved = await resolve(q, productId, externalIds);
  if (resolved.size === 0) return resolved;
  await lock([...new Set(resolved.values())].map((userId) => userLock(productId, userId)));
  const again = await resolve(q, productId, externalIds);
  for (const externalId of externalIds) {
    if (resolved.get(externalId) !== again.get(externalId)) throw new ResolutionChanged();
  }
  return again;
}

export function identityStore(database: Kysely<Database>, dialect: Dialect): IdentityStore {
  const db = database.withTables<IdentityTables>();

  return {
    async markIdentified(productId: string, externalId: string, now: string): Promise<void> {
      const owner = await db
        .selectFrom('user_ids')
        .select('user_id')
        .where('product_id', '=', productId)
        .where('external_id', '=', externalId)
        .executeTakeFirst();
      if (owner === undefined) return;
      await db
        .updateTable('users')
        .set({ identified_at: now })
        .where('product_id', '=', productId)
        .where('id', '=', owner.user_id)
        .where('identified_at', 'is', null)
        .execute();
    },

    async identifiedStatus(
      productId: string,
      externalIds: string[],
    ): Promise<Map<string, { userId: string; identified: boolean }>> {
      const status = new Map<string, { userId: string; identified: boolean }>();
      if (externalIds.length === 0) return status;
      const rows = await db
        .selectFrom('user_ids')
        .innerJoin('users', (join) =>
          join.onRef('users.product_id', '=', 'user_ids.product_id').onRef('users.id', '=', 'user_ids.user_id'),
        )
        .select(['user_ids.external_id as external_id', 'users.id as user_id', 'users.identified_at as identified_at'])
        .where('user_ids.product_id', '=', productId)
        .where('user_ids.external_id', 'in', [...new Set(externalIds)])
        .execute();
      for (const row of rows)
        status.set(row.external_id, { userId: row.user_id, identified: row.identified_at !== null });
      return status;
    },

    identify(productId: string, input: IdentifyInput, now: string): Promise<IdentifyOutcome> {
      return runLocked(db, dialect, async (q, lock) => {
        await lock([
          externalIdLock(productId, input.externalId),
          ...Object.entries(input.identifiers)
            .filter((entry): entry is [string, string] => entry[1] !== null)
            .map(([kind, value]) => identifierLock(productId, kind, value)),
        ]);
        const userId = (await lockResolvedUsers(q, lock, productId, [input.externalId])).get(input.externalId);
        const current = userId === undefined ? undefined : await loadUser(q, productId, userId);

        const holders = await holdersOf(q, productId, input.identifiers);
        const conflicts = identifyConflicts(
          input.identifiers,
          (kind, value) => holders.get(`${kind}\u0000${value}`),
          current?.externalId,
        );
        if (conflicts.length > 0) return { status: 'identifier_conflict', conflicts };

        const identifiers = applyIdentifiers(current?.identifiers ?? {}, input.identifiers);
        const traits = mergeTraits(current?.traits ?? {}, input.traits);
        if (current === undefined) {
          const id = await createUser(q, productId, input.externalId, traits, now);
          await writeIdentifiers(q, productId, id, {}, identifiers);
          const user = toRecord(await loadUser(q, productId, id));
          await writeIdentityMessage(q, dialect, productId, 'user.identified', { user }, now);
          return { status: 'created', user };
        }
        const identifiersChanged = await writeIdentifiers(q, productId, current.id, current.identifiers, identifiers);
        const traitsJson = JSON.stringify(traits);
        // updated_at moves only when something changed, so it tells when the profile last changed.
        const changed = identifiersChanged || traitsJson !== current.traitsJson;
        if (changed) {
          await q
            .updateTable('users')
            .set({ traits: traitsJson, updated_at: now })
            .where('product_id', '=', productId)
            .where('id', '=', current.id)
            .execute();
        }
        const user = toRecord(await loadUser(q, productId, current.id));
        if (changed) await writeIdentityMessage(q, dialect, productId, 'user.identified', { user }, now);
        return { status: 'updated', user };
      });
    },

    alias(productId: string, fromExternalId: string, toExternalId: string, now: string): Promise<AliasOutcome> {
      return runLocked(db, dialect, async (q, lock) => {
        await lock([externalIdLock(productId, fromExternalId), externalIdLock(productId, toExternalId)]);
        const resolved = await lockResolvedUsers(q, lock, productId, [fromExternalId, toExternalId]);
        const fromUserId = resolved.get(fromExternalId);
        const toUserId = resolved.get(toExternalId);

        if (fromUserId !== undefined && fromUserId === toUserId) {
          return { status: 'unchanged', user: toRecord(await loadUser(q, productId, toUserId)) };
        }
        const from = fromUserId === undefined ? undefined : await loadUser(q, productId, fromUserId);
        if (from !== undefined && from.externalId !== fromExternalId) {
          // `from` is an alias of another user already: moving it alone would split that identity.
          return { status: 'alias_conflict', mergedInto: from.externalId };
        }
        const into = toUserId === undefined ? undefined : await loadUser(q, productId, toUserId);
        const intoState: IdentityState = into ?? { externalId: toExternalId, identifiers: {}, traits: {} };

        let traits = intoState.traits;
        if (from !== undefined) {
          const decision = decideMerge(from, intoState);
          if (decision.status === 'identifier_conflict') return decision;
          traits = decision.traits;
        }

        const intoId = into?.id ?? (await createUser(q, productId, toExternalId, {}, now));
        if (from === undefined) {
          await q
            .insertInto('user_ids')
            .values({ product_id: productId, external_id: fromExternalId, user_id: intoId })
            .execute();
        } else {
          // F's identifiers, external id and aliases move to T; F's row goes. No identifier can clash:
          // decideMerge refused a kind with two values, and one value has one holder.
          await q
            .updateTable('user_identifiers')
            .set({ user_id: intoId })
            .where('product_id', '=', productId)
            .where('user_id', '=', from.id)
            .execute();
          await q
            .updateTable('user_ids')
            .set({ user_id: intoId })
            .where('product_id', '=', productId)
            .where('user_id', '=', from.id)
            .execute();
          await q.deleteFrom('users').where('product_id', '=', productId).where('id', '=', from.id).execute();
        }
        await q
          .updateTable('users')
          .set({ traits: JSON.stringify(traits), updated_at: now })
          .where('product_id', '=', productId)
          .where('id', '=', intoId)
          .execute();
        await q
          .insertInto('user_merges')
          .values({
            product_id: productId,
            id: prefixedId('mrg'),
            from_external_id: fromExternalId,
            from_user_id: from?.id ?? null,
            into_user_id: intoId,
            into_external_id: intoState.externalId,
            merged_at: now,
          })
          .execute();
        const user = toRecord(await loadUser(q, productId, intoId));
        await writeIdentityMessage(q, dialect, productId, 'user.merged', { fromExternalId, user }, now);
        return { status: 'merged', user };
      });
    },

    getUser(productId: string, externalId: string): Promise<ResolvedUser | undefined> {
      // One snapshot, so a merge committing in between cannot show half a user.
      const transaction =
        dialect === 'postgres' ? db.transaction().setIsolationLevel('repeatable read') : db.transaction();
      return transaction.execute((q) => readUser(q, productId, externalId));
    },

    async externalIdByIdentifier(productId: string, kind: string, value: string): Promise<string | undefined> {
      const holders = await holdersOf(db, productId, { [kind]: value });
      return holders.get(`${kind}\u0000${value}`);
    },
  };
}

async function readUser(db: IdentityDb, productId: string, externalId: string): Promise<ResolvedUser | undefined> {
  const userId = (await resolve(db, productId, [externalId])).get(externalId);
  if (userId === undefined) return undefined;
  const user = await loadUser(db, productId, userId);
  const merges: UserMergeRecord[] =
    user.aliases.length === 0
      ? []
      : (
          await db
            .selectFrom('user_merges')
            .selectAll()
            .where('product_id', '=', productId)
            .where('from_external_id', 'in', user.aliases)
            .orderBy('merged_at')
            .orderBy('id')
            .execute()
        ).map((row) => ({
          fromExternalId: row.from_external_id,
          fromUserId: row.from_user_id,
          intoUserId: row.into_user_id,
          intoExternalId: row.into_external_id,
          mergedAt: toIso(row.merged_at),
        }));
  return { user: toRecord(user), merges };
}
