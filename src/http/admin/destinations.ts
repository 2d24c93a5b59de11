// Destinations (events-out §6): create, list, show, edit (pause / resume / re-enable), delete, replay,
// rotate the signing secret, and the delivery log. Semantics and validation live in
// services/destinations/; these routes state the shapes for OpenAPI.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { validationError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { deliveryResource, destinationResource } from '../../resources/destinations.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 500;

const Strings = Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { minItems: 1, maxItems: 100 });

const Filter = Type.Object(
  {
    types: Type.Optional(
      Type.Array(
        Type.Union([
          Type.Literal('event.created'),
          Type.Literal('user.identified'),
          Type.Literal('user.merged'),
          Type.Literal('user.erased'),
        ]),
        { minItems: 1 },
      ),
    ),
    canonical_names: Type.Optional({
      ...Strings,
      description: 'Only events with these canonical names (identity messages are not narrowed by it)',
    }),
    sources: Type.Optional({ ...Strings, description: 'Only events from these sources (api, segment, …)' }),
  },
  { additionalProperties: false, description: 'Which messages to deliver; all when absent' },
);

/** The body limit of a create and an edit: a transformation may hold 50 functions of up to 64 KiB. */
const BODY_LIMIT = 4 * 1024 * 1024;

const Transformation = Type.Object(
  {
    steps: Type.Array(Type.Object({}, { additionalProperties: true }), {
      description:
        "Ordered steps, the same as a product transformation's (docs/transformations.md): drop, sample, rename_event, set, remove, rename_property, mask, allow_properties, user_agent, bot, geoip, function",
    }),
  },
  {
    additionalProperties: true,
    description:
      "This destination's own transformation, applied to its copy of each message only; null in an edit removes it",
  },
);

const Batch = Type.Object(
  {
    max_messages: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000,
        description:
          'Messages per delivery: webhook and NATS 1–1000 (default 1: no batching); postgres up to 10,000 (default 1000); parquet up to 100,000 (default 100,000)',
      }),
    ),
    max_wait_ms: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 60_000,
        description: 'How long to wait for a fuller batch (default 0; postgres 5000; parquet 60000)',
      }),
    ),
  },
  { additionalProperties: false },
);

