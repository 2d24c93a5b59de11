// The HMAC key of erasure (governance.md §3): suppressions and audit records hold an HMAC of an id under
// the installation secret (INLET_INSTALLATION_SECRET, or one Inlet generates and stores), never the id.
import { createHmac, randomBytes } from 'node:crypto';
import type { ErasureStore } from '../../storage/types.js';

/** The HMAC key differs from the one the database's suppressions and audit records were made with. */
export class KeyChangedError extends Error {
  constructor() {
    super(
      'INLET_INSTALLATION_SECRET is not the key the stored suppressions and erasure audit records were made with ' +
        '(its fingerprint in table installation_secrets differs): erased people would be accepted again. Start with the ' +
        'previous secret (or unset it, if the key was the one Inlet generated). To change the key deliberately, knowing ' +
        'that every earlier suppression and audit HMAC stops matching, delete the row named hmac-fingerprint from ' +
        'installation_secrets first (docs/privacy.md).',
    );
    this.name = 'KeyChangedError';
  }
}

export function hmacWith(key: string, productId: string, externalId: string): string {
  return createHmac('sha256', key).update(`${productId}\u0000${externalId}`).digest('hex');
}

/** The key, loaded (or generated and stored) once; `installationSecret` is the configured one, if any. */
export function createErasureKey(store: ErasureStore, installationSecret: string | undefined) {
  let secret: string | undefined = installationSecret;
  let secretLoading: Promise<string> | undefined;
  async function load(): Promise<string> {
    if (secret !== undefined) return secret;
    secretLoading ??= store.installationSecret(() => randomBytes(32).toString('base64url'));
    secret = await secretLoading;
    return secret;
  }
  return {
    load,
    /** The key once loaded (the suppression copy is loaded after it). */
    get loaded(): string | undefined {
      return secret;
    },
    hmac: async (productId: string, externalId: string) => hmacWith(await load(), productId, externalId),
    /**
     * Checks that the HMAC key is the one the stored suppressions and audit records were made with: a
     * changed or newly set INLET_INSTALLATION_SECRET would silently make every suppression unmatchable (the
     * erased ids accepted again). The database keeps a fingerprint of the key (an HMAC of a constant under
     * it, which tells nothing of the key); a different key is refused with KeyChangedError while anything
     * was keyed with the old one, and simply recorded while nothing was. Called at start (services.ts).
     */
    async verify(): Promise<void> {
      const fingerprint = createHmac('sha256', await load())
        .update('inlet installation secret fingerprint v1')
        .digest('hex');
      const { stored } = await store.keyFingerprint(fingerprint);
      if (stored !== fingerprint) throw new KeyChangedError();
    },
  };
}

export type ErasureKey = ReturnType<typeof createErasureKey>;
