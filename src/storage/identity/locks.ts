// The advisory locks of identify and alias (identity-store.ts, the header), in two phases.
import { createHash } from 'node:crypto';
import { RetryTransaction, type Lock } from '../store-dialect.js';
import { resolve, type IdentityDb } from './tables.js';

class ResolutionChanged extends RetryTransaction {
  constructor() {
    super('an external id was merged into another user while the transaction waited for its lock');
  }
}

/** A signed 64-bit advisory lock key for a string. */
function lockKey(...parts: string[]): bigint {
  return createHash('sha256').update(parts.join('\u0000')).digest().readBigInt64BE(0);
}

export const externalIdLock = (productId: string, externalId: string) => lockKey('external_id', productId, externalId);
export const identifierLock = (productId: string, kind: string, value: string) =>
  lockKey('identifier', productId, kind, value);
const userLock = (productId: string, userId: string) => lockKey('user', productId, userId);

/**
 * Phase 2 of the locking: locks the users the external ids resolve to, then checks that the
 * resolutions still hold (else the transaction is retried).
 */
export async function lockResolvedUsers(
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
