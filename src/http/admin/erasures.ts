// Erasure of a person, suppressions and retention settings (governance.md §3–4) in the admin API:
// POST/GET …/erasures, GET …/erasures/{id}, GET/DELETE …/suppressions, PATCH /products/{id}.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { validationError } from '../../domain/errors.js';
import { EXTERNAL_ID_MAX_LENGTH } from '../../domain/identity.js';
import type { Services } from '../../services.js';
import { productResource } from '../../resources/admin.js';
import { erasureResource, suppressionResource } from '../../resources/erasure.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';
import { pageLimit } from './paging.js';
import { Product } from './products.js';

const Counts = Type.Object({
  ids: Type.Integer({ description: 'External ids linked to the person (requested id, aliases, anonymous ids)' }),
  events: Type.Integer(),
  identifiers: Type.Integer(),
  traits: Type.Integer({ description: 'Trait keys of the deleted user' }),
  merges: Type.Integer(),
  identity_messages: Type.Integer(),
  rejections: Type.Integer({ description: 'Rejections and warnings' }),
  violations: Type.Integer(),
});

const Erasure = Type.Object({
  id: Type.String(),
  status: Type.Union([Type.Literal('pending'), Type.Literal('running'), Type.Literal('done'), Type.Literal('failed')]),
  phase: Type.String({ description: 'events, identity, records, finish, done' }),
  reason: Type.Union([Type.String(), Type.Null()]),
  external_id_hmac: Type.String({
    description:
      'HMAC-SHA256 of product_id NUL external_id under the installation secret: the audit never holds the id',
  }),
  requested_at: Type.String(),
  started_at: Type.Union([Type.String(), Type.Null()]),
  finished_at: Type.Union([Type.String(), Type.Null()]),
  counts: Counts,
  error: Type.Union([Type.String(), Type.Null()]),
});

const Suppression = Type.Object({
  id: Type.String(),
  external_id_hmac: Type.String(),
  erasure_id: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
});

const ProductParams = { product_id: Type.String({ minLength: 1, maxLength: 64 }) };

const ListQuery = Type.Object(
  {
    limit: Type.Optional(Type.String({ description: '1–500, default 50' })),
    cursor: Type.Optional(Type.String({ description: 'meta.next_cursor of the previous page' })),
    external_id: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: EXTERNAL_ID_MAX_LENGTH,
        description: 'Only the rows of this id (matched by its HMAC; the id is not stored)',
      }),
    ),
  },
  { additionalProperties: false },
);

const Page = <T extends ReturnType<typeof Type.Object>>(item: T) =>
  Type.Object({ data: Type.Array(item), meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]) }) });

function pageQuery(query: { limit?: string | undefined; cursor?: string | undefined }, prefix: 'era' | 'sup') {
  const limit = pageLimit(query.limit);
  let beforeId: string | undefined;
  if (query.cursor !== undefined) {
    beforeId = Buffer.from(query.cursor, 'base64url').toString('utf8');
    if (!new RegExp(`^${prefix}_[0-9a-f]{32}$`).test(beforeId))
      throw validationError([{ pointer: '/cursor', message: 'query parameter cursor is not one this API gave out' }]);
  }
  return { limit, beforeId };
}

function page<T extends { id: string }>(rows: T[], limit: number): { page: T[]; nextCursor: string | null } {
  const slice = rows.slice(0, limit);
  return { page: slice, nextCursor: rows.length > limit ? Buffer.from(slice.at(-1)!.id).toString('base64url') : null };
}

