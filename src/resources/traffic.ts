// Public JSON shapes of traffic sources and sync runs, shared by the admin API and the CLI.
import type { SyncRunRecord, TrafficSourceSummary } from '../storage/types.js';

export function trafficSourceResource(source: TrafficSourceSummary) {
  return {
    product_id: source.productId,
    provider: source.provider,
    ...source.config,
    created_at: source.createdAt,
    updated_at: source.updatedAt,
  };
}

export function syncRunResource(run: SyncRunRecord) {
  return {
    id: run.id,
    provider: run.provider,
    kind: run.kind,
    started_at: run.startedAt,
    finished_at: run.finishedAt,
    from: run.from,
    to: run.to,
    rows: run.rows,
    outcome: run.outcome,
    error: run.error,
  };
}
