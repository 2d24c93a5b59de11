// The ingest answers are written by hand as JSON text (http/events-format.ts: `answerOutcome`, `batchAnswer`), so
// that a new event's properties go out as the text serialised for its row. This checks that text, byte for byte,
// against what the routes' compiled serializers (their documented response schemas) write for the same outcomes:
// new events (with their row's JSON text), duplicates read back (without), Segment-shaped events with context and
// original, rejected and dropped elements, and awkward text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AppError } from '../../src/domain/errors.js';
import { batchAnswer, singleEventResponses } from '../../src/http/events-format.js';
import { ProblemSchema } from '../../src/http/schemas/common.js';
import { BatchResponse, EventRecordSchema } from '../../src/http/schemas/events.js';
import { cachedSerializerFactory } from '../../src/http/serializer-cache.js';
import { eventJson } from '../../src/resources/event-export.js';
import { eventResource } from '../../src/resources/events.js';
import type { ItemOutcome } from '../../src/services/ingest/service.js';
import type { EventInsert, EventRecord } from '../../src/storage/types.js';

const shared = { [EventRecordSchema.$id!]: EventRecordSchema, [ProblemSchema.$id!]: ProblemSchema };
const serializer = (schema: unknown) =>
  cachedSerializerFactory(shared, {})({ method: 'POST', url: '/x', httpStatus: '200', schema }) as (
    data: unknown,
  ) => string;

const awkward = {
  quote: 'say "hi", then\nleave',
  emoji: 'café ☕ 𝄞',
  control: '\u0001\t\u001f',
  nested: { list: [1, 2.5, null, true, { deep: 'x,y' }] },
  empty: {},
  n: -0.000123,
};

function record(overrides: Partial<EventRecord> = {}): EventRecord {
  return {
    id: '0193a7c2-7b1e-7000-8000-000000000001',
    productId: 'prd_1',
    source: 'api',
    externalId: 'e "1"\u2028',
    eventType: 'order',
    action: 'completed',
    canonicalName: 'order_completed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: 'u,1 \\ é',
    occurredAt: '2026-03-01T12:00:00.000Z',
    receivedAt: '2026-03-01T12:00:01.000Z',
    properties: awkward,
    apiKeyId: 'key_1',
    ...overrides,
  };
}

/** A new event as the ingest path hands it back: the row, with its JSON values as serialised for storage. */
function inserted(overrides: Partial<EventRecord> = {}): EventInsert {
  const event = record(overrides);
  return {
    ...event,
    propertiesJson: JSON.stringify(event.properties),
    contextJson: event.context == null ? null : JSON.stringify(event.context),
    originalJson: event.original == null ? null : JSON.stringify(event.original),
  };
}

const events: EventRecord[] = [
  inserted(),
  inserted({ externalId: null, apiKeyId: null, properties: {} }),
  inserted({
    source: 'segment',
    context: { ip: '203.0.113.42', library: { name: 'analytics-node' } },
    original: { type: 'track', messageId: 'm-1', integrations: { All: true } },
  }),
  record(),
  record({ context: { locale: 'de-DE' }, original: null }),
];

test("a single event's answer is what the route's serializer writes", () => {
  const serialize = serializer(singleEventResponses()[201]);
  for (const event of events) assert.equal(`{"data":${eventJson(event)}}`, serialize({ data: eventResource(event) }));
});

test("a batch's answer is what the route's serializer writes, for every kind of outcome", () => {
  const serialize = serializer(BatchResponse);
  const rejected = new AppError('validation_error', 'The event is invalid.', {
    errors: [{ pointer: '/events/2/subject_id', message: 'required' }],
  });
  const outcomes: ItemOutcome[] = [
    { status: 'created', event: events[0]! },
    { status: 'duplicate', event: events[3]! },
    { status: 'rejected', error: rejected },
    { status: 'created', event: events[2]! },
    { status: 'dropped', step: 1 },
    { status: 'created', event: events[1]! },
  ];
  const expected = (of: ItemOutcome[]) => {
    const meta = { created: 0, duplicates: 0, rejected: 0 } as Record<string, number>;
    const data = of.map((outcome, index) => {
      if (outcome.status === 'rejected') {
        meta.rejected!++;
        return { index, status: outcome.status, error: outcome.error.toProblem('req-1') };
      }
      if (outcome.status === 'dropped') {
        meta.dropped = (meta.dropped ?? 0) + 1;
        return { index, status: outcome.status, step: outcome.step };
      }
      meta[outcome.status === 'created' ? 'created' : 'duplicates']!++;
      return { index, status: outcome.status, event: eventResource(outcome.event) };
    });
    return serialize({ data, meta });
  };
  assert.deepEqual(batchAnswer(outcomes, 'req-1'), { status: 207, json: expected(outcomes) });
  const stored = outcomes.filter((outcome) => outcome.status === 'created' || outcome.status === 'duplicate');
  assert.deepEqual(batchAnswer(stored, 'req-1'), { status: 200, json: expected(stored) });
  assert.deepEqual(batchAnswer([{ status: 'dropped', step: 0 }], 'req-1'), {
    status: 200,
    json: expected([{ status: 'dropped', step: 0 }]),
  });
});
