// POST /api/v2/events/batch — up to 1000 events, each validated and stored on its own (contract §4).
import type { FastifyInstance } from 'fastify';
import { AppError, validationError, type Problem } from '../../domain/errors.js';
import { draftV2, eventJsonBytes, type EventDraft, type V2EventInput } from '../../domain/events.js';
import type { NameFormat } from '../../domain/event-names.js';
import type { Services } from '../../services.js';
import { authOf, requireKey } from '../auth.js';
import { DEPRECATION_HEADERS, eventResource, type EventResource } from '../events-format.js';
import { BatchEnvelope, BatchRequest, BatchResponse, EventV2Request } from '../schemas/events.js';
import { problemResponse } from '../schemas/common.js';
import { compileSchema, schemaErrors } from '../validation.js';
import { checkLegacy } from './events-v2.js';

type ItemResult =
  | { index: number; status: 'created' | 'duplicate'; event: EventResource }
  | { index: number; status: 'rejected'; error: Problem };

export function eventsBatchRoute(app: FastifyInstance, services: Services): void {
  const envelopeCheck = compileSchema(BatchEnvelope);
  const { maxBatchEvents, maxEventBytes } = services.config;

  app.post(
    '/api/v2/events/batch',
    {
      onRequest: requireKey(services, 'events'),
      bodyLimit: services.config.maxBodyBytes,
      // The documented body schema describes each element; validation here only checks the envelope,
      // because a bad element must be rejected on its own while the rest are stored.
      validatorCompiler: ({ httpPart }) => (value: unknown) => {
        if (httpPart !== 'body') return { value };
        if (envelopeCheck.Check(value)) return { value };
        return { error: validationError(schemaErrors(BatchEnvelope, value)) };
      },
      schema: {
        tags: ['events'],
        summary: 'Ingest up to 1000 events in one request',
        description:
          'Not atomic: each element is validated and stored on its own. The answer lists one result per element, in request order: created (with the new event), duplicate (with the original event) or rejected (with a problem). 200 when nothing was rejected, 207 when at least one element was.',
        security: [{ eventsKey: [] }],
        body: BatchRequest,
        response: {
          200: { ...BatchResponse, description: 'Every element was stored or was a duplicate' },
          207: { ...BatchResponse, description: 'At least one element was rejected; the others were stored' },
          400: problemResponse('Invalid JSON or invalid envelope'),
          401: problemResponse('Missing or invalid key'),
          403: problemResponse('Not an events key'),
          413: problemResponse('More events or bytes than allowed'),
          415: problemResponse('Not JSON'),
          429: problemResponse('Rate limited'),
        },
      },
    },
    async (request, reply) => {
      const auth = authOf(request);
      const events = (request.body as { events: unknown[] }).events;
      if (events.length > maxBatchEvents) {
        throw new AppError('payload_too_large', `A batch holds at most ${maxBatchEvents} events; this one has ${events.length}.`);
      }
      const receivedAt = new Date().toISOString();
      const results: Array<ItemResult | undefined> = new Array(events.length);
      const formats: Array<NameFormat | 'unknown'> = new Array(events.length).fill('unknown');
      const drafts: EventDraft[] = [];
      const draftIndexes: number[] = [];
      let legacySeen = false;

      const reject = (index: number, error: AppError) => {
        results[index] = { index, status: 'rejected', error: error.toProblem(request.id) };
      };

      for (let index = 0; index < events.length; index++) {
        const element = events[index];
        const base = `/events/${index}`;
        // Schema and rules first: a valid event's size then comes from its properties, serialised once
        // for storage anyway (the body limit bounds the work on an oversized element).
        const errors = schemaErrors(EventV2Request, element, base);
        if (errors.length > 0) {
          reject(index, validationError(errors));
          continue;
        }
        const draft = draftV2(element as V2EventInput, receivedAt, base);
        if (!draft.ok) {
          reject(index, validationError(draft.errors));
          continue;
        }
        const bytes = eventJsonBytes(element as V2EventInput, draft.draft.propertiesJson);
        if (bytes > maxEventBytes) {
          reject(index, new AppError('payload_too_large', `Event ${index} is ${bytes} bytes of JSON; one event may be at most ${maxEventBytes}.`, { errors: [{ pointer: base, message: `larger than ${maxEventBytes} bytes` }] }));
          continue;
        }
        formats[index] = draft.draft.name.nameFormat;
        if (draft.draft.name.nameFormat === 'legacy') {
          legacySeen = true;
          try {
            checkLegacy(services, auth, draft.draft.name, receivedAt);
          } catch (error) {
            reject(index, error as AppError);
            continue;
          }
        }
        drafts.push(draft.draft);
        draftIndexes.push(index);
      }

      const outcomes = drafts.length > 0 ? await services.ingest.ingest(auth, drafts, receivedAt) : [];
      outcomes.forEach((outcome, i) => {
        const index = draftIndexes[i]!;
        results[index] = { index, status: outcome.status, event: eventResource(outcome.event) };
      });

      const meta = { created: 0, duplicates: 0, rejected: 0 };
      // Counted per (format, outcome) first: one metrics update per distinct pair, not one per element.
      const tally = new Map<string, { format: NameFormat | 'unknown'; outcome: ItemResult['status']; count: number }>();
      for (let index = 0; index < results.length; index++) {
        const result = results[index]!;
        if (result.status === 'created') meta.created++;
        else if (result.status === 'duplicate') meta.duplicates++;
        else meta.rejected++;
        const format = formats[index]!;
        const key = `${format}/${result.status}`;
        const entry = tally.get(key);
        if (entry === undefined) tally.set(key, { format, outcome: result.status, count: 1 });
        else entry.count++;
      }
      for (const { format, outcome, count } of tally.values()) services.metrics.events.inc({ endpoint: 'batch', format, outcome }, count);
      if (legacySeen) reply.headers(DEPRECATION_HEADERS);
      reply.code(meta.rejected > 0 ? 207 : 200);
      return { data: results, meta };
    },
  );
}
