// POST /api/v2/identify — create or update a user_customer (contract §6).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { authOf } from '../auth.js';
import { requireIngestKey } from '../browser-keys.js';
import { dataEnvelope, keyedWriteErrors, problemResponse } from '../schemas/common.js';
import { IdentifyRequest, UserCustomer } from '../schemas/identity.js';
import { userResource } from '../../resources/identity.js';

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
          200: dataEnvelope(UserCustomer, 'User updated'),
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
      // A public key must not claim identifiers: anyone could squat another person's e-mail (clarifications §19).
      if (
        auth.kind === 'browser' &&
        request.body.identifiers !== undefined &&
        Object.keys(request.body.identifiers).length > 0
      ) {
        throw new AppError(
          'forbidden',
          'A browser key cannot set identifiers ("identifiers"): send them from your server with an events key; traits are fine.',
          {
            errors: [{ pointer: '/identifiers', message: 'not allowed with a browser key' }],
          },
        );
      }
      // Erasure (governance.md §3): a suppressed id is refused before anything of it is kept.
      await services.erasure.refuseSuppressed(auth, [request.body.external_id], '/api/v2/identify');
      const receivedAt = new Date().toISOString();
      // The tracking plan's `traits` schema (governance.md §2): 400 tracking_plan_violation in enforce.
      await services.ingest.checkIdentify(
        auth,
        request.body.traits,
        request.body.external_id,
        request.body,
        '/api/v2/identify',
        receivedAt,
      );
      const { created, user } = await services.identity.identify(auth.productId, request.body);
      services.ingest.observeTraits(auth, request.body.traits, receivedAt);
      reply.code(created ? 201 : 200);
      return { data: userResource(user) };
    },
  );
}
