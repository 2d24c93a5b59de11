// POST /api/v1/events — one of the five canonical lifecycle events (contract §4).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { draftV1 } from '../../domain/events.js';
import type { Services } from '../../services.js';
import { authOf, requireKey } from '../auth.js';
import { answerOutcome, singleCandidate, singleEventResponses, singleRecord } from '../events-format.js';
import { EventV1Request } from '../schemas/events.js';

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
        response: singleEventResponses(),
      },
    },
    async (request, reply) => {
      const receivedAt = new Date().toISOString();
      const candidate = singleCandidate(request.validationError, () => draftV1(request.body, receivedAt), 'v1');
      const { outcomes } = await services.ingest.accept(authOf(request), [candidate], {
        endpoint: 'v1',
        maxEventBytes: services.config.maxEventBytes,
        receivedAt,
        record: singleRecord('/api/v1/events', request.body),
      });
      return answerOutcome(reply, outcomes[0]!);
    },
  );
}
