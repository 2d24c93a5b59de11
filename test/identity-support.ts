// Shared by the identity tests: open a real storage per dialect, and check the invariants of the
// identity tables straight from the database.
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import type { OpenedStorage } from '../src/storage/connect.js';
import type { IdentityTables } from '../src/storage/identity-store.js';
import { openReusableStorage } from './helpers.js';

export { dialect } from './helpers.js';

export interface TestStorage {
  storage: OpenedStorage;
  drop(): Promise<void>;
}

/** A storage on an empty database of the dialect under test (reusableDatabase) (INLET_TEST_DIALECT); PostgreSQL gets a pool of several connections so parallel calls really run in parallel. */
export async function openTestStorage(options: { poolSize?: number } = {}): Promise<TestStorage> {
  const { storage, close } = await openReusableStorage({ postgresPoolSize: options.poolSize ?? 12 });
  return { storage, drop: close };
}

export async function createProduct(
  storage: OpenedStorage,
  id = `prd_${randomBytes(6).toString('hex')}`,
): Promise<string> {
  await storage.products.create({ id, name: id, createdAt: new Date().toISOString() });
  return id;
}

/**
 * The identity graph of one product is consistent: every user's own external id maps to that user,
 * every mapping points at an existing user, no identifier (kind, value) has two holders and no user has
 * two values of one kind. Returns the mapping external id → user id for further checks.
 */
export async function assertIdentityInvariants(
  storage: OpenedStorage,
  productId: string,
): Promise<Map<string, string>> {
  const db = storage.db.withTables<IdentityTables>();
  const users = await db
    .selectFrom('users')
    .select(['id', 'external_id'])
    .where('product_id', '=', productId)
    .execute();
  const ids = await db
    .selectFrom('user_ids')
    .select(['external_id', 'user_id'])
    .where('product_id', '=', productId)
    .execute();
  const identifiers = await db
    .selectFrom('user_identifiers')
    .select(['kind', 'value', 'user_id'])
    .where('product_id', '=', productId)
    .execute();
  const userIds = new Set(users.map((u) => u.id));
  const mapping = new Map<string, string>();
  for (const row of ids) {
    assert.equal(mapping.has(row.external_id), false, `external id ${row.external_id} maps twice`);
    assert.ok(userIds.has(row.user_id), `external id ${row.external_id} maps to missing user ${row.user_id}`);
    mapping.set(row.external_id, row.user_id);
  }
  for (const user of users)
    assert.equal(mapping.get(user.external_id), user.id, `user ${user.id}'s own external id does not map to it`);
  const holders = new Set<string>();
  const kindsPerUser = new Set<string>();
  for (const row of identifiers) {
    assert.ok(userIds.has(row.user_id), `identifier held by missing user ${row.user_id}`);
    const identifier = `${row.kind}\u0000${row.value}`;
    assert.equal(holders.has(identifier), false, `identifier ${row.kind}=${row.value} held twice`);
    holders.add(identifier);
    const kindOfUser = `${row.user_id}\u0000${row.kind}`;
    assert.equal(kindsPerUser.has(kindOfUser), false, `user ${row.user_id} holds two values of ${row.kind}`);
    kindsPerUser.add(kindOfUser);
  }
  return mapping;
}

/** Fails with a readable message unless `outcome.status` is one of `statuses`; narrows the type. */
export function expectStatus<T extends { status: string }, S extends T['status']>(
  outcome: T,
  ...statuses: S[]
): asserts outcome is Extract<T, { status: S }> {
  assert.ok(
    (statuses as string[]).includes(outcome.status),
    `expected ${statuses.join(' or ')}, got ${JSON.stringify(outcome)}`,
  );
}
