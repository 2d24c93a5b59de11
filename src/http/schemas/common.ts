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
          pointer: Type.String({ description: 'JSON pointer (RFC 6901) to the offending field, e.g. /events/3/action' }),
          message: Type.String(),
        }),
      ),
    ),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details' },
);

export const problemResponse = (description: string) => ({ ...Type.Ref(ProblemSchema), description });

export function dataEnvelope<T extends TSchema>(schema: T, description?: string) {
  return Type.Object({ data: schema }, description === undefined ? {} : { description });
}

export const ProductIdParams = Type.Object({ product_id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
