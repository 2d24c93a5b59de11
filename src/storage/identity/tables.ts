// The identity tables as Kysely sees them, and the reads and writes of one user that identify, alias and the
// reads share. Every function runs on the transaction (or database) it is given.
import type { ColumnType, Kysely } from 'kysely';
import { toIso, type Database } from '../database.js';
import { identifierOf, type IdentifierPatch, type Identifiers, type Traits } from '../../domain/identity.js';
import { prefixedId } from '../../domain/ids.js';
import type { UserMergeRecord, UserRecord } from '../types.js';

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

export type IdentityDb = Kysely<Database & IdentityTables>;

export interface LoadedUser {
  id: string;
  externalId: string;
  identifiers: Identifiers;
  traits: Traits;
  traitsJson: string;
  aliases: string[];
  createdAt: string;
  updatedAt: string;
}

export function toRecord(user: LoadedUser): UserRecord {
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

/** The user each of the external ids resolves to (those that resolve). */
export async function resolve(q: IdentityDb, productId: string, externalIds: string[]): Promise<Map<string, string>> {
  const rows = await q
    .selectFrom('user_ids')
    .select(['external_id', 'user_id'])
    .where('product_id', '=', productId)
    .where('external_id', 'in', externalIds)
    .execute();
  return new Map(rows.map((row) => [row.external_id, row.user_id]));
}

export async function loadUser(q: IdentityDb, productId: string, userId: string): Promise<LoadedUser> {
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

/** The user an external id resolves to, with the merges into it, oldest first. */
export async function readUser(
  db: IdentityDb,
  productId: string,
  externalId: string,
): Promise<{ user: UserRecord; merges: UserMergeRecord[] } | undefined> {
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

/** The external id of the user holding each requested (kind, value), keyed `kind\0value`. */
export async function holdersOf(
  q: IdentityDb,
  productId: string,
  patch: IdentifierPatch,
): Promise<Map<string, string>> {
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

export async function createUser(
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
export async function writeIdentifiers(
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
