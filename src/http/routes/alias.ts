// POST /api/v2/alias — merge two identities (contract §6).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services.js';
import { authOf } from '../auth.js';
import { requireIngestKey } from '../browser-keys.js';
import { dataEnvelope, keyedWriteErrors, problemResponse } from '../schemas/common.js';
import { AliasRequest, UserCustomer } from '../schemas/identity.js';
import { userResource } from '../../resources/identity.js';
import { IDENTITY_BODY_LIMIT } from './identify.js';

export function aliasRoute(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/api/v2/alias',
    {
      onRequest: requireIngestKey(services),
      bodyLimit: IDENTITY_BODY_LIMIT,
      schema: {
        tags: ['identity'],
        summary: 'Merge one identity into another',
        description:
          "Merges the user `from_external_id` resolves to into the user `to_external_id` resolves to (created empty if unknown): identifiers are united, the target's traits win and the source's fill the gaps, and `from` with all its aliases becomes an alias of the target. Idempotent: if both already resolve to one user, nothing changes. Chains resolve transitively.",
        security: [{ eventsKey: [] }],
        body: AliasRequest,
        response: {
          200: dataEnvelope(UserCustomer, 'The user both ids resolve to now'),
          ...keyedWriteErrors({
            400: 'Invalid JSON or invalid field, or from and to are equal',
            413: 'Body too large',
          }),
          409: problemResponse(
            'alias_conflict (`from_external_id`, `merged_into`, `to_external_id`): from is already merged into another user; or identifier_conflict (`conflicts`): both users hold different values of one identifier kind; or subject_suppressed: an id belongs to an erased person',
          ),
        },
      },
    },
    async (request) => {
      const { body } = request;
      const { user } = await services.identity.apply(
        authOf(request),
        { kind: 'alias', from: body.from_external_id, to: body.to_external_id },
        { route: '/api/v2/alias', receivedAt: new Date().toISOString(), item: body },
      );
      return { data: userResource(user) };
    },
  );
}
