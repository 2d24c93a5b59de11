// Erasure requests and their records (governance.md §3): the request suppresses every id linked to the
// person and queues the job; the audit (jobs, suppressions) is found by the HMAC of an id, never by the id.
//
// The request answers 202 only R (INLET_SUPPRESSION_REFRESH_MS) after its suppressions committed: by then
// every instance's copy was loaded after that commit (suppression.ts), so from the answer on no instance
// stores an item of those ids. Items an instance accepted in between are deleted by the job, which starts
// after that window and also looks once more at the end (jobs.ts).
import { AppError, validationError } from '../../domain/errors.js';
import { checkExternalId } from '../../domain/identity.js';
import { uuidv7 } from '../../domain/ids.js';
import type { ErasureRecord, ErasureStore, SuppressionRecord } from '../../storage/types.js';
import { sleep } from './jobs.js';
import { hmacWith, type ErasureKey } from './key.js';
import type { Suppressions } from './suppression.js';

export interface ErasureRequestOptions {
  store: ErasureStore;
  key: ErasureKey;
  suppressions: Suppressions;
  refreshMs: number;
  /** A job was queued (the runner looks at once). */
  queued(): void;
}

type ListQuery = { beforeId?: string | undefined; limit: number; externalId?: string | undefined };

const newId = (prefix: string) => `${prefix}_${uuidv7().replace(/-/g, '')}`;

export function createErasureRequests(options: ErasureRequestOptions) {
  const { store, key } = options;
  const idHmacOf = async (productId: string, externalId: string | undefined) =>
    externalId === undefined ? undefined : hmacWith(await key.load(), productId, externalId);
  return {
    request: (productId: string, externalId: string, reason: string | null) =>
      request(options, productId, externalId, reason),

    async get(productId: string, id: string): Promise<ErasureRecord> {
      const record = await store.get(productId, id);
      if (record === undefined) throw new AppError('not_found', `No erasure "${id}" in product "${productId}".`);
      return record;
    },

    /** Newest first; `externalId` narrows to the jobs of that id (found by its HMAC). */
    async list(productId: string, query: ListQuery): Promise<ErasureRecord[]> {
      const idHmac = await idHmacOf(productId, query.externalId);
      return store.list(productId, { beforeId: query.beforeId, limit: query.limit, idHmac });
    },

    async suppressions(productId: string, query: ListQuery): Promise<SuppressionRecord[]> {
      const idHmac = await idHmacOf(productId, query.externalId);
      return store.listSuppressions(productId, { beforeId: query.beforeId, limit: query.limit, idHmac });
    },

    async lift(productId: string, id: string): Promise<void> {
      if (!(await store.liftSuppression(productId, id)))
        throw new AppError('not_found', `No suppression "${id}" in product "${productId}".`);
      options.suppressions.lifted(productId);
    },
  };
}

/**
 * Suppresses every id linked to the person and queues the job; answers once every instance refuses
 * those ids (R after the commit, see the header). An id that resolves to nobody is suppressed too.
 */
async function request(
  options: ErasureRequestOptions,
  productId: string,
  externalId: string,
  reason: string | null,
): Promise<ErasureRecord> {
  const invalid = checkExternalId(externalId, '/external_id');
  if (invalid !== undefined) throw validationError([invalid]);
  if (reason !== null && reason.length > 500)
    throw validationError([{ pointer: '/reason', message: 'at most 500 characters' }]);
  const key = await options.key.load();
  const { record, externalIds } = await options.store.request({
    productId,
    erasureId: newId('era'),
    externalId,
    reason,
    requestedAt: new Date().toISOString(),
    hmac: (id) => hmacWith(key, productId, id),
    newSuppressionId: () => newId('sup'),
    messageId: newId('idm'),
  });
  // This instance refuses at once; the others once their copies are younger than the commit.
  options.suppressions.add(
    productId,
    externalIds.map((id) => hmacWith(key, productId, id)),
  );
  await sleep(options.refreshMs);
  options.queued();
  return record;
}
