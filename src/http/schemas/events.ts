// Event request and response schemas (contract §4). The same compiled schema validates a single
// request and each element of a batch.
import { Type, type Static } from '@sinclair/typebox';
import { NAME_MAX_LENGTH, NAME_PATTERN_SOURCE, V1_EVENT_TYPES } from '../../domain/event-names.js';
import { RFC3339_PATTERN_SOURCE } from '../../domain/timestamps.js';

const nameMessage = `must match ${NAME_PATTERN_SOURCE} (lower-case letters, digits and underscores, starting with a letter)`;

const Name = (description: string) =>
  Type.String({
    pattern: NAME_PATTERN_SOURCE,
    maxLength: NAME_MAX_LENGTH,
    minLength: 1,
    description,
    errorMessage: nameMessage,
  });

const SubjectType = Type.Union([Type.Literal('user'), Type.Literal('account'), Type.Literal('subscription')], {
  description: 'Kind of subject the event is about',
});
const SubjectId = Type.String({ minLength: 1, maxLength: 255, description: 'Identifier of the subject in your app' });
const OccurredAt = Type.String({
  pattern: RFC3339_PATTERN_SOURCE,
  description: 'RFC 3339 timestamp with an offset (Z or ±hh:mm); stored in UTC with millisecond precision',
  errorMessage: 'must be an RFC 3339 timestamp with an offset, for example 2026-03-01T12:00:00Z',
  examples: ['2026-03-01T12:00:00Z'],
});
const Properties = (description: string) => Type.Object({}, { additionalProperties: true, description });
const ExternalId = Type.String({
  minLength: 1,
  maxLength: 255,
  description: 'Idempotency key: a retry with the same key (same product, same source) returns the original event',
});

export const EventV1Request = Type.Object(
  {
    event_type: Type.String({
      minLength: 1,
      maxLength: NAME_MAX_LENGTH,
      description: `Flat canonical event type, one of: ${V1_EVENT_TYPES.join(', ')}`,
      examples: ['user_signed_up'],
    }),
    subject_type: SubjectType,
    subject_id: SubjectId,
    occurred_at: OccurredAt,
    metadata: Type.Optional(Properties('Free-form event properties (stored as `properties`)')),
    external_id: Type.Optional(ExternalId),
  },
  { $id: 'EventV1Request', additionalProperties: false },
);
export type EventV1Request = Static<typeof EventV1Request>;

export const EventV2Request = Type.Object(
  {
    event: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 2 * NAME_MAX_LENGTH + 1,
        description:
          'Unified name "<event_type><sep><action>", split at the first ".", ":" or "_" (e.g. "project.created")',
      }),
    ),
    event_type: Type.Optional(
      Name('Entity noun (preferred format, with `action`); alone, a deprecated legacy flat name'),
    ),
    action: Type.Optional(Name('Verb (preferred format)')),
    subject_type: SubjectType,
    subject_id: SubjectId,
    occurred_at: Type.Optional({
      ...OccurredAt,
      description: `${OccurredAt.description}; defaults to the receive time`,
    }),
    properties: Type.Optional(Properties('Free-form event properties')),
    metadata: Type.Optional(Properties('Alias of `properties` (send one of the two)')),
    context: Type.Optional(
      Properties("What the sender knows of the client (`userAgent`, `ip`, …), stored like a Segment item's context"),
    ),
    external_id: Type.Optional(ExternalId),
  },
  { $id: 'EventV2Request', additionalProperties: false },
);
export type EventV2Request = Static<typeof EventV2Request>;

export const EventRecordSchema = Type.Object(
  {
    uuid: Type.String({ description: 'UUIDv7 assigned by Inlet' }),
    event_type: Type.String(),
    action: Type.String(),
    canonical_name: Type.String(),
    source: Type.String({ description: '"api" for events sent through the HTTP API' }),
    subject_type: Type.String(),
    subject_id: Type.String(),
    occurred_at: Type.String(),
    received_at: Type.String(),
    external_id: Type.Union([Type.String(), Type.Null()]),
    properties: Type.Object({}, { additionalProperties: true }),
    key_id: Type.Union([Type.String(), Type.Null()], {
      description: 'The API key that sent the event (null when no key did, e.g. an import)',
    }),
    context: Type.Optional(
      Type.Object({}, { additionalProperties: true, description: "Segment routes only: the item's context" }),
    ),
    original: Type.Optional(
      Type.Object(
        {},
        {
          additionalProperties: true,
          description:
            'Segment routes only: what else the item carried (type, name, ids, raw timestamps, integrations)',
        },
      ),
    ),
  },
  {
    $id: 'Event',
    description: 'One stored event: the same shape in ingest answers, admin reads, the live stream and NDJSON exports',
  },
);

export const BatchRequest = Type.Object(
  {
    events: Type.Array(Type.Ref(EventV2Request), {
      minItems: 1,
      description: 'Each element is validated and stored on its own',
    }),
  },
  { additionalProperties: false },
);

/** What the batch route itself enforces on the envelope; elements are judged one by one. */
export const BatchEnvelope = Type.Object(
  { events: Type.Array(Type.Unknown(), { minItems: 1 }) },
  { additionalProperties: false },
);

export const BatchItemResult = Type.Object({
  index: Type.Integer(),
  status: Type.Union([
    Type.Literal('created'),
    Type.Literal('duplicate'),
    Type.Literal('rejected'),
    Type.Literal('dropped'),
  ]),
  event: Type.Optional(Type.Ref(EventRecordSchema)),
  step: Type.Optional(Type.Integer({ description: 'dropped: the index of the transformation step that dropped it' })),
  error: Type.Optional(
    Type.Object({}, { additionalProperties: true, description: 'Problem details of the rejected element' }),
  ),
});

export const BatchResponse = Type.Object({
  data: Type.Array(BatchItemResult),
  meta: Type.Object({
    created: Type.Integer(),
    duplicates: Type.Integer(),
    rejected: Type.Integer(),
    dropped: Type.Optional(
      Type.Integer({ description: "Elements the product's transformation dropped (present when some were)" }),
    ),
  }),
});
