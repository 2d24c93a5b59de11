// Public JSON shapes of erasure jobs (the audit: never the id, its HMAC) and suppressions, shared by
// the admin API and the CLI's --json output (governance.md §3).
import type { ErasureRecord, SuppressionRecord } from '../storage/types.js';

export function erasureResource(job: ErasureRecord) {
  return {
    id: job.id,
    status: job.status,
    phase: job.phase,
    reason: job.reason,
    external_id_hmac: job.idHmac,
    requested_at: job.requestedAt,
    started_at: job.startedAt,
    finished_at: job.finishedAt,
    counts: { ...job.counts },
    error: job.error,
  };
}

export function suppressionResource(suppression: SuppressionRecord) {
  return {
    id: suppression.id,
    external_id_hmac: suppression.idHmac,
    erasure_id: suppression.erasureId,
    created_at: suppression.createdAt,
  };
}
