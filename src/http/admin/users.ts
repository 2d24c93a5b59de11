// GET /admin/v1/products/{product_id}/users/{external_id} and …/users?identifier=kind:value — what an
// operator needs to debug an identity: the resolved user, its aliases, the merges that made it, and its
// most recent events.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { validationError } from '../../domain/errors.js';
import {
  EXTERNAL_ID_MAX_LENGTH,
  IDENTIFIER_KIND_MAX_LENGTH,
  IDENTIFIER_VALUE_MAX_LENGTH,
} from '../../domain/identity.js';
import type { Services } from '../../services.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { EventRecordSchema } from '../schemas/events.js';
import { UserCustomer, UserMerge } from '../schemas/identity.js';
import { USER_EVENTS_DEFAULT_LIMIT, USER_EVENTS_MAX_LIMIT, userDetailsResource } from '../../resources/identity.js';
import { productOf } from './context.js';

const EventsLimit = Type.Optional(
  Type.String({
    pattern: '^[0-9]{1,3}$',
    description: `How many recent events to include, 0–${USER_EVENTS_MAX_LIMIT} (default ${USER_EVENTS_DEFAULT_LIMIT})`,
    errorMessage: `must be a whole number from 0 to ${USER_EVENTS_MAX_LIMIT}`,
  }),
);

const UserDetails = dataEnvelope(
  Type.Composite([
    UserCustomer,
    Type.Object({
      identified: Type.Boolean({
        description:
          'Named by a native identify or a Segment identify with a userId (clarifications §18); false for an anonymous-only user',
      }),
      merges: Type.Array(UserMerge, {
        description: 'Merges into this user (directly or through a user merged into it), oldest first',
      }),
      events: Type.Array(Type.Ref(EventRecordSchema), {
        description: 'Most recent first; subject_type "user" and subject_id the external id or any alias',
      }),
    }),
  ]),
);

function eventsLimitOf(raw: string | undefined): number {
  const limit = raw === undefined ? USER_EVENTS_DEFAULT_LIMIT : Number(raw);
  if (limit > USER_EVENTS_MAX_LIMIT) {
    throw validationError([
      { pointer: '/events_limit', message: `query parameter events_limit must be at most ${USER_EVENTS_MAX_LIMIT}` },
    ]);
  }
  return limit;
}

export function adminUserRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  r.get(
    '/products/:product_id/users/:external_id',
    {
      schema: {
        summary: 'Look up a user by any of its external ids: aliases, merge history and recent events',
        params: Type.Object(
          {
            product_id: Type.String({ minLength: 1, maxLength: 64 }),
            external_id: Type.String({
              minLength: 1,
              maxLength: EXTERNAL_ID_MAX_LENGTH,
              description: 'Canonical or merged external id (URL-encoded)',
            }),
          },
          { additionalProperties: false },
        ),
        querystring: Type.Object({ events_limit: EventsLimit }, { additionalProperties: false }),
        response: {
          200: UserDetails,
          400: problemResponse('Invalid parameter'),
          404: problemResponse('No such product, or no user with this external id'),
        },
      },
    },
    async (request) => ({
      data: userDetailsResource(
        await services.identity.getUser(
          productOf(request).id,
          request.params.external_id,
          eventsLimitOf(request.query.events_limit),
        ),
      ),
    }),
  );

  // Clarifications §28: the console finds a user by an identifier too (by alias or anonymous id, the route above).
  r.get(
    '/products/:product_id/users',
    {
      schema: {
        summary: 'Look up a user by an identifier (kind:value): the same answer as the lookup by external id',
        querystring: Type.Object(
          {
            // Optional in the schema so that an unknown product is 404 before a missing identifier is 400.
            identifier: Type.Optional(
              Type.String({
                maxLength: IDENTIFIER_KIND_MAX_LENGTH + 1 + IDENTIFIER_VALUE_MAX_LENGTH,
                description:
                  'Required. kind:value, split at the first colon, e.g. email:ada@example.com (an email is compared trimmed and lower-cased, as stored)',
              }),
            ),
            events_limit: EventsLimit,
          },
          { additionalProperties: false },
        ),
        response: {
          200: UserDetails,
          400: problemResponse('Missing or invalid identifier'),
          404: problemResponse('No such product, or no user holds this identifier'),
        },
      },
    },
    async (request) => {
      const productId = productOf(request).id;
      const { identifier } = request.query;
      if (identifier === undefined)
        throw validationError([
          { pointer: '/identifier', message: 'query parameter identifier is required (kind:value)' },
        ]);
      return {
        data: userDetailsResource(
          await services.identity.getUserByIdentifier(productId, identifier, eventsLimitOf(request.query.events_limit)),
        ),
      };
    },
  );
}
