// Schemas shared by several routes: the problem body, the data envelope, path parameters.
import { Type, type TSchema } from '@sinclair/typebox';

export const ProblemSchema = Type.Object(
  {
    type: Type.String({ description: 'Stable URI of the problem kind: urn:inlet:problem:<code>' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String({ description: 'What went wrong, for a human' }),
    code: Type.String({ description: 'Stable machine name of the error (see README, Errors)' }),
    request_id: Type.Optional(Type.String()),
    errors: Type.Optional(
      Type.Array(
        Type.Object({
          pointer: Type.String({
            description: 'JSON pointer (RFC 6901) to the offending field, e.g. /events/3/action',
          }),
          message: Type.String(),
        }),
      ),
    ),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details' },
);

/** Every error leaves as RFC 9457 problem+json (plugins/errors.ts), whatever the route. */
export const PROBLEM_MEDIA_TYPE = 'application/problem+json';

/**
 * A documented error answer. Keyed by media type, so the OpenAPI document says problem+json (as the wire
 * does) and Fastify keeps one serializer per media type: success answers still go through their own schema.
 */
export const problemResponse = (description: string) => ({
  description,
  content: { [PROBLEM_MEDIA_TYPE]: { schema: Type.Ref(ProblemSchema) } },
});

/**
 * The documented errors of a keyed write route (events, batch, identify, alias): the key's 401 and
 * 403, 415 and 429 are the same everywhere; the route describes its own 400 and 413. It adds its
 * other answers (409, 410) itself. Admin routes get theirs from the admin plugin (admin/context.ts).
 */
export function keyedWriteErrors(own: { 400: string; 413: string }) {
  return {
    400: problemResponse(own[400]),
    401: problemResponse('Missing or invalid key'),
    403: problemResponse('Not an events key'),
    413: problemResponse(own[413]),
    415: problemResponse('Not JSON'),
    429: problemResponse('Rate limited'),
  };
}

export function dataEnvelope<T extends TSchema>(schema: T, description?: string) {
  return Type.Object({ data: schema }, description === undefined ? {} : { description });
}

export const ProductIdParams = Type.Object(
  { product_id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);
