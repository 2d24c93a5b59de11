// Products and their API keys: create, list, change a browser key's origins, revoke. A change to a key is
// effective at once in this process (the key cache is cleared), elsewhere within the cache TTL.
import { AppError, validationError } from '../../domain/errors.js';
import { generateKey, validateAllowedOrigins, type KeyKind } from '../../domain/api-keys.js';
import { prefixedId } from '../../domain/ids.js';
import type { ApiKeyRecord, ProductRecord, Storage } from '../../storage/types.js';
import type { KeyCache } from './authentication.js';

export interface CreatedKey {
  record: ApiKeyRecord;
  /** The full secret: shown once, never stored. */
  key: string;
}

export interface KeyInput {
  kind: KeyKind;
  name?: string | null;
  expiresAt?: string | null;
  allowedOrigins?: unknown;
}

/** The allowed origins of a new key: required and checked for a browser key, refused for any other. */
function originsOf(input: KeyInput): string[] | null {
  if (input.kind === 'browser') {
    const checked = validateAllowedOrigins(input.allowedOrigins);
    if (!checked.ok) throw validationError(checked.errors);
    return checked.origins;
  }
  if (input.allowedOrigins !== undefined && input.allowedOrigins !== null) {
    throw validationError([{ pointer: '/allowed_origins', message: 'only browser keys have allowed origins' }]);
  }
  return null;
}

export function createKeyAdmin(storage: Pick<Storage, 'products' | 'apiKeys'>, cache: KeyCache) {
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

    async createKey(productId: string, input: KeyInput): Promise<CreatedKey> {
      const allowedOrigins = originsOf(input);
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
  };
}