export function adminErasureRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();

  r.post(
    '/products/:product_id/erasures',
    {
      schema: {
        summary: 'Erase a person: suppress every id linked to them, then delete their data (a job)',
        description:
          'Resolves the person from the id (aliases, anonymous ids), suppresses every linked id (from this answer on, ingest refuses their items with subject_suppressed), queues the deletion of their events, identity, rejections, violations and identity messages, and sends `user.erased` to destinations. Answers 202 once every instance refuses the ids (INLET_SUPPRESSION_REFRESH_MS after the commit). An id that resolves to nobody is suppressed too (counts zero). See docs/privacy.md.',
        body: Type.Object(
          {
            external_id: Type.String({
              minLength: 1,
              maxLength: EXTERNAL_ID_MAX_LENGTH,
              description: 'Any external id of the person: canonical, alias or anonymous',
            }),
            reason: Type.Optional(
              Type.Union([
                Type.String({ maxLength: 500, description: 'Kept in the audit: write no personal data here' }),
                Type.Null(),
              ]),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          202: dataEnvelope(Erasure, 'The job, queued'),
          400: problemResponse('Invalid body (the pointer names the field)'),
        },
      },
    },
    async (request, reply) => {
      const job = await services.erasure.request(
        productOf(request).id,
        request.body.external_id,
        request.body.reason ?? null,
      );
      reply.code(202);
      return { data: erasureResource(job) };
    },
  );

  r.get(
    '/products/:product_id/erasures',
    {
      schema: {
        summary: 'Erasure jobs of a product, newest first (the audit: HMACs, counts, times, reasons; never the ids)',
        querystring: ListQuery,
        response: { 200: Page(Erasure), 400: problemResponse('Invalid query') },
      },
    },
    async (request) => {
      const { limit, beforeId } = pageQuery(request.query, 'era');
      const rows = await services.erasure.list(productOf(request).id, {
        limit: limit + 1,
        beforeId,
        externalId: request.query.external_id,
      });
      const { page: slice, nextCursor } = page(rows, limit);
      return { data: slice.map(erasureResource), meta: { next_cursor: nextCursor } };
    },
  );

  r.get(
    '/products/:product_id/erasures/:erasure_id',
    {
      schema: {
        summary: 'One erasure job: status, phase and counts so far',
        params: Type.Object(
          { ...ProductParams, erasure_id: Type.String({ minLength: 1, maxLength: 64 }) },
          { additionalProperties: false },
        ),
        response: { 200: dataEnvelope(Erasure), 404: problemResponse('No such product or erasure') },
      },
    },
    async (request) => ({
      data: erasureResource(await services.erasure.get(productOf(request).id, request.params.erasure_id)),
    }),
  );

  suppressionAndRetentionRoutes(app, services);
}

/** Suppressions (lifted here), and the product's retention of events. */
function suppressionAndRetentionRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();

  r.get(
    '/products/:product_id/suppressions',
    {
      schema: {
        summary: 'Suppressed ids of a product (as HMACs), newest first; they last until lifted',
        querystring: ListQuery,
        response: { 200: Page(Suppression), 400: problemResponse('Invalid query') },
      },
    },
    async (request) => {
      const { limit, beforeId } = pageQuery(request.query, 'sup');
      const rows = await services.erasure.suppressions(productOf(request).id, {
        limit: limit + 1,
        beforeId,
        externalId: request.query.external_id,
      });
      const { page: slice, nextCursor } = page(rows, limit);
      return { data: slice.map(suppressionResource), meta: { next_cursor: nextCursor } };
    },
  );

  r.delete(
    '/products/:product_id/suppressions/:suppression_id',
    {
      schema: {
        summary:
          'Lift a suppression: items for that id are accepted again (within INLET_SUPPRESSION_REFRESH_MS on every instance)',
        params: Type.Object(
          { ...ProductParams, suppression_id: Type.String({ minLength: 1, maxLength: 64 }) },
          { additionalProperties: false },
        ),
        response: { 204: Type.Null({ description: 'Lifted' }), 404: problemResponse('No such product or suppression') },
      },
    },
    async (request, reply) => {
      await services.erasure.lift(productOf(request).id, request.params.suppression_id);
      reply.code(204);
      return null;
    },
  );

  r.patch(
    '/products/:product_id',
    {
      schema: {
        summary: "Change a product's settings: retention of events",
        body: Type.Object(
          {
            retention: Type.Object(
              {
                events_days: Type.Union([Type.Integer({ minimum: 1, maximum: 36_500 }), Type.Null()], {
                  description:
                    'Events whose received_at is older are deleted in the background; null keeps them forever',
                }),
              },
              { additionalProperties: false },
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: dataEnvelope(Product), 400: problemResponse('Invalid body (the pointer names the field)') },
      },
    },
    async (request) => ({
      data: productResource(
        await services.retention.setEventsDays(productOf(request).id, request.body.retention.events_days),
      ),
    }),
  );
}
