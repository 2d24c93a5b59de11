// The events the bench sends: one realistic preferred-format v2 event, made unique per request by
// its external_id. The same shape feeds the HTTP load and the raw-insert baselines.
import { uuidv7 } from '../src/domain/ids.js';

export const OCCURRED_AT = '2026-03-01T12:00:00Z';
const OCCURRED_AT_UTC = '2026-03-01T12:00:00.000Z';
const PROPERTIES = { plan: 'pro', seats: 3, trial: false, referrer: 'https://example.com/pricing' };
const PROPERTIES_JSON = JSON.stringify(PROPERTIES);

/** Unique external ids: `<run>-<scenario>-<n>`. */
export class ExternalIds {
  private next = 0;
  constructor(private readonly prefix: string) {}
  take(): string {
    return `${this.prefix}-${this.next++}`;
  }
}

/** One v2 event as JSON text, cheap to build (the load generator shares the CPU with the server). */
export function eventJson(externalId: string, n: number): string {
  return (
    `{"event_type":"project","action":"created","subject_type":"user","subject_id":"user_${n % 5000}",` +
    `"occurred_at":"${OCCURRED_AT}","external_id":"${externalId}","properties":${PROPERTIES_JSON}}`
  );
}

export function batchJson(ids: ExternalIds, size: number, n: number): string {
  const parts: string[] = new Array(size);
  for (let i = 0; i < size; i++) parts[i] = eventJson(ids.take(), n * size + i);
  return `{"events":[${parts.join(',')}]}`;
}

export const ROW_COLUMNS = [
  'id',
  'product_id',
  'source',
  'external_id',
  'event_type',
  'action',
  'canonical_name',
  'name_format',
  'subject_type',
  'subject_id',
  'occurred_at',
  'received_at',
  'properties',
  'api_key_id',
] as const;

/** The row the server would store for `eventJson(externalId, n)`, as positional values. */
export function rowValues(productId: string, apiKeyId: string, source: string, externalId: string, n: number): unknown[] {
  return [
    uuidv7(),
    productId,
    source,
    externalId,
    'project',
    'created',
    'project_created',
    'preferred',
    'user',
    `user_${n % 5000}`,
    OCCURRED_AT_UTC,
    new Date().toISOString(),
    PROPERTIES_JSON,
    apiKeyId,
  ];
}
