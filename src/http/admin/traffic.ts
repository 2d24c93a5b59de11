// Admin API for traffic sources (contract §8): connect a provider, run a sync now, list past runs.
// Enabled with the rest of the admin API (INLET_ADMIN_TOKEN).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { syncRunResource, trafficSourceResource } from '../../resources/traffic.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { productOf } from './context.js';
import { TrafficReportQuerySchema, TrafficReportResponse } from '../routes/traffic-reports.js';

const TrafficSource = Type.Object({
  product_id: Type.String(),
  provider: Type.Union([Type.Literal('plausible'), Type.Literal('ga4')]),
  site_id: Type.Optional(Type.String({ description: 'Plausible site (domain)' })),
  property_id: Type.Optional(Type.String({ description: 'GA4 property id' })),
  client_email: Type.Optional(Type.String({ description: 'GA4 service account' })),
  base_url: Type.Optional(Type.String()),
  token_url: Type.Optional(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const TrafficSourceInput = Type.Object(
  {
    provider: Type.Union([Type.Literal('plausible'), Type.Literal('ga4')]),
    site_id: Type.Optional(Type.String({ description: 'plausible: the site domain as registered in Plausible' })),
    api_key: Type.Optional(Type.String({ description: 'plausible: a Stats API key (stored, never shown again)' })),
    property_id: Type.Optional(Type.String({ description: 'ga4: the numeric property id' })),
    credentials: Type.Optional(
      Type.Object(
        {},
        { additionalProperties: true, description: 'ga4: the service-account key JSON (stored, never shown again)' },
      ),
    ),
    base_url: Type.Optional(Type.String({ description: 'API base URL (self-hosted Plausible, or a proxy)' })),
    token_url: Type.Optional(
      Type.String({ description: 'ga4: OAuth token URL (default https://oauth2.googleapis.com/token)' }),
    ),
  },
  // The service checks the fields of each provider and names every unknown one.
  { additionalProperties: true },
);

const SyncRun = Type.Object({
  id: Type.String(),
  provider: Type.String({ description: 'plausible, ga4, or csv for an import' }),
  kind: Type.String({ description: 'schedule, admin, cli or import' }),
  started_at: Type.String(),
  finished_at: Type.Union([Type.String(), Type.Null()]),
  from: Type.String(),
  to: Type.String(),
  rows: Type.Union([Type.Integer(), Type.Null()]),
  outcome: Type.String({ description: 'running, succeeded or failed' }),
  error: Type.Union([Type.String(), Type.Null()], { description: "The provider's reason when a sync failed" }),
});

const SyncResult = Type.Object({
  status: Type.String({
    description: 'succeeded, or already_running when another sync of this product holds the lock (nothing fetched)',
  }),
  from: Type.String(),
  to: Type.String(),
  rows: Type.Integer({ description: 'Rows stored for the range' }),
});

export function adminTrafficRoutes(app: FastifyInstance, services: Services): void {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  const common = { 404: problemResponse('No such product, or no traffic source') };
  const sync = services.traffic.sync;

  r.put(
    '/products/:product_id/traffic_source',
    {
      schema: {
        tags: ['traffic'],
        summary:
          "Connect (or replace) the product's traffic source: Plausible or GA4. Secrets are stored, never echoed.",
        body: TrafficSourceInput,
        response: {
          200: dataEnvelope(TrafficSource),
          400: problemResponse(
            'Invalid source, or a base_url/token_url the outbound guard refuses (the message names the setting that would allow it)',
          ),
          ...common,
        },
      },
    },
    async (request) => ({ data: trafficSourceResource(await sync.connectSource(productOf(request).id, request.body)) }),
  );

  r.get(
    '/products/:product_id/traffic_source',
    {
      schema: {
        tags: ['traffic'],
        summary: "The product's traffic source (without secrets)",
        response: { 200: dataEnvelope(TrafficSource), ...common },
      },
    },
    async (request) => {
      const productId = productOf(request).id;
      const source = await sync.getSource(productId);
      if (source === undefined) throw new AppError('not_found', `Product "${productId}" has no traffic source.`);
      return { data: trafficSourceResource(source) };
    },
  );

  r.post(
    '/products/:product_id/traffic_source/sync',
    {
      // No body means "the default range": validate it as {}.
      preValidation: async (request) => {
        if (request.body === undefined || request.body === null) request.body = {};
      },
      schema: {
        tags: ['traffic'],
        summary:
          'Sync now and answer when done. Default range: the trailing 3 days and today (90 days on the first sync).',
        body: Type.Object(
          {
            from: Type.Optional(Type.String({ description: 'YYYY-MM-DD' })),
            to: Type.Optional(Type.String({ description: 'YYYY-MM-DD' })),
          },
          { additionalProperties: false, description: 'Optional; without it, the default range' },
        ),
        response: {
          200: dataEnvelope(SyncResult),
          400: problemResponse('Invalid range'),
          502: problemResponse(
            'The provider failed (its reason is in detail; 429/5xx were retried first), or the outbound guard refused its address (at once, never retried)',
          ),
          ...common,
        },
      },
    },
    async (request) => {
      const body = request.body;
      const result = await sync.syncProduct(productOf(request).id, {
        kind: 'admin',
        ...(body.from === undefined ? {} : { from: body.from }),
        ...(body.to === undefined ? {} : { to: body.to }),
      });
      return { data: result };
    },
  );

  // Clarifications §28: the report of GET /api/v2/traffic_reports with the admin token (the console's traffic page).
  r.get(
    '/products/:product_id/traffic_reports',
    {
      schema: {
        tags: ['traffic'],
        summary:
          'Traffic report of the product: the parameters and answer of GET /api/v2/traffic_reports, with the admin token',
        querystring: TrafficReportQuerySchema,
        response: { 200: TrafficReportResponse, 400: problemResponse('A query parameter is unknown or invalid') },
      },
    },
    async (request) => services.traffic.reports.report(productOf(request).id, request.query as Record<string, unknown>),
  );

  r.get(
    '/products/:product_id/traffic_source/runs',
    {
      schema: {
        tags: ['traffic'],
        summary: 'Past syncs and imports of the product, newest first',
        querystring: Type.Object(
          {
            limit: Type.Optional(
              Type.String({
                pattern: '^(?:[1-9]\\d{0,2}|1000)$',
                errorMessage: 'must be a whole number from 1 to 1000',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: dataEnvelope(Type.Array(SyncRun)), 400: problemResponse('Invalid limit'), ...common },
      },
    },
    async (request) => {
      const limit = request.query.limit === undefined ? 50 : Number(request.query.limit);
      return { data: (await sync.listRuns(productOf(request).id, limit)).map(syncRunResource) };
    },
  );
}
