// The events the bench sends: one realistic preferred-format v2 event, made unique per request by
// its external_id. The same shape feeds the HTTP load and the raw-insert baselines.
import { randomBytes, randomUUID } from 'node:crypto';
import { uuidv7 } from '../src/domain/ids.js';
import type { IdKind } from './args.js';

export type { IdKind };

export const OCCURRED_AT = '2026-03-01T12:00:00Z';
/** Events per batch request (`--batch-size`'s default); the prefills share a received time among as many. */
export const BATCH_SIZE = 100;
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

export function batchJson(ids: { take(): string }, size: number, n: number): string {
  const parts: string[] = new Array(size);
  for (let i = 0; i < size; i++) parts[i] = eventJson(ids.take(), n * size + i);
  return `{"events":[${parts.join(',')}]}`;
}

/** What @segment/analytics-node 3.x puts in `context` (library, and what a server app adds): ~600 bytes. */
export const SEGMENT_CONTEXT_JSON = JSON.stringify({
  library: { name: '@segment/analytics-node', version: '3.1.0' },
  app: { name: 'billing-service', version: '4.12.3', build: '20261120.4', namespace: 'com.example.billing' },
  os: { name: 'Linux', version: '6.1.0-27-amd64' },
  device: { id: 'b0c2e6f4-3a1d-4e4b-9a57-5f0d7c1e2a93', manufacturer: 'Dell', model: 'PowerEdge R650', type: 'server' },
  network: { carrier: 'none', cellular: false, wifi: false },
  locale: 'en-US',
  timezone: 'Europe/Berlin',
  ip: '203.0.113.42',
  traits: { plan: 'pro', company: 'Example GmbH' },
  userAgent: 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36',
});

/**
 * A `/v1/batch` body as @segment/analytics-node 3.x sends it: track items with `node-next-<ms>-<uuid v4>`
 * messageIds (random, as the SDK's), a context of ~600 bytes, the native workload's random 300-byte properties
 * (as the wrk script of load.ts builds them).
 */
export function segmentBatchJson(size: number, n: number, writeKey: string): string {
  const parts: string[] = new Array(size);
  const now = Date.now();
  for (let i = 0; i < size; i++) {
    parts[i] =
      `{"type":"track","event":"Project Created","userId":"user_${(n * size + i) % 5000}","messageId":"node-next-${now}-${randomUUID()}",` +
      `"timestamp":"${OCCURRED_AT}","properties":${randomProperties()},"context":${SEGMENT_CONTEXT_JSON},"integrations":{},"_metadata":{"nodeVersion":"20.19.5","jsRuntime":"node"}}`;
  }
  return `{"batch":[${parts.join(',')}],"writeKey":"${writeKey}","sentAt":"${new Date(now).toISOString()}"}`;
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
export function rowValues(
  productId: string,
  apiKeyId: string,
  source: string,
  externalId: string,
  n: number,
): unknown[] {
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

// ---------------------------------------------------------------------------------------------------
// The write-path workload of issue 11: what SDKs send. Random uuid v4 external ids (or uuid v7, or the
// old sequential ids), 100,000 subjects, 8 event names, properties of exactly PROPERTIES_BYTES bytes of
// compact JSON (three random hex fields, so they do not compress to nothing). The same events come from
// the wrk Lua script (load.ts) and from the prefill (prefill.ts).

export const SUBJECTS = 100_000;
export const EVENT_NAMES: ReadonlyArray<readonly [string, string]> = [
  ['project', 'created'],
  ['project', 'viewed'],
  ['page', 'viewed'],
  ['invoice', 'paid'],
  ['user', 'signed_in'],
  ['report', 'exported'],
  ['checkout', 'started'],
  ['feature', 'used'],
];

/** Properties as sent: `%s` are 8, 8 and 32 random hex digits, so every event's properties are the same length. */
export const PROPERTIES_TEMPLATE =
  '{"plan":"pro","seats":12,"trial":false,"amount_cents":129900,"path":"/settings/billing/%s","referrer":"https://example.com/pricing?utm_source=newsletter&utm_campaign=%s","session_id":"%s","screen":{"width":1920,"height":1080},"tags":["alpha","beta","gamma"]}';
/** Bytes of every event's properties JSON (the template with its 48 hex digits in place of the three `%s`). */
export const PROPERTIES_BYTES = PROPERTIES_TEMPLATE.length - 6 + 48;

function hex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

export function randomProperties(): string {
  const parts = PROPERTIES_TEMPLATE.split('%s');
  return `${parts[0]}${hex(4)}${parts[1]}${hex(4)}${parts[2]}${hex(16)}${parts[3]}`;
}

/**
 * External ids of one kind; `sequential` uses the prefix and a counter, `v7` the time given (by default now: a
 * prefill passes the event's received time, as ids.ts keeps one clock for all its ids).
 */
export function externalIdMaker(kind: IdKind, prefix: string): (at?: number) => string {
  let n = 0;
  if (kind === 'random') return () => randomUUID();
  if (kind === 'v7') return (at = Date.now()) => uuidv7(at);
  return () => `${prefix}-${n++}`;
}

/** One event of the issue-11 workload as JSON text (what the wrk script builds, for the autocannon fallback). */
export function workloadEventJson(externalId: string): string {
  const [eventType, action] = EVENT_NAMES[Math.floor(Math.random() * EVENT_NAMES.length)]!;
  return (
    `{"event_type":"${eventType}","action":"${action}","subject_type":"user","subject_id":"user_${Math.floor(Math.random() * SUBJECTS)}",` +
    `"occurred_at":"${OCCURRED_AT}","external_id":"${externalId}","properties":${randomProperties()}}`
  );
}

/** The row the server would store for `workloadEventJson(externalId)` received at `receivedAtMs`, as positional values (ROW_COLUMNS). */
export function workloadRowValues(
  productId: string,
  apiKeyId: string | null,
  source: string,
  externalId: string,
  receivedAtMs = Date.now(),
): unknown[] {
  const [eventType, action] = EVENT_NAMES[Math.floor(Math.random() * EVENT_NAMES.length)]!;
  return [
    uuidv7(receivedAtMs),
    productId,
    source,
    externalId,
    eventType,
    action,
    `${eventType}_${action}`,
    'preferred',
    'user',
    `user_${Math.floor(Math.random() * SUBJECTS)}`,
    OCCURRED_AT_UTC,
    new Date(receivedAtMs).toISOString(),
    randomProperties(),
    apiKeyId,
  ];
}

export function workloadBatchJson(next: () => string, size: number): string {
  const parts: string[] = new Array(size);
  for (let i = 0; i < size; i++) parts[i] = workloadEventJson(next());
  return `{"events":[${parts.join(',')}]}`;
}
