// GET /admin/v1/products/{id}/rejections — what clients sent that was not stored (or stored with a
// failed identity side effect), newest first, paged (segment-compat "Bodies").
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { validationError } from '../../domain/errors.js';
import { parseRfc3339 } from '../../domain/timestamps.js';
import type { Services } from '../../services.js';
import { rejectionResource } from '../../resources/rejections.js';
import { problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 500;

const Rejection = Type.Object({
  id: Type.String(),
  received_at: Type.String(),
  key_id: Type.Union([Type.String(), Type.Null()]),
  route: Type.String(),
  index: Type.Integer({ description: 'Position of the item in its request' }),
  message_id: Type.Union([Type.String(), Type.Null()]),
  code: Type.String({ description: 'missing_identity, invalid_timestamp, invalid_event_name, identified_merge_forbidden, payload_too_large, validation_error, legacy_format_removed; warning: identity_conflict' }),
  detail: Type.String(),
  severity: Type.Union([Type.Literal('rejected'), Type.Literal('warning')]),
  item: Type.Unknown({ description: 'The item as received (at most 32 KiB of its JSON; a longer one is returned as its truncated text)' }),
});

const Query = Type.Object(
  {
    limit: Type.Optional(Type.String({ description: `1–${MAX_LIMIT}, default ${DEFAULT_LIMIT}` })),
    cursor: Type.Optional(Type.String({ description: 'meta.next_cursor of the previous page' })),
    code: Type.Optional(Type.String({ maxLength: 64 })),
    key_id: Type.Optional(Type.String({ maxLength: 64 })),
    severity: Type.Optional(Type.Union([Type.Literal('rejected'), Type.Literal('warning')])),
    received_from: Type.Optional(Type.String({ description: 'RFC 3339, inclusive' })),
    received_to: Type.Optional(Type.String({ description: 'RFC 3339, exclusive' })),
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
          200: Type.Object({ data: Type.Array(Rejection), meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]) }) }),
          400: problemResponse('Invalid filter'),
        },
      },
    },
    async (request) => {
      const q = request.query;
      const limit = q.limit === undefined ? DEFAULT_LIMIT : Number(q.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) throw validationError([{ pointer: '/limit', message: `query parameter limit must be a whole number from 1 to ${MAX_LIMIT}` }]);
      const time = (value: string | undefined, name: string) => {
        if (value === undefined) return undefined;
        const parsed = parseRfc3339(value);
        if (parsed === undefined) throw validationError([{ pointer: `/${name}`, message: `query parameter ${name} must be an RFC 3339 timestamp` }]);
        return parsed;
      };
      let beforeId: string | undefined;
      if (q.cursor !== undefined) {
        beforeId = Buffer.from(q.cursor, 'base64url').toString('utf8');
        if (!/^[0-9a-f-]{36}$/.test(beforeId)) throw validationError([{ pointer: '/cursor', message: 'query parameter cursor is not one this API gave out' }]);
      }
      const rows = await services.rejections.list(productOf(request).id, {
        limit: limit + 1,
        ...(beforeId === undefined ? {} : { beforeId }),
        ...(q.code === undefined ? {} : { code: q.code }),
        ...(q.key_id === undefined ? {} : { keyId: q.key_id }),
        ...(q.severity === undefined ? {} : { severity: q.severity }),
        ...(q.received_from === undefined ? {} : { receivedFrom: time(q.received_from, 'received_from') }),
        ...(q.received_to === undefined ? {} : { receivedTo: time(q.received_to, 'received_to') }),
      });
      const page = rows.slice(0, limit);
      const next = rows.length > limit ? Buffer.from(page.at(-1)!.id).toString('base64url') : null;
      return { data: page.map(rejectionResource), meta: { next_cursor: next } };
    },
  );
}
