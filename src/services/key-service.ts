// Products, API keys and authentication of API requests. The parts, each in its file under keys/:
// authentication.ts (the key cache, `last_used_at`, authenticate) and admin.ts (products and keys).
import type { Storage } from '../storage/types.js';
import { createKeyAdmin } from './keys/admin.js';
import { createAuthenticator, KeyCache, KeyUsage } from './keys/authentication.js';

export type { AuthContext } from './keys/authentication.js';
export type { CreatedKey } from './keys/admin.js';

export interface KeyServiceOptions {
  cacheTtlMs: number;
  /** The clock for expiry, the cache TTL and `last_used_at` (default `Date.now`; tests move it instead of sleeping). */
  now?: () => number;
}

export function createKeyService(storage: Storage, options: KeyServiceOptions) {
  const clock = options.now ?? Date.now;
  const cache = new KeyCache(storage.apiKeys, options.cacheTtlMs, clock);
  const usage = new KeyUsage(storage.apiKeys);
  return {
    ...createKeyAdmin(storage, cache),
    ...createAuthenticator(cache, usage, clock),
    close: () => usage.close(),
  };
}

export type KeyService = ReturnType<typeof createKeyService>;
