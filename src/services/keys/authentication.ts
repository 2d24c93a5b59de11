// Authentication of API requests: a presented key resolved (through a short cache) to a stored key that is
// known, not revoked and not expired, of a kind the route accepts; each key's last use noted off the request
// path.
import { AppError } from '../../domain/errors.js';
import { bearerToken, constantTimeEqual, hashKey, looksLikeKey, type KeyKind } from '../../domain/api-keys.js';
import type { ApiKeyRecord, Storage } from '../../storage/types.js';

export interface AuthContext {
  productId: string;
  keyId: string;
  kind: KeyKind;
  /** Browser keys: the origins whose pages may use the key. */
  allowedOrigins?: readonly string[];
}

/** `last_used_at` is written at most once a minute per key, off the request path. */
const LAST_USED_RESOLUTION_MS = 60_000;
/** The cache is emptied rather than grown past this many hashes. */
const CACHE_MAX = 10_000;

/** Stored keys by hash, kept `ttlMs` (0: not kept); a change to a key clears it here at once. */
export class KeyCache {
  private readonly entries = new Map<string, { record: ApiKeyRecord | undefined; cachedAt: number }>();

  constructor(
    private readonly store: Storage['apiKeys'],
    private readonly ttlMs: number,
    private readonly clock: () => number,
  ) {}

  async lookup(hash: string): Promise<ApiKeyRecord | undefined> {
    const now = this.clock();
    const hit = this.entries.get(hash);
    if (hit !== undefined && now - hit.cachedAt < this.ttlMs) return hit.record;
    const record = await this.store.findByHash(hash);
    if (this.ttlMs > 0) {
      if (this.entries.size > CACHE_MAX) this.entries.clear();
      this.entries.set(hash, { record, cachedAt: now });
    }
    return record;
  }

  clear(): void {
    this.entries.clear();
  }
}

/** Each key's `last_used_at`, written in the background at most once a minute per key. */
export class KeyUsage {
  private readonly written = new Map<string, number>();
  private readonly pending = new Map<string, string>();
  private flushing: Promise<void> | undefined;

  constructor(private readonly store: Storage['apiKeys']) {}

  note(keyId: string, now: number): void {
    const last = this.written.get(keyId) ?? 0;
    if (now - last < LAST_USED_RESOLUTION_MS) return;
    this.written.set(keyId, now);
    this.pending.set(keyId, new Date(now).toISOString());
    this.flushing ??= Promise.resolve().then(() => this.flush());
  }

  private async flush(): Promise<void> {
    const usages = [...this.pending].map(([id, at]) => ({ id, at }));
    this.pending.clear();
    this.flushing = undefined;
    try {
      await this.store.touch(usages);
    } catch {
      // Bookkeeping only: a failed write is retried with the next use.
      for (const { id } of usages) this.written.delete(id);
    }
  }

  async close(): Promise<void> {
    if (this.flushing !== undefined) await this.flushing;
    if (this.pending.size > 0) await this.flush();
  }
}

/** The stored key for a presented secret: known, not revoked, not expired; otherwise 401. */
async function verified(cache: KeyCache, clock: () => number, presented: string): Promise<ApiKeyRecord> {
  if (!looksLikeKey(presented)) throw new AppError('unauthorized', 'The API key is not valid.');
  const hash = hashKey(presented);
  const record = await cache.lookup(hash);
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

export function createAuthenticator(cache: KeyCache, usage: KeyUsage, clock: () => number) {
  return {
    /** Resolves the `Authorization` header to a key of the required kind, or throws 401/403. */
    async authenticate(header: string | undefined, required: KeyKind): Promise<AuthContext> {
      const token = bearerToken(header);
      if (token === undefined) {
        throw new AppError('unauthorized', 'Send your API key as "Authorization: Bearer <key>".');
      }
      const record = await verified(cache, clock, token);
      if (record.kind !== required) {
        throw new AppError(
          'forbidden',
          required === 'events'
            ? 'This is a reports key; writing events and identities needs an events key (inlet_ev_…).'
            : 'This is an events key; reading traffic reports needs a reports key (inlet_rp_…).',
        );
      }
      usage.note(record.id, clock());
      return { productId: record.productId, keyId: record.id, kind: record.kind };
    },

    /** Resolves a key presented without a scheme (Segment's write key) to a valid key of one of the allowed kinds. */
    async authenticateKey(presented: string, allowed: readonly KeyKind[]): Promise<AuthContext> {
      const record = await verified(cache, clock, presented);
      if (!allowed.includes(record.kind)) {
        throw new AppError(
          'forbidden',
          record.kind === 'reports'
            ? 'This is a reports key; writing events and identities needs an events key (inlet_ev_…) or, from web pages, a browser key (inlet_pk_…).'
            : `This ${record.kind} key cannot do this; it needs ${allowed.join(' or ')} key.`,
        );
      }
      usage.note(record.id, clock());
      return {
        productId: record.productId,
        keyId: record.id,
        kind: record.kind,
        ...(record.allowedOrigins == null ? {} : { allowedOrigins: record.allowedOrigins }),
      };
    },
  };
}
