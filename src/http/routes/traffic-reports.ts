// GET /api/v2/traffic_reports (contract §8), read with a reports key. The query-string schema
// documents the parameters and refuses unknown ones; the domain parser applies the rules (dates,
// ranges, lists, cursor) so the CLI-free service gives the same answers.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import {
  DEFAULT_LIMIT,
  MAX_LIMIT,
  MAX_REPORT_DAYS,
  TRAFFIC_DIMENSIONS,
  TRAFFIC_METRICS,
} from '../../domain/traffic-reports.js';
import type { Services } from '../../services.js';
import { authOf, requireKey } from '../auth.js';
import { problemResponse } from '../schemas/common.js';

const nullableNumber = (description: string) => Type.Union([Type.Number(), Type.Null()], { description });

export const TrafficMetricsSchema = Type.Object({
  sessions: nullableNumber('Sessions (GA4 sessions, Plausible visits)'),
  users: nullableNumber(
    'Users, summed over the rows: across several days an upper bound (one person on two days counts twice)',
  ),
  new_users: nullableNumber('New users (GA4 only; null for Plausible)'),
  pageviews: nullableNumber('Page views'),
  engaged_sessions: nullableNumber('Engaged sessions (GA4 only)'),
  bounce_rate: nullableNumber('Bounce rate as a fraction 0–1, averaged weighted by sessions'),
  avg_session_duration: nullableNumber('Average session duration in seconds, weighted by sessions'),
  conversions: nullableNumber('Conversions (GA4 key events; null for Plausible)'),
});

const dimension = (description: string) => Type.Optional(Type.String({ description }));

// Dimensions first (the ones in group_by are present), then every metric.
const TrafficReportRow = Type.Object({
  date: dimension('YYYY-MM-DD, when grouped by date'),
  source: dimension('e.g. google, (direct)'),
  medium: dimension('e.g. organic, cpc, (none)'),
  campaign: dimension('e.g. spring_sale, (not set)'),
  landing_page: dimension('Path of the first page of the session'),
  ...TrafficMetricsSchema.properties,
});

const queryString = (description: string, extra: Record<string, unknown> = {}) =>
  Type.Optional(Type.String({ description, ...extra }));

export const TrafficReportQuerySchema = Type.Object(
  {
    from: queryString(
      `First day, YYYY-MM-DD (UTC), inclusive. Default: 27 days before \`to\`. At most ${MAX_REPORT_DAYS} days in all.`,
    ),
    to: queryString('Last day, YYYY-MM-DD, inclusive. Default: yesterday (UTC).'),
    group_by: queryString(
      `Comma list of ${TRAFFIC_DIMENSIONS.join(', ')}. Default source,medium,campaign,landing_page.`,
    ),
    source: queryString('Only rows with exactly this source'),
    medium: queryString('Only rows with exactly this medium'),
    campaign: queryString('Only rows with exactly this campaign'),
    landing_page: queryString('Only rows with exactly this landing page'),
    sort: queryString(
      `A metric (${TRAFFIC_METRICS.join(', ')}) or a grouped dimension; "-" prefix for descending. Default -sessions. Nulls sort last.`,
    ),
    limit: queryString(`Rows per page, 1–${MAX_LIMIT}. Default ${DEFAULT_LIMIT}.`),
    cursor: queryString('meta.next_cursor of the previous page (with the same other parameters)'),
  },
  { additionalProperties: false },
);

export const TrafficReportResponse = Type.Object({
  data: Type.Array(TrafficReportRow),
  meta: Type.Object({
    from: Type.String(),
    to: Type.String(),
    group_by: Type.Array(Type.String()),
    totals: TrafficMetricsSchema,
    provider: Type.Union([Type.String(), Type.Null()], {
      description: 'plausible or ga4: the connected source; null when none is connected',
    }),
    last_synced_at: Type.Union([Type.String(), Type.Null()], {
      description: 'When the last successful sync or CSV import finished',
    }),
    next_cursor: Type.Union([Type.String(), Type.Null()], {
      description: 'Pass as cursor for the next page; null on the last page',
    }),
  }),
});

export function trafficReportsRoute(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/api/v2/traffic_reports',
    {
      onRequest: requireKey(services, 'reports'),
      schema: {
        tags: ['traffic'],
        summary: 'Traffic summary per source, medium, campaign and landing page (synced from GA4 or Plausible)',
        security: [{ reportsKey: [] }],
        querystring: TrafficReportQuerySchema,
        response: {
          200: TrafficReportResponse,
          400: problemResponse('A query parameter is unknown or invalid'),
          401: problemResponse('Missing, unknown, revoked or expired key'),
          403: problemResponse('Not a reports key'),
          429: problemResponse('Rate limited'),
        },
      },
    },
    async (request) =>
      services.traffic.reports.report(authOf(request).productId, request.query as Record<string, unknown>),
  );
}
