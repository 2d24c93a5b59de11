// A fake Plausible Stats API v2 (`POST /api/v2/query`) speaking the documented wire format:
// Bearer API key, results as {dimensions, metrics} in the requested order, bounce_rate in percent,
// limit/offset pagination with include.total_rows, and `{"error": "…"}` bodies.
import { isCalendarDate, json, startFakeServer, type FakeServer, type ScriptedResponse } from './http-fake.js';

/** One day × source × medium × campaign × entry page, as Plausible would aggregate it. */
export interface PlausibleFakeRow {
  date: string;
  source: string;
  utm_medium: string;
  utm_campaign: string;
  entry_page: string;
  visitors: number;
  visits: number;
  pageviews: number;
  /** Percent, 0–100. */
  bounce_rate: number;
  /** Seconds. */
  visit_duration: number;
}

export interface PlausibleFake extends FakeServer {
  rows: PlausibleFakeRow[];
  /** Added before every answer (a slow provider). */
  latencyMs: number;
  /** Holds every answer back until the returned function is called (a provider that answers when the test says so). */
  hold(): () => void;
  /** Canned responses for the next queries, in order, before normal handling. */
  script(...responses: ScriptedResponse[]): void;
  /** Drops the canned responses not yet answered. */
  clearScript(): void;
  /** The JSON bodies of the queries received. */
  queries(): Array<Record<string, unknown>>;
}

const METRICS = new Set([
  'visitors',
  'visits',
  'pageviews',
  'bounce_rate',
  'visit_duration',
  'views_per_visit',
  'events',
]);
const DIMENSION_FIELDS: Record<string, keyof PlausibleFakeRow> = {
  'time:day': 'date',
  'visit:source': 'source',
  'visit:utm_medium': 'utm_medium',
  'visit:utm_campaign': 'utm_campaign',
  'visit:entry_page': 'entry_page',
};

export const PLAUSIBLE_401 =
  "Invalid API key or site ID. Please make sure you're using a valid API key with access to the site you've requested.";
export const PLAUSIBLE_429 =
  'Too many API requests. Your API key is limited to 600 requests per hour. Please contact us to request more capacity.';

export async function startPlausibleFake(options: {
  siteId: string;
  apiKey: string;
  rows?: PlausibleFakeRow[];
}): Promise<PlausibleFake> {
  const scripted: ScriptedResponse[] = [];
  const fake = {} as PlausibleFake;
  let held: Promise<void> | undefined;
  const server = await startFakeServer(async (request) => {
    if (request.method !== 'POST' || request.path !== '/api/v2/query') return json(404, { error: 'Not found' });
    if (held !== undefined) await held;
    if (fake.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, fake.latencyMs));
    const next = scripted.shift();
    if (next) return next;
    if (request.headers.authorization !== `Bearer ${options.apiKey}`) return json(401, { error: PLAUSIBLE_401 });
    let query: Record<string, unknown>;
    try {
      query = JSON.parse(request.body) as Record<string, unknown>;
    } catch {
      return json(400, { error: 'Invalid JSON body' });
    }
    if (query.site_id !== options.siteId) return json(401, { error: PLAUSIBLE_401 });
    const metrics = query.metrics;
    if (!Array.isArray(metrics) || metrics.length === 0)
      return json(400, { error: '#/metrics: Expected a minimum of 1 items' });
    const unknownMetric = metrics.find((m) => typeof m !== 'string' || !METRICS.has(m));
    if (unknownMetric !== undefined)
      return json(400, { error: `#/metrics/0: Invalid metric ${JSON.stringify(unknownMetric)}` });
    const dimensions = Array.isArray(query.dimensions) ? query.dimensions : [];
    const unknownDimension = dimensions.find((d) => typeof d !== 'string' || !(d in DIMENSION_FIELDS));
    if (unknownDimension !== undefined)
      return json(400, { error: `#/dimensions/0: Invalid dimension ${JSON.stringify(unknownDimension)}` });
    const range = query.date_range;
    if (!Array.isArray(range) || range.length !== 2 || !isCalendarDate(range[0]) || !isCalendarDate(range[1])) {
      return json(400, { error: '#/date_range: Invalid date range' });
    }
    const pagination = (query.pagination ?? {}) as { limit?: unknown; offset?: unknown };
    const limit = pagination.limit ?? 10_000;
    const offset = pagination.offset ?? 0;
    if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > 10_000)
      return json(400, { error: '#/pagination/limit: Invalid limit' });
    if (typeof offset !== 'number' || !Number.isInteger(offset) || offset < 0)
      return json(400, { error: '#/pagination/offset: Invalid offset' });

    const [from, to] = range as [string, string];
    const matching = fake.rows
      .filter((row) => row.date >= from && row.date <= to)
      .sort((a, b) => (a.date < b.date ? -1 : a.date > b.date ? 1 : b.visits - a.visits));
    const results = matching.slice(offset, offset + limit).map((row) => ({
      dimensions: dimensions.map((d: string) => row[DIMENSION_FIELDS[d]!]),
      metrics: metrics.map((m: string) => (m in row ? row[m as keyof PlausibleFakeRow] : null)),
    }));
    const include = (query.include ?? {}) as { total_rows?: unknown };
    return json(200, {
      results,
      meta: include.total_rows === true ? { total_rows: matching.length } : {},
      query: {
        ...query,
        date_range: [`${from}T00:00:00+00:00`, `${to}T23:59:59+00:00`],
        pagination: { offset, limit },
      },
    });
  });
  return Object.assign(fake, server, {
    rows: options.rows ?? [],
    latencyMs: 0,
    hold() {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      held = gate;
      return () => {
        if (held === gate) held = undefined;
        release();
      };
    },
    script: (...responses: ScriptedResponse[]) => scripted.push(...responses),
    clearScript: () => scripted.splice(0),
    queries: () =>
      server.requests
        .filter((r) => r.path === '/api/v2/query')
        .map((r) => JSON.parse(r.body) as Record<string, unknown>),
  });
}
