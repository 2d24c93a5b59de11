// POST /api/v2/events — one event in preferred, unified or (deprecated) legacy flat naming.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { AppError, validationError } from '../../domain/errors.js';
import { draftV2 } from '../../domain/events.js';
import { preferredFormOf, type SplitName } from '../../domain/event-names.js';
import type { Services } from '../../services.js';
import type { AuthContext } from '../../services/key-service.js';
import { authOf, requireKey } from '../auth.js';
import { answerOutcome, DEPRECATION_HEADERS, singleEventResponses } from '../events-format.js';
import { EventV2Request } from '../schemas/events.js';
import { problemResponse } from '../schemas/common.js';

/** The 410 answer for legacy flat input once the operator has switched it off (contract §5). */
export function legacyRemovedError(name: SplitName): AppError {
  return new AppError(
    'legacy_format_removed',
    `Legacy flat event names were retired on 2026-09-01. Send ${preferredFormOf(name)} instead of {"event_type":"${name.canonicalName}"}.`,
    { extras: { preferred: { event_type: name.eventType, action: name.action } } },
  );
}

/** Counts legacy use and applies the operator's legacy policy; throws 410 when legacy input is off. */
export function checkLegacy(services: Services, auth: AuthContext, name: SplitName, at: string): void {
  if (name.nameFormat !== 'legacy') return;
  services.ingest.noteLegacyUse(auth, name.canonicalName, at);
  if (services.config.legacyFlat === 'reject') throw legacyRemovedError(name);
}

export function eventsV2Route(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/api/v2/events',
    {
      onRequest: requireKey(services, 'events'),
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
      if (request.validationError !== undefined) {
        services.metrics.events.inc({ endpoint: 'v2', format: 'unknown', outcome: 'rejected' });
        throw request.validationError;
      }
      const auth = authOf(request);
      const receivedAt = new Date().toISOString();
      const result = draftV2(request.body, receivedAt);
      if (!result.ok) {
        services.metrics.events.inc({ endpoint: 'v2', format: 'unknown', outcome: 'rejected' });
        throw validationError(result.errors);
      }
      const { name } = result.draft;
      if (name.nameFormat === 'legacy') reply.headers(DEPRECATION_HEADERS);
      try {
        checkLegacy(services, auth, name, receivedAt);
      } catch (error) {
        services.metrics.events.inc({ endpoint: 'v2', format: 'legacy', outcome: 'rejected' });
        throw error;
      }
      const [outcome] = await services.ingest.ingest(auth, [result.draft], receivedAt);
      services.metrics.events.inc({ endpoint: 'v2', format: name.nameFormat, outcome: outcome!.status });
      return answerOutcome(reply, outcome!);
    },
  );
}
