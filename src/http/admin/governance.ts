// Data governance in the admin plugin (governance.md §1–2; paths under /admin/v1): the event catalogue, the tracking plan with
// its versions and draft, and the violations list.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { AppError, validationError } from '../../domain/errors.js';
import { PLAN_MODES, UNPLANNED_RULES } from '../../domain/tracking-plan.js';
import type { Services } from '../../services.js';
import {
  catalogEventDetailResource,
  catalogEventResource,
  catalogPropertyResource,
  trackingPlanResource,
  violationResource,
} from '../../resources/governance.js';
import { problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';
import { idPage, idPageParameters, idPageQuery, pageLimit } from './paging.js';

const JsonTypes = Type.Record(Type.String(), Type.Integer(), {
  description: 'Observations per JSON type: string, integer, number, boolean, object, array, null',
});

const CatalogEvent = Type.Object({
  canonical_name: Type.String(),
  event_type: Type.String(),
  action: Type.String(),
  count: Type.Integer({
    description: 'Events stored under this name (lags ingest by the flush interval, at most 10 s)',
  }),
  first_seen: Type.String(),
  last_seen: Type.String(),
  sources: Type.Array(Type.String(), { description: 'Event sources seen: api, segment, …' }),
  key_ids: Type.Array(Type.String(), { description: 'API keys that sent it' }),
});

const CatalogProperty = Type.Object({
  path: Type.String({ description: 'Dotted path, top level and nested objects down to depth 3 (meta.source)' }),
  types: JsonTypes,
  first_seen: Type.String(),
  last_seen: Type.String(),
});

const PlanMode = Type.Union(PLAN_MODES.map((m) => Type.Literal(m)));

const TrackingPlanBody = Type.Object(
  {
    mode: PlanMode,
    unplanned: Type.Optional(
      Type.Union(
        UNPLANNED_RULES.map((m) => Type.Literal(m)),
        { description: 'Events the plan does not name: allow (default), warn, reject' },
      ),
    ),
    events: Type.Optional(
      Type.Record(
        Type.String(),
        Type.Object(
          {
            properties: Type.Unknown({ description: "JSON Schema 2020-12 of the event's properties" }),
            mode: Type.Optional(PlanMode),
          },
          { additionalProperties: false },
        ),
        { description: 'Per canonical name' },
      ),
    ),
    traits: Type.Optional(Type.Unknown({ description: 'JSON Schema 2020-12 of identify traits' })),
  },
  { additionalProperties: false, description: 'A tracking plan (governance.md §2)' },
);

const TrackingPlanVersion = Type.Object(
  {
    version: Type.Integer(),
    created_at: Type.String(),
    mode: PlanMode,
    unplanned: Type.Optional(Type.String()),
    events: Type.Optional(Type.Unknown()),
    traits: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);

const Violation = Type.Object({
  id: Type.String(),
  received_at: Type.String(),
  key_id: Type.Union([Type.String(), Type.Null()]),
  route: Type.String(),
  canonical_name: Type.String(),
  code: Type.Union([Type.Literal('tracking_plan_violation'), Type.Literal('unplanned_event')]),
  severity: Type.Union([Type.Literal('warning'), Type.Literal('rejected')]),
  plan_version: Type.Integer(),
  message_id: Type.Union([Type.String(), Type.Null()]),
  errors: Type.Array(
    Type.Object({
      pointer: Type.String({ description: 'Into the item as received: /properties/plan' }),
      message: Type.String(),
    }),
    { description: 'Never the values' },
  ),
});

const CatalogQuery = Type.Object(
  {
    sort: Type.Optional(
      Type.Union([Type.Literal('last_seen'), Type.Literal('count'), Type.Literal('name')], {
        description: 'last_seen (default, newest first), count (largest first) or name',
      }),
    ),
    prefix: Type.Optional(Type.String({ maxLength: 256, description: 'Only names starting with this' })),
    limit: idPageParameters.limit,
    cursor: idPageParameters.cursor,
  },
  { additionalProperties: false },
);

const ViolationQuery = Type.Object(
  {
    limit: idPageParameters.limit,
    cursor: idPageParameters.cursor,
    canonical_name: Type.Optional(Type.String({ maxLength: 256 })),
    code: Type.Optional(Type.Union([Type.Literal('tracking_plan_violation'), Type.Literal('unplanned_event')])),
    key_id: Type.Optional(Type.String({ maxLength: 64 })),
    received_from: idPageParameters.received_from,
    received_to: idPageParameters.received_to,
  },
  { additionalProperties: false },
);

const adminErrors = { 400: problemResponse('Invalid parameter') };

export function adminGovernanceRoutes(app: FastifyInstance, services: Services): void {
  catalogRoutes(app, services);
  trackingPlanRoutes(app, services);
  violationRoutes(app, services);
}

/** The event catalogue (governance.md §1): names, one name's properties, the traits. */
function catalogRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const { catalog } = services.governance;

  r.get(
    '/products/:product_id/catalog/events',
    {
      schema: {
        summary: 'The event catalogue: every name stored, with counts, first/last seen, sources and keys',
        description:
          'Built from the events as they are stored, off the request path (counts lag by at most the flush interval). `meta.overflow` counts events whose name was not catalogued because the product reached INLET_CATALOG_MAX_EVENTS names.',
        querystring: CatalogQuery,
        response: {
          200: Type.Object({
            data: Type.Array(CatalogEvent),
            meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]), overflow: Type.Integer() }),
          }),
          ...adminErrors,
        },
      },
    },
    async (request) => {
      const q = request.query;
      const limit = pageLimit(q.limit);
      let offset = 0;
      if (q.cursor !== undefined) {
        offset = Number(Buffer.from(q.cursor, 'base64url').toString('utf8'));
        if (!Number.isInteger(offset) || offset < 0)
          throw validationError([
            { pointer: '/cursor', message: 'query parameter cursor is not one this API gave out' },
          ]);
      }
      const { events, overflow } = await catalog.listEvents(productOf(request).id, {
        sort: q.sort ?? 'last_seen',
        offset,
        limit: limit + 1,
        ...(q.prefix === undefined ? {} : { prefix: q.prefix }),
      });
      const page = events.slice(0, limit);
      const next = events.length > limit ? Buffer.from(String(offset + limit)).toString('base64url') : null;
      return { data: page.map(catalogEventResource), meta: { next_cursor: next, overflow } };
    },
  );

  r.get(
    '/products/:product_id/catalog/events/:canonical_name',
    {
      schema: {
        summary: 'One catalogued event name with its property paths and their observed JSON types',
        description:
          '`properties_overflow` counts property observations not catalogued because the name reached INLET_CATALOG_MAX_PROPERTIES paths. No value is ever kept.',
        params: Type.Object(
          {
            product_id: Type.String({ minLength: 1, maxLength: 64 }),
            canonical_name: Type.String({ minLength: 1, maxLength: 256 }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            data: Type.Object({
              ...CatalogEvent.properties,
              properties: Type.Array(CatalogProperty),
              properties_overflow: Type.Integer(),
            }),
          }),
          ...adminErrors,
          404: problemResponse('No such product, or a name never seen'),
        },
      },
    },
    async (request) => {
      const productId = productOf(request).id;
      const name = request.params.canonical_name;
      const detail = await catalog.getEvent(productId, name);
      if (detail === undefined)
        throw new AppError(
          'not_found',
          `The event "${name}" was never seen in product "${productId}" (or is past the catalogue's name limit).`,
        );
      return { data: catalogEventDetailResource(detail) };
    },
  );

  r.get(
    '/products/:product_id/catalog/traits',
    {
      schema: {
        summary: 'The identify trait paths of a product with their observed JSON types',
        response: {
          200: Type.Object({
            data: Type.Array(CatalogProperty),
            meta: Type.Object({
              overflow: Type.Integer({ description: 'Trait observations past INLET_CATALOG_MAX_PROPERTIES paths' }),
            }),
          }),
          ...adminErrors,
        },
      },
    },
    async (request) => {
      const { paths, overflow } = await catalog.traits(productOf(request).id);
      return { data: paths.map(catalogPropertyResource), meta: { overflow } };
    },
  );
}

