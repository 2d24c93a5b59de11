// POST /api/v2/events — one event in preferred, unified or (deprecated) legacy flat naming.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { draftV2 } from '../../domain/events.js';
import type { Services } from '../../services.js';
import { authOf } from '../auth.js';
import { requireIngestKey } from '../browser-keys.js';
import {
  answerOutcome,
  DEPRECATION_HEADERS,
  singleCandidate,
  singleEventResponses,
  singleRecord,
} from '../events-format.js';
import { EventV2Request } from '../schemas/events.js';
import { problemResponse } from '../schemas/common.js';

export function eventsV2Route(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/api/v2/events',
    {
      onRequest: requireIngestKey(services),
      bodyLimit: services.config.maxEventBytes,
      // Validation failures reach the handler, so that they are counted as rejected events too.
      attachValidation: true,
      schema: {
        tags: ['events'],
        summary: 'Ingest one event',
        description:
          'Name the event in the preferred format (`event_type` + `action`) or the unified format (`event`, split at the first ".", ":" or "_"). A lone flat `event_type` is the deprecated legacy format: accepted with `Deprecation: true` and `Sunset: 2026-09-01`, or refused with 410 when the operator has switched it off.',
        security: [{ eventsKey: [] }],
        body: EventV2Request,
        response: singleEventResponses({ 410: problemResponse('Legacy flat input switched off by the operator') }),
      },
    },
    async (request, reply) => {
      const receivedAt = new Date().toISOString();
      const candidate = singleCandidate(request.validationError, () => draftV2(request.body, receivedAt), 'unknown');
      const { outcomes, legacySeen } = await services.ingest.accept(authOf(request), [candidate], {
        endpoint: 'v2',
        maxEventBytes: services.config.maxEventBytes,
        receivedAt,
        record: singleRecord('/api/v2/events', request.body),
      });
      if (legacySeen) reply.headers(DEPRECATION_HEADERS);
      return answerOutcome(reply, outcomes[0]!);
    },
  );
}
