// Products, API keys and authentication of API requests.
import { AppError, validationError } from '../domain/errors.js';
import {
  bearerToken,
  constantTimeEqual,
  generateKey,
  hashKey,
  looksLikeKey,
  validateAllowedOrigins,
  type KeyKind,
} from '../domain/api-keys.js';
import { prefixedId } from '../domain/ids.js';
import type { ApiKeyRecord, ProductRecord, Storage } from '../storage/types.js';

export interface AuthContext {
  productId: string;
  keyId: string;
  kind: KeyKind;
  /** Browser keys: the origins whose pages may use the key. */
  allowedOrigins?: readonly string[];
}

export interface CreatedKey {
  record: ApiKeyRecord;
  /** The full secret: shown once, never stored. */
  key: string;
}

/** `last_used_at` is written at most once a minute per key, off the request path. */
const LAST_USED_RESOLUTION_MS = 60_000;

export interface KeyServiceOptions {
  cacheTtlMs: number;
  /** The clock for expiry, the cache TTL and `last_used_at` (default `Date.now`; tests move it instead of sleeping). */
  now?: () => number;
}

export function createKeyService(storage: Storage, options: KeyServiceOptions) {
  const clock = options.now ?? Date.now;
  const cache = new Map<string, { record: ApiKeyRecord | undefined; cachedAt: number }>();
  const lastUsedWritten = new Map<string, number>();
  const pendingUsage = new Map<string, string>();
  let usageFlush: Promise<void> | undefined;

  async function lookup(hash: string): Promise<ApiKeyRecord | undefined> {
    const now = clock();
    const hit = cache.get(hash);
    if (hit !== undefined && now - hit.cachedAt < options.cacheTtlMs) return hit.record;
    const record = await storage.apiKeys.findByHash(hash);
    if (options.cacheTtlMs > 0) {
      if (cache.size > 10_000) cache.clear();
      cache.set(hash, { record, cachedAt: now });
    }
    return record;
  }

  function noteUsage(keyId: string, now: number): void {
    const last = lastUsedWritten.get(keyId) ?? 0;
    if (now - last < LAST_USED_RESOLUTION_MS) return;
    lastUsedWritten.set(keyId, now);
    pendingUsage.set(keyId, new Date(now).toISOString());
    usageFlush ??= Promise.resolve().then(flushUsage);
  }

  async function flushUsage(): Promise<void> {
    const usages = [...pendingUsage].map(([id, at]) => ({ id, at }));
    pendingUsage.clear();
    usageFlush = undefined;
    try {
      await storage.apiKeys.touch(usages);
    } catch {
      // Bookkeeping only: a failed write is retried with the next use.
      for (const { id } of usages) lastUsedWritten.delete(id);
    }
  }

  async function requireProduct(productId: string): Promise<ProductRecord> {
    const product = await storage.products.get(productId);
    if (product === undefined) throw new AppError('not_found', `No product with id "${productId}".`);
    return product;
  }

  return {
    async createProduct(name: string): Promise<ProductRecord> {
      const product = { id: prefixedId('prd'), name, createdAt: new Date().toISOString() };
      await storage.products.create(product);
      return product;
    },

    listProducts: () => storage.products.list(),

    requireProduct,

    async createKey(
      productId: string,
      input: { kind: KeyKind; name?: string | null; expiresAt?: string | null; allowedOrigins?: unknown },
    ): Promise<CreatedKey> {
      let allowedOrigins: string[] | null = null;
      if (input.kind === 'browser') {
        const checked = validateAllowedOrigins(input.allowedOrigins);
        if (!checked.ok) throw validationError(checked.errors);
        allowedOrigins = checked.origins;
      } else if (input.allowedOrigins !== undefined && input.allowedOrigins !== null) {
        throw validationError([{ pointer: '/allowed_origins', message: 'only browser keys have allowed origins' }]);
      }
      await requireProduct(productId);
      const generated = generateKey(input.kind);
      const record: ApiKeyRecord = {
        id: prefixedId('key'),
        productId,
        kind: input.kind,
        name: input.name ?? null,
        prefix: generated.prefix,
        keyHash: generated.hash,
        createdAt: new Date().toISOString(),
        expiresAt: input.expiresAt ?? null,
        revokedAt: null,
        lastUsedAt: null,
        allowedOrigins,
      };
      await storage.apiKeys.create(record);
      return { record, key: generated.key };
    },

    async listKeys(productId: string): Promise<ApiKeyRecord[]> {
      await requireProduct(productId);
      return storage.apiKeys.listByProduct(productId);
    },

    /** Replaces the allowed origins of a browser key (effective at once here, elsewhere within the cache TTL). */
    async setAllowedOrigins(keyId: string, value: unknown): Promise<ApiKeyRecord> {
      const existing = await storage.apiKeys.get(keyId);
      if (existing === undefined) throw new AppError('not_found', `No API key with id "${keyId}".`);
      if (existing.kind !== 'browser')
        throw validationError([
          {
            pointer: '/allowed_origins',
            message: `only browser keys have allowed origins; this is an ${existing.kind} key`,
          },
        ]);
      const checked = validateAllowedOrigins(value);
      if (!checked.ok) throw validationError(checked.errors);
      const record = await storage.apiKeys.setAllowedOrigins(keyId, checked.origins);
      cache.clear();
      return record!;
    },

    async revokeKey(keyId: string): Promise<ApiKeyRecord> {
      const record = await storage.apiKeys.revoke(keyId, new Date().toISOString());
      if (record === undefined) throw new AppError('not_found', `No API key with id "${keyId}".`);
      // Effective at once in this process; other processes see it within the cache TTL.
      cache.clear();
      return record;
    },

    /** Resolves the `Authorization` header to a key of the required kind, or throws 401/403. */
    async authenticate(header: string | undefined, required: KeyKind): Promise<AuthContext> {
      const token = bearerToken(header);
      if (token === undefined) {
        throw new AppError('unauthorized', 'Send your API key as "Authorization: Bearer <key>".');
      }
      const record = await verified(token);
      if (record.kind !== required) {
        throw new AppError(
          'forbidden',
          required === 'events'
            ? 'This is a reports key; writing events and identities needs an events key (inlet_ev_…).'
            : 'This is an events key; reading traffic reports needs a reports key (inlet_rp_…).',
        );
      }
      noteUsage(record.id, clock());
      return { productId: record.productId, keyId: record.id, kind: record.kind };
    },

    /** Resolves a key presented without a scheme (Segment's write key) to a valid key of one of the allowed kinds. */
    async authenticateKey(presented: string, allowed: readonly KeyKind[]): Promise<AuthContext> {
      const record = await verified(presented);
      if (!allowed.includes(record.kind)) {
        throw new AppError(
          'forbidden',
          record.kind === 'reports'
            ? 'This is a reports key; writing events and identities needs an events key (inlet_ev_…) or, from web pages, a browser key (inlet_pk_…).'
            : `This ${record.kind} key cannot do this; it needs ${allowed.join(' or ')} key.`,
        );
      }
      noteUsage(record.id, clock());
      return {
        productId: record.productId,
        keyId: record.id,
        kind: record.kind,
        ...(record.allowedOrigins == null ? {} : { allowedOrigins: record.allowedOrigins }),
      };
    },

    async close(): Promise<void> {
      if (usageFlush !== undefined) await usageFlush;
      if (pendingUsage.size > 0) await flushUsage();
    },
  };

  /** The stored key for a presented secret: known, not revoked, not expired; otherwise 401. */
  async function verified(presented: string): Promise<ApiKeyRecord> {
    if (!looksLikeKey(presented)) throw new AppError('unauthorized', 'The API key is not valid.');
    const hash = hashKey(presented);
    const record = await lookup(hash);
    if (record === undefined || !constantTimeEqual(record.keyHash, hash)) {
      throw new AppError('unauthorized', 'The API key is not valid.');
    }
    const now = clock();
    if (record.revokedAt !== null && Date.parse(record.revokedAt) <= now) {
      throw new AppError('unauthorized', 'The API key has been revoked.');
    }
    if (record.expiresAt !== null && Date.parse(record.expiresAt) <= now) {
      throw new AppError('unauthorized', 'The API key has expired.');
    }
    return record;
  }
}

export type KeyService = ReturnType<typeof createKeyService>;
