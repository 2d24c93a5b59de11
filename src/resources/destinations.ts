// The public JSON shapes of destinations and their delivery log (events-out §6): the same in the admin
// API and the CLI. Credentials and secrets are never part of them (a new secret is added by the routes
// that make one, in that answer only).
import { encodeDestinationCursor } from '../domain/destinations.js';
import type { DestinationView } from '../services/destinations/admin.js';
import type { DeliveryRecord } from '../storage/types.js';

/** Each type's own fields; a warehouse's URL (it holds the password) is never echoed. */
function typeFields(d: DestinationView) {
  if (d.type === 'webhook') return { url: d.config.url ?? null };
  if (d.type === 'postgres')
    return { schema: d.config.schema ?? '', columns_added: d.columnsAdded, type_widenings: d.typeWidenings };
  if (d.type === 'parquet')
    return {
      path: d.config.path ?? '',
      earlier_paths: d.config.earlierPaths ?? [],
      partition: d.config.partition ?? 'hour',
    };
  return { servers: d.config.servers ?? [], subject: d.config.subject ?? '', has_credentials: d.credentials !== null };
}

export function destinationResource(d: DestinationView) {
  const camel = d.filter;
  const filter: Record<string, string[]> = {};
  if (camel.types !== undefined) filter.types = camel.types;
  if (camel.canonicalNames !== undefined) filter.canonical_names = camel.canonicalNames;
  if (camel.sources !== undefined) filter.sources = camel.sources;
  return {
    id: d.id,
    product_id: d.productId,
    type: d.type,
    name: d.name,
    status: d.status,
    disabled_reason: d.disabledReason,
    ...typeFields(d),
    filter,
    batch: { max_messages: d.batch.maxMessages, max_wait_ms: d.batch.maxWaitMs },
    cursor: encodeDestinationCursor(d.cursor),
    lag: d.lag,
    delivered: d.delivered,
    consecutive_failures: d.consecutiveFailures,
    next_attempt_at: d.nextAttemptAt === null ? null : new Date(d.nextAttemptAt).toISOString(),
    last_success_at: d.lastSuccessAt,
    last_error: d.lastError,
    last_error_at: d.lastErrorAt,
    previous_secret_until: d.previousSecretUntil === null ? null : new Date(d.previousSecretUntil).toISOString(),
    warnings: d.warnings,
    // Steps as stored: JSON objects, defaults filled in.
    transformation: d.transformation as { steps: Array<Record<string, unknown>> } | null,
    created_at: d.createdAt,
    updated_at: d.updatedAt,
  };
}

export function deliveryResource(r: DeliveryRecord) {
  return {
    id: r.id,
    attempted_at: r.attemptedAt,
    attempt: r.attempt,
    webhook_id: r.webhookId,
    message_ids: r.messageIds,
    outcome: r.outcome,
    status: r.status,
    error: r.error,
    duration_ms: r.durationMs,
  };
}
