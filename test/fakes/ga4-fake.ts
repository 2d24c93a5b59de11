// A fake Google Analytics 4 Data API (v1beta runReport) and OAuth token endpoint, faithful to the wire
// format: the token endpoint verifies the service account's RS256 JWT against its public key; reports
// come back with string values typed by metricHeaders, dates as YYYYMMDD, `limit`/`offset` accepted as
// strings or numbers, `rows`/`rowCount` omitted on an empty report, and Google error bodies.
import { randomBytes } from 'node:crypto';
import { jwtVerify, type CryptoKey, type KeyObject } from 'jose';
import { isCalendarDate, json, startFakeServer, type FakeServer, type ScriptedResponse } from './http-fake.js';

/** One row of the property's data, in typed form; the fake renders it as strings. */
export interface Ga4FakeRow {
  date: string; // YYYY-MM-DD
  sessionSource: string;
  sessionMedium: string;
  sessionCampaignName: string;
  landingPage: string;
  sessions: number;
  totalUsers: number;
  newUsers: number;
  screenPageViews: number;
  engagedSessions: number;
  bounceRate: number;
  averageSessionDuration: number;
  keyEvents: number;
}

export interface Ga4Fake extends FakeServer {
  readonly tokenUrl: string;
  rows: Ga4FakeRow[];
  tokenRequests: number;
  /** Canned responses for the next runReport calls. */
  scriptReport(...responses: ScriptedResponse[]): void;
  /** Canned responses for the next token requests. */
  scriptToken(...responses: ScriptedResponse[]): void;
  /** Every issued access token stops working (as if revoked). */
  revokeTokens(): void;
  reportBodies(): Array<Record<string, unknown>>;
}

const METRIC_TYPES: Record<string, string> = {
  sessions: 'TYPE_INTEGER',
  totalUsers: 'TYPE_INTEGER',
  newUsers: 'TYPE_INTEGER',
  screenPageViews: 'TYPE_INTEGER',
  engagedSessions: 'TYPE_INTEGER',
  bounceRate: 'TYPE_FLOAT',
  averageSessionDuration: 'TYPE_SECONDS',
  keyEvents: 'TYPE_INTEGER',
};
const DIMENSIONS = new Set(['date', 'sessionSource', 'sessionMedium', 'sessionCampaignName', 'landingPage']);

function googleError(code: number, status: string, message: string): ScriptedResponse {
  return json(code, { error: { code, message, status } });
}

function integerParam(value: unknown, fallback: number): number | undefined {
  if (value === undefined) return fallback;
  const text = typeof value === 'number' ? String(value) : value;
  return typeof text === 'string' && /^\d+$/.test(text) ? Number(text) : undefined;
}