const Destination = Type.Object({
  id: Type.String(),
  product_id: Type.String(),
  type: Type.Union([Type.Literal('webhook'), Type.Literal('nats'), Type.Literal('postgres'), Type.Literal('parquet')]),
  name: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('paused'), Type.Literal('disabled')]),
  disabled_reason: Type.Union([Type.String(), Type.Null()]),
  url: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  servers: Type.Optional(Type.Array(Type.String())),
  subject: Type.Optional(Type.String()),
  schema: Type.Optional(Type.String({ description: 'postgres: the warehouse schema loaded into' })),
  columns_added: Type.Optional(
    Type.Integer({ description: 'postgres: columns its loads added to the tables (properties and traits)' }),
  ),
  type_widenings: Type.Optional(
    Type.Integer({ description: 'postgres: columns whose type its loads widened (bigint → double precision → text)' }),
  ),
  path: Type.Optional(Type.String({ description: 'parquet: the folder the files are written under' })),
  earlier_paths: Type.Optional(
    Type.Array(Type.String(), {
      description:
        'parquet: the folders `path` named before it was edited; their files stay there, and erasure rewrites them too',
    }),
  ),
  partition: Type.Optional(Type.Union([Type.Literal('hour'), Type.Literal('day')])),
  has_credentials: Type.Optional(Type.Boolean()),
  filter: Type.Object({
    types: Type.Optional(Type.Array(Type.String())),
    canonical_names: Type.Optional(Type.Array(Type.String())),
    sources: Type.Optional(Type.Array(Type.String())),
  }),
  batch: Type.Object({ max_messages: Type.Integer(), max_wait_ms: Type.Integer() }),
  cursor: Type.String({ description: 'Opaque: everything up to here was accepted (or passed over by the filter)' }),
  lag: Type.Integer({ description: 'Messages after the cursor (before the filter)' }),
  delivered: Type.Integer(),
  consecutive_failures: Type.Integer(),
  next_attempt_at: Type.Union([Type.String(), Type.Null()]),
  last_success_at: Type.Union([Type.String(), Type.Null()]),
  last_error: Type.Union([Type.String(), Type.Null()]),
  last_error_at: Type.Union([Type.String(), Type.Null()]),
  previous_secret_until: Type.Union([Type.String(), Type.Null()], {
    description: 'Until then the rotated-out secret signs too',
  }),
  warnings: Type.Array(Type.Object({ at: Type.String(), message: Type.String() }), {
    description:
      'The latest warnings, oldest first: a warehouse that reached a table or column limit; a step of its transformation that failed',
  }),
  transformation: Type.Union([Transformation, Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const WithSecret = Type.Intersect([
  Destination,
  Type.Object({
    secret: Type.Optional(Type.String({ description: 'The signing secret (whsec_…): in this answer only' })),
  }),
]);

const Delivery = Type.Object({
  id: Type.String(),
  attempted_at: Type.String(),
  attempt: Type.Integer({ description: '1 for the first try of these messages, then counting retries' }),
  webhook_id: Type.String(),
  message_ids: Type.Array(Type.String()),
  outcome: Type.Union([Type.Literal('success'), Type.Literal('failure')]),
  status: Type.Union([Type.Integer(), Type.Null()], {
    description: 'HTTP status, null for NATS or when there was no answer',
  }),
  error: Type.Union([Type.String(), Type.Null()]),
  duration_ms: Type.Integer(),
});

const DestinationParams = Type.Object(
  {
    product_id: Type.String({ minLength: 1, maxLength: 64 }),
    destination_id: Type.String({ minLength: 1, maxLength: 64 }),
  },
  { additionalProperties: false },
);

const CreateBody = Type.Object(
  {
    type: Type.Union([
      Type.Literal('webhook'),
      Type.Literal('nats'),
      Type.Literal('postgres'),
      Type.Literal('parquet'),
    ]),
    name: Type.String({ minLength: 1, maxLength: 200 }),
    filter: Type.Optional(Filter),
    batch: Type.Optional(Batch),
    start: Type.Optional(
      Type.String({
        description:
          '"now" (default), "beginning", or a cursor (a destination\'s, or meta.next_cursor of the event reads)',
      }),
    ),
    url: Type.Optional(
      Type.String({
        maxLength: 2000,
        description:
          'webhook: http(s) URL; postgres: the warehouse postgres:// URL (stored, never echoed); refused when it resolves to a private address unless INLET_OUTBOUND_ALLOW_PRIVATE',
      }),
    ),
    schema: Type.Optional(
      Type.String({
        maxLength: 63,
        description: 'postgres: the schema to load into (default inlet_ + the product id lowercased)',
      }),
    ),
    path: Type.Optional(
      Type.String({
        maxLength: 1000,
        description: 'parquet: a folder under INLET_FILE_DESTINATIONS_ROOT (relative to it, or absolute inside it)',
      }),
    ),
    partition: Type.Optional(
      Type.Union([Type.Literal('hour'), Type.Literal('day')], {
        description: 'parquet: files per hour (default) or per day of received_at (UTC)',
      }),
    ),
    servers: Type.Optional(
      Type.Array(Type.String({ maxLength: 300 }), {
        minItems: 1,
        maxItems: 20,
        description: 'nats: server URLs (nats://host:4222)',
      }),
    ),
    subject: Type.Optional(
      Type.String({
        maxLength: 255,
        description: 'nats: subject template with {product_id}, {canonical_name}, {type}',
      }),
    ),
    credentials: Type.Optional(
      Type.Object(
        { user: Type.Optional(Type.String()), pass: Type.Optional(Type.String()), token: Type.Optional(Type.String()) },
        { additionalProperties: false, description: 'nats: stored, never echoed' },
      ),
    ),
    transformation: Type.Optional(Type.Union([Transformation, Type.Null()])),
  },
  { additionalProperties: false },
);

const PatchBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    url: Type.Optional(
      Type.String({ maxLength: 2000, description: 'webhook; postgres: checked like at creation, never echoed' }),
    ),
    path: Type.Optional(
      Type.String({ maxLength: 1000, description: 'parquet: a folder under INLET_FILE_DESTINATIONS_ROOT' }),
    ),
    filter: Type.Optional(Filter),
    batch: Type.Optional(Batch),
    transformation: Type.Optional(Type.Union([Transformation, Type.Null()])),
    status: Type.Optional(
      Type.Union([Type.Literal('paused'), Type.Literal('active')], {
        description: 'paused; or active: resume, or re-enable a disabled destination (from its cursor)',
      }),
    ),
  },
  { additionalProperties: false },
);

