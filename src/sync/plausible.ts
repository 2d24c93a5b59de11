// Plausible Stats API v2 (`POST {base}/api/v2/query`), one query per page of daily rows.
import type { TrafficRow } from '../domain/traffic-reports.js';
import {
  DEFAULT_RETRY_POLICY,
  ProviderError,
  errorReason,
  requestJson,
  type DateRange,
  type RetryPolicy,
  type TrafficProvider,
} from './provider.js';

export const PLAUSIBLE_DEFAULT_BASE_URL = 'https://plausible.io';
const METRICS = ['visitors', 'visits', 'pageviews', 'bounce_rate', 'visit_duration'] as const;
const DIMENSIONS = ['time:day', 'visit:source', 'visit:utm_medium', 'visit:utm_campaign', 'visit:entry_page'] as const;

export interface PlausibleOptions {
  siteId: string;
  apiKey: string;
  baseUrl?: string;
  /** Rows per request (Plausible's default and our default: 10,000). */
  pageSize?: number;
  retry?: RetryPolicy;
}

function count(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function mapResult(result: unknown): TrafficRow {
  const { dimensions, metrics } = (result ?? {}) as { dimensions?: unknown; metrics?: unknown };
  if (
    !Array.isArray(dimensions) ||
    dimensions.length !== DIMENSIONS.length ||
    !dimensions.every((d) => typeof d === 'string')
  ) {
    throw new ProviderError('plausible', `unexpected result row: ${JSON.stringify(result).slice(0, 200)}`);
  }
  if (!Array.isArray(metrics) || metrics.length !== METRICS.length) {
    throw new ProviderError('plausible', `unexpected metrics in row: ${JSON.stringify(result).slice(0, 200)}`);
  }
  const [date, source, medium, campaign, landingPage] = dimensions as string[];
  const [visitors, visits, pageviews, bounceRate, visitDuration] = metrics as unknown[];
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date!)) throw new ProviderError('plausible', `unexpected date "${date}"`);
  const bounce = count(bounceRate);
  return {
    date: date!,
    source: source === 'Direct / None' ? '(direct)' : source!,
    medium: medium!,
    campaign: campaign!,
    landing_page: landingPage!,
    sessions: count(visits),
    users: count(visitors),
    new_users: null,
    pageviews: count(pageviews),
    engaged_sessions: null,
    // Percent → fraction, without binary noise: 49 → 0.49, not 0.49000000000000005.
    bounce_rate: bounce === null ? null : Math.round(bounce * 1e8) / 1e10,
    avg_session_duration: count(visitDuration),
    conversions: null,
  };
}

export function plausibleProvider(options: PlausibleOptions): TrafficProvider {
  const baseUrl = (options.baseUrl ?? PLAUSIBLE_DEFAULT_BASE_URL).replace(/\/+$/, '');
  const pageSize = options.pageSize ?? 10_000;
  const policy = options.retry ?? DEFAULT_RETRY_POLICY;

  return {
    name: 'plausible',
    async fetchRows(range: DateRange) {
      const rows: TrafficRow[] = [];
      for (let offset = 0; ;) {
        const body = (await requestJson({
          provider: 'plausible',
          url: `${baseUrl}/api/v2/query`,
          headers: {
            authorization: `Bearer ${options.apiKey}`,
            'content-type': 'application/json',
            accept: 'application/json',
          },
          body: JSON.stringify({
            site_id: options.siteId,
            metrics: METRICS,
            date_range: [range.from, range.to],
            dimensions: DIMENSIONS,
            filters: [],
            order_by: [
              ['time:day', 'asc'],
              ['visits', 'desc'],
            ],
            include: { total_rows: true },
            pagination: { limit: pageSize, offset },
          }),
          policy,
          reasonOf: errorReason,
        })) as { results?: unknown; meta?: { total_rows?: unknown } };
        if (!Array.isArray(body.results)) throw new ProviderError('plausible', 'the response has no results list');
        for (const result of body.results) rows.push(mapResult(result));
        offset += body.results.length;
        const total = typeof body.meta?.total_rows === 'number' ? body.meta.total_rows : undefined;
        const done = total === undefined ? body.results.length < pageSize : offset >= total;
        if (done || body.results.length === 0) return rows;
      }
    },
  };
}
