// POST /api/v2/identify — create or update a user_customer (contract §6).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services.js';
import { authOf } from '../auth.js';
import { requireIngestKey } from '../browser-keys.js';
import { dataEnvelope, keyedWriteErrors, problemResponse } from '../schemas/common.js';
import { IdentifyRequest, UserCustomer } from '../schemas/identity.js';
import { userResource } from '../../resources/identity.js';
import { Type } from '@sinclair/typebox';

/** Room for 32 KiB of traits plus 20 identifiers, with JSON escaping; anything larger is 413. */
export const IDENTITY_BODY_LIMIT = 128 * 1024;

export function identifyRoute(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/api/v2/identify',
    {
      onRequest: requireIngestKey(services),
      bodyLimit: IDENTITY_BODY_LIMIT,
      schema: {
        tags: ['identity'],
        summary: 'Create or update a user',
        description:
          'Upserts the user with this external_id (or the user it was merged into). Traits are shallow-merged (null removes a trait); identifiers are set per kind (null removes the kind). If any identifier belongs to another user, nothing changes and the answer is 409 identifier_conflict with `conflicts`.',
        security: [{ eventsKey: [] }],
        body: IdentifyRequest,
        response: {
          201: dataEnvelope(UserCustomer, 'User created'),
          200: Type.Union(
            [
              dataEnvelope(UserCustomer),
              Type.Object({
                data: Type.Null(),
                meta: Type.Object({ dropped: Type.Literal(true), step: Type.Integer() }),
              }),
            ],
            { description: "User updated; or dropped by the product's transformation (`data` null, `meta.step`)" },
          ),
          422: problemResponse(
            "transformation_error: a step of the product's transformation failed on the traits; `step` and `kind` name it",
          ),
          ...keyedWriteErrors({
            400: "Invalid JSON or invalid field; tracking_plan_violation: the traits break the product's tracking plan in enforce (`errors[].pointer` such as /traits/email)",
            413: 'Body too large',
          }),
          409: problemResponse(
            'identifier_conflict: an identifier belongs to another user; `conflicts: [{ kind, value, external_id }]`; subject_suppressed: the id belongs to an erased person',
          ),
        },
      },
    },
    async (request, reply) => {
      const auth = authOf(request);
      const { body } = request;
      // Suppression, the product's transformation, the plan and the change, in the order of transformations.md §1.
      const result = await services.identity.apply(
        auth,
        { kind: 'identify', externalId: body.external_id, identifiers: body.identifiers, traits: body.traits },
        { route: '/api/v2/identify', receivedAt: new Date().toISOString(), item: body },
      );
      if ('dropped' in result) {
        reply.code(200);
        return { data: null, meta: { dropped: true as const, step: result.step } };
      }
      reply.code(result.created ? 201 : 200);
      return { data: userResource(result.user) };
    },
  );
}
