// What the single-event endpoints (v1 and v2) share: their documented responses, the request as the
// pipeline's candidate and record, the answer to a stored or replayed event, and the headers of legacy
// input. The record shape is in src/resources.
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { eventResource, type EventResource } from '../resources/events.js';
import { eventJson } from '../resources/event-export.js';
import type { draftV1 } from '../domain/events.js';
import { AppError, validationError } from '../domain/errors.js';
import type { AcceptOptions, Candidate, ItemOutcome } from '../services/ingest/service.js';
import { dataEnvelope, keyedWriteErrors, problemResponse } from './schemas/common.js';
import { EventRecordSchema } from './schemas/events.js';

export { eventResource, type EventResource };

/** Headers on every response to legacy flat input (contract §4, §5). */
export const DEPRECATION_HEADERS = { deprecation: 'true', sunset: '2026-09-01' } as const;

/** The documented responses of a single-event endpoint, plus any endpoint-specific ones. */
export function singleEventResponses(extra: Record<number, unknown> = {}) {
  return {
    201: dataEnvelope(Type.Ref(EventRecordSchema), 'Stored'),
    200: Type.Union(
      [
        dataEnvelope(Type.Ref(EventRecordSchema)),
        Type.Object({
          data: Type.Null(),
          meta: Type.Object({ dropped: Type.Literal(true), step: Type.Integer() }),
        }),
      ],
      {
        description:
          "Already stored under this external_id: the original event (Idempotent-Replayed: true); or dropped by the product's transformation: `data` null, `meta.step` the step that dropped it",
      },
    ),
    ...keyedWriteErrors({
      400: "Invalid JSON or invalid event; tracking_plan_violation or unplanned_event: refused by the product's tracking plan in enforce (`errors[].pointer` such as /properties/plan)",
      413: 'Event larger than the per-event limit',
    }),
    422: problemResponse(
      "transformation_error: a step of the product's transformation failed on the event; `step` and `kind` name it",
    ),
    409: problemResponse(
      'subject_suppressed: the subject is a person who was erased (governance.md §3); nothing was stored',
    ),
    ...extra,
  };
}

/** What Fastify's serializers answer with; an answer written here as JSON text sets it itself. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * A single event's outcome as the answer: 201 with the new event, 200 + `Idempotent-Replayed: true`
 * with the original one (contract §4), or the rejection thrown as the request's error. The event goes out as
 * JSON text written by hand (`eventJson`, the fields of `EventRecordSchema` in its order): a new event's
 * properties were serialised once for its row, and that text is the answer's too. Sent here: the caller returns
 * the reply.
 */
export function answerOutcome(reply: FastifyReply, outcome: ItemOutcome): FastifyReply {
  if (outcome.status === 'rejected') throw outcome.error;
  if (outcome.status === 'dropped')
    return reply.code(200).send({ data: null, meta: { dropped: true, step: outcome.step } });
  if (outcome.status === 'duplicate') reply.header('idempotent-replayed', 'true').code(200);
  else reply.code(201);
  return reply.type(JSON_CONTENT_TYPE).send(`{"data":${eventJson(outcome.event)}}`);
}

/**
 * The batch route's answer (`BatchResponse`) as JSON text written by hand, its fields in the schema's order: 200,
 * or 207 when an element was rejected. Each new event's properties were serialised once for its row, and that
 * text is the answer's too (`eventJson`), where the route's compiled serializer walked every event's properties
 * again and checked each status against the schema.
 */
export function batchAnswer(outcomes: readonly ItemOutcome[], requestId: string): { status: 200 | 207; json: string } {
  let created = 0;
  let duplicates = 0;
  let rejected = 0;
  let dropped = 0;
  let data = '';
  for (let index = 0; index < outcomes.length; index++) {
    const outcome = outcomes[index]!;
    const head = `${index === 0 ? '' : ','}{"index":${index},"status":"${outcome.status}"`;
    if (outcome.status === 'rejected') {
      rejected++;
      data += `${head},"error":${JSON.stringify(outcome.error.toProblem(requestId))}}`;
    } else if (outcome.status === 'dropped') {
      dropped++;
      data += `${head},"step":${outcome.step}}`;
    } else {
      if (outcome.status === 'created') created++;
      else duplicates++;
      data += `${head},"event":${eventJson(outcome.event)}}`;
    }
  }
  // `dropped` is present only when the product's transformation dropped an element (transformations.md §5).
  const meta = `{"created":${created},"duplicates":${duplicates},"rejected":${rejected}${dropped > 0 ? `,"dropped":${dropped}` : ''}}`;
  return { status: rejected > 0 ? 207 : 200, json: `{"data":[${data}],"meta":${meta}}` };
}

/** A single-event request as the pipeline's one candidate: its schema error, its draft errors, or its draft. */
export function singleCandidate(
  schemaError: Error | undefined,
  draft: () => ReturnType<typeof draftV1>,
  format: Exclude<Candidate, { ok: true }>['format'],
): Candidate {
  if (schemaError !== undefined) {
    return {
      ok: false,
      error: schemaError instanceof AppError ? schemaError : new AppError('validation_error', schemaError.message),
      format,
    };
  }
  const result = draft();
  return result.ok ? result : { ok: false, error: validationError(result.errors), format };
}

/** Single-event routes record only the items the tracking plan refused (governance.md §2), as received. */
export function singleRecord(route: string, body: unknown): NonNullable<AcceptOptions['record']> {
  return {
    route,
    planOnly: true,
    item: () => body,
    messageId: () => {
      const id = (body as { external_id?: unknown } | null)?.external_id;
      return typeof id === 'string' ? id.slice(0, 255) : null;
    },
  };
}
