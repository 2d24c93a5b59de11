// Identity request and response schemas (contract §6). The schemas check types and lengths; the rules
// that need more than a schema (placeholders, identifier kinds and values, the traits size) are
// checked by domain/identity.ts, which answers with the same validation_error and JSON pointers.
import { Type, type Static } from '@sinclair/typebox';
import {
  EXTERNAL_ID_MAX_LENGTH,
  IDENTIFIER_KIND_MAX_LENGTH,
  IDENTIFIER_KIND_PATTERN_SOURCE,
  IDENTIFIER_MAX_KINDS,
  IDENTIFIER_VALUE_MAX_LENGTH,
  PLACEHOLDER_EXTERNAL_IDS,
  TRAITS_MAX_BYTES,
} from '../../domain/identity.js';

const ExternalId = (description: string) =>
  Type.String({
    minLength: 1,
    maxLength: EXTERNAL_ID_MAX_LENGTH,
    description: `${description}. 1–${EXTERNAL_ID_MAX_LENGTH} characters, compared exactly; placeholders are refused (${PLACEHOLDER_EXTERNAL_IDS.join(', ')}, blank; case-insensitive, after trimming).`,
    examples: ['user_42'],
  });

export const IdentifyRequest = Type.Object(
  {
    external_id: ExternalId(
      'Stable user id in your app; an id merged away by alias resolves to the user it was merged into',
    ),
    identifiers: Type.Optional(
      Type.Object(
        {},
        {
          additionalProperties: true,
          description: `Identifier kind → value. Kinds match ${IDENTIFIER_KIND_PATTERN_SOURCE} (≤ ${IDENTIFIER_KIND_MAX_LENGTH} characters, ≤ ${IDENTIFIER_MAX_KINDS} kinds); values are strings of 1–${IDENTIFIER_VALUE_MAX_LENGTH} characters, or null to remove the kind. One value per kind per user; an identifier belongs to at most one user of the product. Kind "email" is trimmed and lower-cased, other kinds compare exactly.`,
          examples: [{ email: 'ada@example.com', stripe_customer: 'cus_123' }],
        },
      ),
    ),
    traits: Type.Optional(
      Type.Object(
        {},
        {
          additionalProperties: true,
          description: `Profile data, shallow-merged into the stored traits; a trait set to null is removed. At most ${TRAITS_MAX_BYTES} bytes of JSON.`,
          examples: [{ name: 'Ada', plan: 'pro' }],
        },
      ),
    ),
  },
  { additionalProperties: false },
);
export type IdentifyRequest = Static<typeof IdentifyRequest>;

export const AliasRequest = Type.Object(
  {
    from_external_id: ExternalId('The id to merge away, typically an anonymous id'),
    to_external_id: ExternalId(
      'The id that stays, typically the signed-up user id; created empty if unknown. Must differ from from_external_id',
    ),
  },
  { additionalProperties: false },
);
export type AliasRequest = Static<typeof AliasRequest>;

export const UserCustomer = Type.Object(
  {
    id: Type.String({ description: 'Assigned by Inlet' }),
    external_id: Type.String({ description: 'The canonical external id of the user' }),
    identifiers: Type.Record(Type.String(), Type.String()),
    traits: Type.Object({}, { additionalProperties: true }),
    aliases: Type.Array(Type.String(), { description: 'External ids merged into this user, sorted' }),
    created_at: Type.String(),
    updated_at: Type.String({ description: 'When identifiers, traits or aliases last changed' }),
  },
  { description: 'user_customer' },
);

export const UserMerge = Type.Object({
  from_external_id: Type.String(),
  from_user_id: Type.Union([Type.String(), Type.Null()], { description: 'null when from had never been seen' }),
  into_user_id: Type.String(),
  into_external_id: Type.String(),
  merged_at: Type.String(),
});