/** The tracking plan (governance.md §2): the current version, a new one, the versions, a draft. */
function trackingPlanRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const { plans } = services.governance;

  r.get(
    '/products/:product_id/tracking_plan',
    {
      schema: {
        summary: 'The current tracking plan (404 when the product has none)',
        response: {
          200: Type.Object({ data: TrackingPlanVersion }),
          ...adminErrors,
          404: problemResponse('No such product, or no plan yet'),
        },
      },
    },
    async (request) => {
      const current = await plans.get(productOf(request).id);
      if (current === undefined)
        throw new AppError(
          'not_found',
          `Product "${productOf(request).id}" has no tracking plan yet: PUT one (POST …/tracking_plan/draft gives a start).`,
        );
      return { data: trackingPlanResource(current) };
    },
  );

  r.put(
    '/products/:product_id/tracking_plan',
    {
      schema: {
        summary: 'Store a new version of the tracking plan',
        description:
          'Every PUT is a new version (the old ones stay listed). Each schema is JSON Schema 2020-12, compiled once (Ajv, strict: unknown keywords are refused). An invalid plan is 400 with pointers into it. Applied at once on this instance, and by other instances within INLET_TRACKING_PLAN_REFRESH_MS.',
        body: TrackingPlanBody,
        response: {
          200: Type.Object({ data: TrackingPlanVersion }),
          ...adminErrors,
          400: problemResponse(
            'Not a valid plan: `errors[].pointer` into the plan, e.g. /events/order_completed/properties/type',
          ),
        },
      },
    },
    async (request) => {
      return { data: trackingPlanResource(await plans.put(productOf(request).id, request.body)) };
    },
  );

  r.get(
    '/products/:product_id/tracking_plan/versions',
    {
      schema: {
        summary: 'Every version of the tracking plan, newest first',
        response: { 200: Type.Object({ data: Type.Array(TrackingPlanVersion) }), ...adminErrors },
      },
    },
    async (request) => {
      return { data: (await plans.versions(productOf(request).id)).map(trackingPlanResource) };
    },
  );

  r.post(
    '/products/:product_id/tracking_plan/draft',
    {
      schema: {
        summary: 'A draft plan from the catalogue (mode off), for review; never applied by itself',
        description:
          'Each schema has the observed JSON types per property, and `required` lists the properties present in every event of that name. Edit it, then PUT it.',
        response: { 200: Type.Object({ data: TrackingPlanBody }), ...adminErrors },
      },
    },
    async (request) => {
      return { data: await plans.draft(productOf(request).id) };
    },
  );
}

/** The violations of the tracking plan, newest first. */
function violationRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const { plans } = services.governance;

  r.get(
    '/products/:product_id/violations',
    {
      schema: {
        summary: 'Tracking plan violations (warnings and refusals), newest first',
        description:
          'Kept INLET_VIOLATIONS_RETENTION_DAYS; at most INLET_VIOLATIONS_MAX_PER_HOUR recorded per product and hour (the rest are counted in metrics).',
        querystring: ViolationQuery,
        response: {
          200: Type.Object({
            data: Type.Array(Violation),
            meta: Type.Object({ next_cursor: Type.Union([Type.String(), Type.Null()]) }),
          }),
          ...adminErrors,
        },
      },
    },
    async (request) => {
      const q = request.query;
      const { limit, ...paging } = idPageQuery(q);
      const rows = await plans.listViolations(productOf(request).id, {
        ...paging,
        limit: limit + 1,
        canonicalName: q.canonical_name,
        code: q.code,
        keyId: q.key_id,
      });
      const { page, nextCursor } = idPage(rows, limit);
      return { data: page.map(violationResource), meta: { next_cursor: nextCursor } };
    },
  );
}
