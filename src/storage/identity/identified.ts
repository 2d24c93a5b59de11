// Whether a user was identified (clarifications §18): set by the first identify, read for Segment's calls.
import type { IdentityDb } from './tables.js';

/** Flags the user an external id resolves to as identified; the first time stays. */
export async function markIdentified(db: IdentityDb, productId: string, externalId: string, now: string) {
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
}

/** For each external id that is known: its user and whether that user was identified. */
export async function identifiedStatus(
  db: IdentityDb,
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
  for (const row of rows) status.set(row.external_id, { userId: row.user_id, identified: row.identified_at !== null });
  return status;
}
