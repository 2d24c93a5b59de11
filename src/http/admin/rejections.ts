// GET /admin/v1/products/{id}/rejections — what clients sent that was not stored (or stored with a
// failed identity side effect), newest first, paged (segment-compat "Bodies").
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services.js';
import { rejectionResource } from '../../resources/rejections.js';
import { problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';
import { idPage, idPageParameters, idPageQuery } from './paging.js';

const Rejection = Type.Object({
  id: Type.String(),
  received_at: Type.String(),
  key_id: Type.Union([Type.String(), Type.Null()]),
  route: Type.String(),
  index: Type.Integer({ description: 'Position of the item in its request' }),
  message_id: Type.Union([Type.String(), Type.Null()]),
  code: Type.String({
    description:
      'missing_identity, invalid_timestamp, invalid_event_name, identified_merge_forbidden, payload_too_large, validation_error, legacy_format_removed, subject_suppressed (recorded without the item and message id); warning: identity_conflict',
  }),
  detail: Type.String(),
  severity: Type.Union([Type.Literal('rejected'), Type.Literal('warning')]),
  item: Type.Unknown({
    description: 'The item as received (at most 32 KiB of its JSON; a longer one is returned as its truncated text)',
  }),
});

const Query = Type.Object(
  {
    limit: idPageParameters.limit,
    cursor: idPageParameters.cursor,
    code: Type.Optional(Type.String({ maxLength: 64 })),
    key_id: Type.Optional(Type.String({ maxLength: 64 })),
    severity: Type.Optional(Type.Union([Type.Literal('rejected'), Type.Literal('warning')])),
    received_from: idPageParameters.received_from,
    received_to: idPageParameters.received_to,
  },
  { additionalProperties: false },
);

export function adminRejectionRoutes(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/products/:product_id/rejections',
    {
      schema: {
        summary: 'Rejected items and warnings of a product, newest first (SDKs never read answers: look here)',
        querystring: Query,
        response: {
          200: Type.Object({
            data: Type.Array(Rejection),
            meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]) }),
          }),
          400: problemResponse('Invalid filter'),
        },
      },
    },
    async (request) => {
      const q = request.query;
      const { limit, ...paging } = idPageQuery(q);
      const rows = await services.rejections.list(productOf(request).id, {
        ...paging,
        limit: limit + 1,
        code: q.code,
        keyId: q.key_id,
        severity: q.severity,
      });
      const { page, nextCursor } = idPage(rows, limit);
      return { data: page.map(rejectionResource), meta: { next_cursor: nextCursor } };
    },
  );
}
