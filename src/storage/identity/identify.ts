// identify (contract §6): creates or updates the user of an external id, its identifiers and traits.
import { applyIdentifiers, identifyConflicts, mergeTraits } from '../../domain/identity.js';
import type { StoreDialect } from '../store-dialect.js';
import type { IdentifyInput, IdentifyOutcome } from '../types.js';
import { externalIdLock, identifierLock, lockResolvedUsers } from './locks.js';
import { writeIdentityMessage } from './messages.js';
import { createUser, holdersOf, loadUser, toRecord, writeIdentifiers, type IdentityDb } from './tables.js';

export type IdentityDialect = Pick<StoreDialect, 'lockingTransaction' | 'snapshot' | 'appendIdentityMessage'>;

export function identify(
  db: IdentityDb,
  dialect: IdentityDialect,
  productId: string,
  input: IdentifyInput,
  now: string,
): Promise<IdentifyOutcome> {
  return dialect.lockingTransaction(db, async (q, lock) => {
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
}
