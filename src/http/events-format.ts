// What the single-event endpoints (v1 and v2) share: their documented responses, the request as the
// pipeline's candidate and record, the answer to a stored or replayed event, and the headers of legacy
// input. The record shape is in src/resources.
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { eventResource, type EventResource } from '../resources/events.js';
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

/**
 * A single event's outcome as the answer: 201 with the new event, 200 + `Idempotent-Replayed: true`
 * with the original one (contract §4), or the rejection thrown as the request's error.
 */
export function answerOutcome(
  reply: FastifyReply,
  outcome: ItemOutcome,
): { data: EventResource } | { data: null; meta: { dropped: true; step: number } } {
  if (outcome.status === 'rejected') throw outcome.error;
  if (outcome.status === 'dropped') {
    reply.code(200);
    return { data: null, meta: { dropped: true, step: outcome.step } };
  }
  if (outcome.status === 'duplicate') reply.header('idempotent-replayed', 'true').code(200);
  else reply.code(201);
  return { data: eventResource(outcome.event) };
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