export async function startGa4Fake(options: {
  propertyId: string;
  clientEmail: string;
  publicKey: KeyObject | CryptoKey;
  rows?: Ga4FakeRow[];
  tokenLifetimeSeconds?: number;
}): Promise<Ga4Fake> {
  const reportScript: ScriptedResponse[] = [];
  const tokenScript: ScriptedResponse[] = [];
  const tokens = new Map<string, number>(); // token → expiry (ms)
  const fake = {} as Ga4Fake;
  let tokenUrl = '';

  const server = await startFakeServer(async (request) => {
    if (request.method === 'POST' && request.path === '/token') {
      fake.tokenRequests++;
      const next = tokenScript.shift();
      if (next) return next;
      const form = new URLSearchParams(request.body);
      if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer') {
        return json(400, {
          error: 'unsupported_grant_type',
          error_description: 'Invalid grant_type: ' + String(form.get('grant_type')),
        });
      }
      try {
        const { payload, protectedHeader } = await jwtVerify(form.get('assertion') ?? '', options.publicKey, {
          algorithms: ['RS256'],
          issuer: options.clientEmail,
          audience: tokenUrl,
        });
        if (protectedHeader.alg !== 'RS256') throw new Error('alg');
        if (payload.scope !== 'https://www.googleapis.com/auth/analytics.readonly') throw new Error('scope');
        if (typeof payload.iat !== 'number' || typeof payload.exp !== 'number' || payload.exp - payload.iat > 3600)
          throw new Error('exp');
      } catch {
        return json(400, { error: 'invalid_grant', error_description: 'Invalid JWT Signature.' });
      }
      const token = `ya29.fake-${randomBytes(12).toString('hex')}`;
      const lifetime = options.tokenLifetimeSeconds ?? 3599;
      tokens.set(token, Date.now() + lifetime * 1000);
      return json(200, { access_token: token, expires_in: lifetime, token_type: 'Bearer' });
    }

    const match = /^\/v1beta\/properties\/([^/:]+):runReport$/.exec(request.path);
    if (request.method !== 'POST' || !match) return googleError(404, 'NOT_FOUND', 'Requested entity was not found.');
    const next = reportScript.shift();
    if (next) return next;
    const token = /^Bearer (.+)$/.exec(String(request.headers.authorization ?? ''))?.[1];
    const expiry = token === undefined ? undefined : tokens.get(token);
    if (expiry === undefined || expiry < Date.now()) {
      return googleError(
        401,
        'UNAUTHENTICATED',
        'Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.',
      );
    }
    if (decodeURIComponent(match[1]!) !== options.propertyId) {
      return googleError(403, 'PERMISSION_DENIED', 'User does not have sufficient permissions for this property.');
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(request.body) as Record<string, unknown>;
    } catch {
      return googleError(400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.');
    }
    const ranges = body.dateRanges as Array<{ startDate?: unknown; endDate?: unknown }> | undefined;
    const range = ranges?.[0];
    if (
      !Array.isArray(ranges) ||
      ranges.length !== 1 ||
      !isCalendarDate(range?.startDate) ||
      !isCalendarDate(range?.endDate)
    ) {
      return googleError(400, 'INVALID_ARGUMENT', 'Invalid date range.');
    }
    const dimensions = ((body.dimensions ?? []) as Array<{ name?: unknown }>).map((d) => String(d.name));
    const metrics = ((body.metrics ?? []) as Array<{ name?: unknown }>).map((m) => String(m.name));
    const badDimension = dimensions.find((d) => !DIMENSIONS.has(d));
    if (badDimension) return googleError(400, 'INVALID_ARGUMENT', `Field ${badDimension} is not a valid dimension.`);
    const badMetric = metrics.find((m) => !(m in METRIC_TYPES));
    if (badMetric) return googleError(400, 'INVALID_ARGUMENT', `Field ${badMetric} is not a valid metric.`);
    const limit = integerParam(body.limit, 10_000);
    const offset = integerParam(body.offset, 0);
    if (limit === undefined || limit < 1 || limit > 250_000)
      return googleError(400, 'INVALID_ARGUMENT', 'limit must be positive and at most 250000.');
    if (offset === undefined) return googleError(400, 'INVALID_ARGUMENT', 'offset must be non-negative.');

    const matching = fake.rows
      .filter((row) => row.date >= (range!.startDate as string) && row.date <= (range!.endDate as string))
      .map((row) => ({ ...row, date: row.date.replaceAll('-', '') }))
      .sort((a, b) => {
        for (const d of dimensions) {
          const [x, y] = [String(a[d as keyof Ga4FakeRow]), String(b[d as keyof Ga4FakeRow])];
          if (x !== y) return x < y ? -1 : 1;
        }
        return 0;
      });
    const page = matching.slice(offset, offset + limit);
    const response: Record<string, unknown> = {
      dimensionHeaders: dimensions.map((name) => ({ name })),
      metricHeaders: metrics.map((name) => ({ name, type: METRIC_TYPES[name] })),
    };
    if (matching.length > 0) {
      response.rows = page.map((row) => ({
        dimensionValues: dimensions.map((d) => ({ value: String(row[d as keyof Ga4FakeRow]) })),
        metricValues: metrics.map((m) => ({ value: String(row[m as keyof Ga4FakeRow]) })),
      }));
      response.rowCount = matching.length;
    }
    response.metadata = { currencyCode: 'USD', timeZone: 'America/Los_Angeles' };
    if (body.returnPropertyQuota === true) {
      response.propertyQuota = {
        tokensPerDay: { consumed: 1, remaining: 199_999 },
        tokensPerHour: { consumed: 1, remaining: 39_999 },
      };
    }
    response.kind = 'analyticsData#runReport';
    return json(200, response);
  });
  tokenUrl = `${server.url}/token`;

  return Object.assign(fake, server, {
    tokenUrl,
    rows: options.rows ?? [],
    tokenRequests: 0,
    scriptReport: (...responses: ScriptedResponse[]) => reportScript.push(...responses),
    scriptToken: (...responses: ScriptedResponse[]) => tokenScript.push(...responses),
    revokeTokens: () => tokens.clear(),
    reportBodies: () =>
      server.requests
        .filter((r) => r.path.endsWith(':runReport'))
        .map((r) => JSON.parse(r.body) as Record<string, unknown>),
  });
}
