// The identity log destinations follow (events-out §6, clarifications §26): an identify that changed the user
// writes `user.identified`, an alias that merged `user.merged`, in the same transaction.
import { uuidv7 } from '../../domain/ids.js';
import type { StoreDialect } from '../store-dialect.js';
import type { UserRecord } from '../types.js';
import type { IdentityDb } from './tables.js';

/** The id of an identity message: random, time-ordered, stable once written (re-deliveries reuse it). */
function identityMessageId(): string {
  return `idm_${uuidv7().replace(/-/g, '')}`;
}

/** Appends one identity message: its position is drawn by the database. */
export async function writeIdentityMessage(
  q: IdentityDb,
  log: Pick<StoreDialect, 'appendIdentityMessage'>,
  productId: string,
  type: 'user.identified' | 'user.merged',
  data: { user: UserRecord; fromExternalId?: string },
  now: string,
): Promise<void> {
  // user_id (migration 700): an erasure finds the person's messages by index (governance.md §3).
  await log.appendIdentityMessage(q, {
    product_id: productId,
    id: identityMessageId(),
    type,
    created_at: now,
    data: JSON.stringify(data),
    user_id: data.user.id,
  });
}
