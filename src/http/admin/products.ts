// Admin API for products, API keys and legacy usage (contract §1, §5). Enabled only with INLET_ADMIN_TOKEN.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { validationError } from '../../domain/errors.js';
import { RFC3339_PATTERN_SOURCE } from '../../domain/timestamps.js';
import type { Services } from '../../services.js';
import { KEY_KINDS, parseExpiry } from '../../domain/api-keys.js';
import { apiKeyResource, productResource } from '../../resources/admin.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';

const KeyKindSchema = Type.Union(KEY_KINDS.map((k) => Type.Literal(k)));
const AllowedOrigins = Type.Optional(Type.Array(Type.String(), { description: 'browser keys only' }));

export const Product = Type.Object({
  id: Type.String(),
  name: Type.String(),
  created_at: Type.String(),
  retention: Type.Object(
    {
      events_days: Type.Union([Type.Integer(), Type.Null()], {
        description: 'Events received longer ago than this are deleted in the background; null keeps them forever',
      }),
    },
    { description: 'governance.md §4' },
  ),
});

const ApiKey = Type.Object(
  {
    id: Type.String(),
    product_id: Type.String(),
    kind: KeyKindSchema,
    prefix: Type.String({ description: 'First characters of the key, to recognise it' }),
    name: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.String(),
    expires_at: Type.Union([Type.String(), Type.Null()]),
    revoked_at: Type.Union([Type.String(), Type.Null()]),
    last_used_at: Type.Union([Type.String(), Type.Null()], { description: 'Updated at most once a minute' }),
    allowed_origins: AllowedOrigins,
  },
  {},
);

const CreatedApiKey = Type.Object({
  id: Type.String(),
  product_id: Type.String(),
  kind: KeyKindSchema,
  key: Type.String({ description: 'The secret. Shown only in this response: store it now.' }),
  prefix: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  expires_at: Type.Union([Type.String(), Type.Null()]),
  allowed_origins: AllowedOrigins,
});

export function adminProductRoutes(app: FastifyInstance, services: Services): void {
  productRoutes(app, services);
  apiKeyRoutes(app, services);
  legacyUsageRoutes(app, services);
}

/** Products: create, list. */
function productRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();

  r.post(
    '/products',
    {
      schema: {
        summary: 'Create a product',
        body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false }),
        response: { 201: dataEnvelope(Product), 400: problemResponse('Invalid body') },
      },
    },
    async (request, reply) => {
      const name = request.body.name.trim();
      if (name.length === 0) throw validationError([{ pointer: '/name', message: 'must not be blank' }]);
      reply.code(201);
      return { data: productResource(await services.keys.createProduct(name)) };
    },
  );

  r.get(
    '/products',
    { schema: { summary: 'List products', response: { 200: dataEnvelope(Type.Array(Product)) } } },
    async () => ({ data: (await services.keys.listProducts()).map(productResource) }),
  );
}

/** A product's API keys: create, list, revoke, change a browser key's origins. */
function apiKeyRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();

  r.post(
    '/products/:product_id/keys',
    {
      schema: {
        summary: 'Create an API key (the secret is in this response only)',
        body: Type.Object(
          {
            kind: Type.Union(
              KEY_KINDS.map((k) => Type.Literal(k)),
              {
                description:
                  'events: write events and identities (secret, servers); reports: read traffic reports; browser: publishable, ingest only, from its allowed origins',
              },
            ),
            allowed_origins: Type.Optional(
              Type.Array(Type.String({ maxLength: 300 }), {
                maxItems: 100,
                description: 'browser keys only, required: exact scheme://host[:port] or https://*.example.com',
              }),
            ),
            name: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 200 }), Type.Null()])),
            expires_at: Type.Optional(Type.Union([Type.String({ pattern: RFC3339_PATTERN_SOURCE }), Type.Null()])),
          },
          { additionalProperties: false },
        ),
        response: { 201: dataEnvelope(CreatedApiKey), 400: problemResponse('Invalid body') },
      },
    },
    async (request, reply) => {
      const expiresAt = parseExpiry(request.body.expires_at);
      const created = await services.keys.createKey(productOf(request).id, {
        kind: request.body.kind,
        name: request.body.name ?? null,
        expiresAt,
        allowedOrigins: request.body.allowed_origins,
      });
      reply.code(201);
      const resource = apiKeyResource(created.record);
      return {
        data: {
          id: resource.id,
          product_id: resource.product_id,
          kind: resource.kind,
          key: created.key,
          prefix: resource.prefix,
          name: resource.name,
          created_at: resource.created_at,
          expires_at: resource.expires_at,
          ...(resource.allowed_origins === undefined ? {} : { allowed_origins: resource.allowed_origins }),
        },
      };
    },
  );

  r.get(
    '/products/:product_id/keys',
    {
      schema: {
        summary: "List a product's API keys (never the secrets)",
        response: { 200: dataEnvelope(Type.Array(ApiKey)) },
      },
    },
    async (request) => ({ data: (await services.keys.listKeys(productOf(request).id)).map(apiKeyResource) }),
  );

  r.delete(
    '/keys/:key_id',
    {
      schema: {
        summary: 'Revoke an API key (it stops working at once)',
        params: Type.Object({ key_id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false }),
        response: { 204: Type.Null({ description: 'Revoked' }), 404: problemResponse('No such key') },
      },
    },
    async (request, reply) => {
      await services.keys.revokeKey(request.params.key_id);
      reply.code(204);
      return null;
    },
  );

  r.patch(
    '/keys/:key_id',
    {
      schema: {
        summary: "Change a browser key's allowed origins",
        params: Type.Object({ key_id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false }),
        body: Type.Object(
          { allowed_origins: Type.Array(Type.String({ maxLength: 300 }), { maxItems: 100 }) },
          { additionalProperties: false },
        ),
        response: {
          200: dataEnvelope(ApiKey),
          400: problemResponse('Invalid origins, or not a browser key'),
          404: problemResponse('No such key'),
        },
      },
    },
    async (request) => ({
      data: apiKeyResource(await services.keys.setAllowedOrigins(request.params.key_id, request.body.allowed_origins)),
    }),
  );
}

/** Who still sends legacy flat names (contract §4). */
function legacyUsageRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();

  r.get(
    '/products/:product_id/legacy_usage',
    {
      schema: {
        summary: 'Who still sends legacy flat event names: count, first and last seen, per key and name',
        response: {
          200: dataEnvelope(
            Type.Array(
              Type.Object({
                key_id: Type.String(),
                key_prefix: Type.Union([Type.String(), Type.Null()]),
                key_name: Type.Union([Type.String(), Type.Null()]),
                event_name: Type.String(),
                count: Type.Integer(),
                first_seen_at: Type.String(),
                last_seen_at: Type.String(),
              }),
            ),
          ),
        },
      },
    },
    async (request) => {
      const usage = await services.ingest.legacyUsage(productOf(request).id);
      return {
        data: usage.map((u) => ({
          key_id: u.apiKeyId,
          key_prefix: u.keyPrefix,
          key_name: u.keyName,
          event_name: u.eventName,
          count: u.count,
          first_seen_at: u.firstSeenAt,
          last_seen_at: u.lastSeenAt,
        })),
      };
    },
  );
}
