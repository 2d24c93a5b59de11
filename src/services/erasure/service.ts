// Erasure of a person (governance.md §3): suppression first, then deletion in small transactions, the
// `user.erased` message for destinations, and an audit record that holds an HMAC of the id, never the id.
// This module wires the parts, each in its file: key.ts (the HMAC key and its check at start),
// suppression.ts (the ingest path's check against an in-memory copy), requests.ts (the request and the
// audit reads), jobs.ts (the job runner).
import { randomBytes } from 'node:crypto';
import type { Storage } from '../../storage/types.js';
import type { Metrics } from '../metrics.js';
import type { RejectionService } from '../rejection-service.js';
import { createErasureJobs } from './jobs.js';
import { createErasureKey } from './key.js';
import { createErasureRequests } from './requests.js';
import { createSuppressions } from './suppression.js';

export { KeyChangedError } from './key.js';

export interface ErasureOptions {
  installationSecret: string | undefined;
  refreshMs: number;
  pollMs: number;
  messageKeepDays: number;
  /** The instance's name in leases. */
  holder?: string;
}

export function createErasureService(
  storage: Storage,
  metrics: Metrics,
  rejections: RejectionService | undefined,
  options: ErasureOptions,
) {
  const store = storage.erasure;
  const holder = options.holder ?? `erasure-${randomBytes(6).toString('hex')}`;
  const { refreshMs, pollMs, messageKeepDays } = options;
  const key = createErasureKey(store, options.installationSecret);
  const jobs = createErasureJobs({ storage, metrics, holder, refreshMs, pollMs, messageKeepDays });
  const suppressions = createSuppressions({ store, key, metrics, rejections, refreshMs });
  const requests = createErasureRequests({ store, key, suppressions, refreshMs, queued: jobs.wake });
  return {
    hmac: key.hmac,
    verifyKey: key.verify,
    ...requests,
    /** True when an item naming these ids must be refused (`subject_suppressed`). */
    anySuppressed: suppressions.anySuppressed,
    suppressionCheck: suppressions.suppressionCheck,
    refuseSuppressed: suppressions.refuseSuppressed,
    countSuppressed: suppressions.countSuppressed,
    runNow: jobs.runNow,
    start: jobs.start,
    close: jobs.close,
  };
}

export type ErasureService = ReturnType<typeof createErasureService>;
