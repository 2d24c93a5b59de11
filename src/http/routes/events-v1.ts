// POST /api/v1/events — one of the five canonical lifecycle events (contract §4).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { draftV1 } from '../../domain/events.js';
import { validationError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { authOf, requireKey } from '../auth.js';
import { eventResource } from '../events-format.js';
import { EventRecordSchema, EventV1Request } from '../schemas/events.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';

export function eventsV1Route(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/api/v1/events',
    {
      onRequest: requireKey(services, 'events'),
      bodyLimit: services.config.maxEventBytes,
      // Validation failures reach the handler, so that they are counted as rejected events too.
      attachValidation: true,
      schema: {
        tags: ['events'],
        summary: 'Ingest one canonical lifecycle event',
        description:
          'Accepts only user_signed_up, user_active, session_start, session_end and user_deleted. The flat name is split at the first underscore; canonical_name keeps the flat value.',
        security: [{ eventsKey: [] }],
        body: EventV1Request,
        response: {
          201: dataEnvelope(Type.Ref(EventRecordSchema), 'Stored'),
          200: dataEnvelope(Type.Ref(EventRecordSchema), 'Already stored under this external_id: the original event (Idempotent-Replayed: true)'),
          400: problemResponse('Invalid JSON or invalid event'),
          401: problemResponse('Missing or invalid key'),
          403: problemResponse('Not an events key'),
          413: problemResponse('Event larger than the per-event limit'),
          415: problemResponse('Not JSON'),
          429: problemResponse('Rate limited'),
        },
      },
    },
    async (request, reply) => {
      if (request.validationError !== undefined) {
        services.metrics.events.inc({ endpoint: 'v1', format: 'v1', outcome: 'rejected' });
        throw request.validationError;
      }
      const auth = authOf(request);
      const receivedAt = new Date().toISOString();
      const result = draftV1(request.body, receivedAt);
      if (!result.ok) {
        services.metrics.events.inc({ endpoint: 'v1', format: 'v1', outcome: 'rejected' });
        throw validationError(result.errors);
      }
      const [outcome] = await services.ingest.ingest(auth, [result.draft], receivedAt);
      services.metrics.events.inc({ endpoint: 'v1', format: 'v1', outcome: outcome!.status });
      if (outcome!.status === 'duplicate') reply.header('idempotent-replayed', 'true').code(200);
      else reply.code(201);
      return { data: eventResource(outcome!.event) };
    },
  );
}