export function adminDestinationRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const destinations = services.destinations;
  const notFound = problemResponse('No such product or destination');

  r.post(
    '/products/:product_id/destinations',
    {
      bodyLimit: BODY_LIMIT,
      schema: {
        summary:
          "Create a destination (webhook, NATS JetStream, PostgreSQL warehouse, Parquet files); a webhook's signing secret is in this answer only",
        body: CreateBody,
        response: {
          201: dataEnvelope(WithSecret),
          400: problemResponse(
            'Invalid body (a transformation step: `errors[].pointer` such as /transformation/steps/2/paths/0), or a URL refused by the outbound guard',
          ),
        },
      },
    },
    async (request, reply) => {
      const created = await destinations.create(productOf(request).id, request.body);
      reply.code(201);
      return {
        data: {
          ...destinationResource(created.destination),
          ...(created.secret === null ? {} : { secret: created.secret }),
        },
      };
    },
  );

  r.get(
    '/products/:product_id/destinations',
    {
      schema: {
        summary: "List a product's destinations with status, lag, last success and last error",
        response: { 200: dataEnvelope(Type.Array(Destination)) },
      },
    },
    async (request) => ({ data: (await destinations.list(productOf(request).id)).map(destinationResource) }),
  );

  r.get(
    '/products/:product_id/destinations/:destination_id',
    {
      schema: {
        summary: 'One destination: status, lag, last success, last error, failures, cursor',
        params: DestinationParams,
        response: { 200: dataEnvelope(Destination), 404: notFound },
      },
    },
    async (request) => ({
      data: destinationResource(await destinations.show(productOf(request).id, request.params.destination_id)),
    }),
  );

  r.patch(
    '/products/:product_id/destinations/:destination_id',
    {
      bodyLimit: BODY_LIMIT,
      schema: {
        summary:
          'Edit a destination: name, url, path, filter, batch, transformation (null removes it); status paused, or active to resume or re-enable',
        params: DestinationParams,
        body: PatchBody,
        response: { 200: dataEnvelope(Destination), 400: problemResponse('Invalid body'), 404: notFound },
      },
    },
    async (request) => ({
      data: destinationResource(
        await destinations.update(productOf(request).id, request.params.destination_id, request.body),
      ),
    }),
  );

  r.delete(
    '/products/:product_id/destinations/:destination_id',
    {
      schema: {
        summary: 'Delete a destination and its delivery log',
        params: DestinationParams,
        response: { 204: Type.Null({ description: 'Deleted' }), 404: notFound },
      },
    },
    async (request, reply) => {
      await destinations.delete(productOf(request).id, request.params.destination_id);
      reply.code(204);
      return null;
    },
  );

  destinationDeliveryRoutes(app, services);
}

/** The routes of a destination's delivery: replay, the signing secret, the delivery log. */
function destinationDeliveryRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const destinations = services.destinations;
  const notFound = problemResponse('No such product or destination');

  r.post(
    '/products/:product_id/destinations/:destination_id/replay',
    {
      schema: {
        summary: 'Move the cursor: re-deliver from a cursor or from a received time (RFC 3339)',
        params: DestinationParams,
        body: Type.Object(
          {
            from: Type.String({
              minLength: 1,
              maxLength: 300,
              description: 'A cursor, "beginning", or an RFC 3339 received time',
            }),
          },
          { additionalProperties: false },
        ),
        response: { 200: dataEnvelope(Destination), 400: problemResponse('Invalid from'), 404: notFound },
      },
    },
    async (request) => ({
      data: destinationResource(
        await destinations.replay(productOf(request).id, request.params.destination_id, request.body.from),
      ),
    }),
  );

  r.post(
    '/products/:product_id/destinations/:destination_id/rotate_secret',
    {
      schema: {
        summary: 'New signing secret (in this answer only); for 24 h both signatures are sent',
        params: DestinationParams,
        response: { 200: dataEnvelope(WithSecret), 400: problemResponse('Not a webhook destination'), 404: notFound },
      },
    },
    async (request) => {
      const rotated = await destinations.rotateSecret(productOf(request).id, request.params.destination_id);
      return { data: { ...destinationResource(rotated.destination), secret: rotated.secret } };
    },
  );

  r.get(
    '/products/:product_id/destinations/:destination_id/deliveries',
    {
      schema: {
        summary: 'The delivery log, newest first, paged (kept INLET_DESTINATION_LOG_RETENTION_DAYS)',
        params: DestinationParams,
        querystring: Type.Object(
          {
            limit: Type.Optional(Type.String({ description: `1–${MAX_LIMIT}, default ${DEFAULT_LIMIT}` })),
            cursor: Type.Optional(Type.String({ description: 'meta.next_cursor of the previous page' })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            data: Type.Array(Delivery),
            meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]) }),
          }),
          400: problemResponse('Invalid limit or cursor'),
          404: notFound,
        },
      },
    },
    async (request) => {
      const q = request.query;
      const limit = q.limit === undefined ? DEFAULT_LIMIT : Number(q.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT)
        throw validationError([
          { pointer: '/limit', message: `query parameter limit must be a whole number from 1 to ${MAX_LIMIT}` },
        ]);
      let before: string | undefined;
      if (q.cursor !== undefined) {
        before = Buffer.from(q.cursor, 'base64url').toString('utf8');
        if (!/^[0-9a-f-]{36}$/.test(before))
          throw validationError([
            { pointer: '/cursor', message: 'query parameter cursor is not one this API gave out' },
          ]);
      }
      const rows = await destinations.deliveries(
        productOf(request).id,
        request.params.destination_id,
        limit + 1,
        before,
      );
      const page = rows.slice(0, limit);
      const next = rows.length > limit ? Buffer.from(page.at(-1)!.id).toString('base64url') : null;
      return { data: page.map(deliveryResource), meta: { next_cursor: next } };
    },
  );
}
