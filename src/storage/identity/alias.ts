// alias (contract §6): merges the user of one external id into the user of another.
import { decideMerge, type IdentityState } from '../../domain/identity.js';
import { prefixedId } from '../../domain/ids.js';
import type { AliasOutcome } from '../types.js';
import type { IdentityDialect } from './identify.js';
import { externalIdLock, lockResolvedUsers } from './locks.js';
import { writeIdentityMessage } from './messages.js';
import { createUser, loadUser, toRecord, type IdentityDb, type LoadedUser } from './tables.js';

/** F's identifiers, external id and aliases move to T; F's row goes. No identifier can clash: decideMerge refused
 *  a kind with two values, and one value has one holder. */
async function moveUser(q: IdentityDb, productId: string, from: LoadedUser, intoId: string): Promise<void> {
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

export function alias(
  db: IdentityDb,
  dialect: IdentityDialect,
  productId: string,
  fromExternalId: string,
  toExternalId: string,
  now: string,
): Promise<AliasOutcome> {
  return dialect.lockingTransaction(db, async (q, lock) => {
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
      await moveUser(q, productId, from, intoId);
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
}
