// The product's transformation (transformations.md §3, §6): PUT a new version, GET the current one and every
// version, and try steps on sample items without storing anything. Steps are checked by the domain (pointers
// into the body), functions compiled by the sandbox; nothing is stored when anything is wrong.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { transformationResource } from '../../resources/transformations.js';
import type { Services } from '../../services.js';
import { translateTestItems } from '../../services/transformations/test-items.js';
import { problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';

const MAX_TEST_ITEMS = 100;
/** The body limit of a PUT and a test: 50 steps of functions up to 64 KiB, or 100 items of 32 KiB, with room. */
const BODY_LIMIT = 4 * 1024 * 1024;

const Steps = Type.Array(Type.Object({}, { additionalProperties: true }), {
  description:
    'Ordered steps, each `{ kind, where?, on_error?, …its fields }`: drop, sample, rename_event, set, remove, rename_property, mask, allow_properties, user_agent, bot, geoip, function (docs/api.md "Transformations")',
});

const Version = Type.Object({
  version: Type.Integer(),
  steps: Steps,
  created_at: Type.String(),
});

const Document = Type.Object(
  {},
  { additionalProperties: true, description: 'The document a step sees (transformations.md §2)' },
);

const TestBody = Type.Object(
  {
    steps: Type.Optional(Steps),
    items: Type.Array(Type.Unknown(), {
      minItems: 1,
      maxItems: MAX_TEST_ITEMS,
      description:
        'Items as a client would send them to the route; for `stored`, events as `GET …/events` answers them',
    }),
    route: Type.Optional(
      Type.Union([Type.Literal('v2'), Type.Literal('segment'), Type.Literal('stored')], {
        description:
          'Default v2. `stored`: each item is a stored event, taken in its stored form (a Segment event keeps its type, traits and source; its `external_id`, else its `uuid`, is the message id `sample` uses)',
      }),
    ),
  },
  { additionalProperties: false },
);

const TestResultSchema = Type.Object({
  input: Document,
  output: Type.Union([Document, Type.Null()]),
  dropped_by: Type.Optional(Type.Integer()),
  error: Type.Optional(Type.Object({ step: Type.Integer(), message: Type.String() })),
  trace: Type.Array(Type.Object({ step: Type.Integer(), changed: Type.Array(Type.String()) })),
});

const invalid = {
  400: problemResponse(
    'An invalid step, condition or path (`errors[].pointer` such as /steps/2/paths/0), code that does not compile (its message and line), or a geoip step without INLET_GEOIP_DATABASE',
  ),
};

export function adminTransformationRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const { transformations } = services;

  r.put(
    '/products/:product_id/transformation',
    {
      bodyLimit: BODY_LIMIT,
      schema: {
        summary: "Store a new version of the product's transformation",
        description:
          "Every change is a new version, in force on this instance for every request after this answer and on other instances within INLET_TRACKING_PLAN_REFRESH_MS. To roll back, PUT an earlier version's steps again.",
        body: Type.Object({ steps: Steps }, { additionalProperties: true }),
        response: { 200: Type.Object({ data: Version }), ...invalid },
      },
    },
    async (request) => {
      const stored = await transformations.put(productOf(request).id, request.body);
      return { data: transformationResource(stored) };
    },
  );

  r.get(
    '/products/:product_id/transformation',
    {
      schema: {
        summary: "The product's transformation in force (`data` null when none)",
        response: { 200: Type.Object({ data: Type.Union([Version, Type.Null()]) }) },
      },
    },
    async (request) => {
      const current = await transformations.get(productOf(request).id);
      return { data: current === undefined ? null : transformationResource(current) };
    },
  );

  r.get(
    '/products/:product_id/transformation/versions',
    {
      schema: {
        summary: "Every version of the product's transformation, newest first",
        response: { 200: Type.Object({ data: Type.Array(Version) }) },
      },
    },
    async (request) => {
      const versions = await transformations.versions(productOf(request).id);
      return { data: versions.map(transformationResource) };
    },
  );

  r.post(
    '/products/:product_id/transformation/test',
    {
      bodyLimit: BODY_LIMIT,
      schema: {
        summary: 'Run steps on sample items without storing anything',
        description:
          'The given steps (validated like a PUT) or the version in force run on each item, translated as the named route would (v2 by default, or segment), or taken in its stored form (stored: events as the admin reads answer them, of any route). Each result has the input and output documents (output null when dropped or failed), `dropped_by` or `error`, and the paths each step changed.',
        body: TestBody,
        response: { 200: Type.Object({ data: Type.Array(TestResultSchema) }), ...invalid },
      },
    },
    async (request) => {
      const product = productOf(request).id;
      const { body } = request;
      const items = translateTestItems(body.items, body.route ?? 'v2', 'test');
      const data = await transformations.test(product, body.steps, items, {
        product_id: product,
        key_id: null,
        route: body.route ?? 'v2',
      });
      return { data };
    },
  );
}
