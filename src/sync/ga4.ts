// Google Analytics 4 Data API v1beta `runReport`, authenticated as a service account: we sign the
// RS256 JWT ourselves (jose) so the token URL can be configured, and cache the access token.
import { SignJWT, importPKCS8 } from 'jose';
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

export const GA4_DEFAULT_BASE_URL = 'https://analyticsdata.googleapis.com';
export const GA4_DEFAULT_TOKEN_URL = 'https://oauth2.googleapis.com/token';
const SCOPE = 'https://www.googleapis.com/auth/analytics.readonly';
/** Renew this long before the token expires, so a long sync never sends an expired token. */
const TOKEN_RENEW_MARGIN_MS = 5 * 60_000;

const DIMENSIONS = ['date', 'sessionSource', 'sessionMedium', 'sessionCampaignName', 'landingPage'] as const;
const METRICS = {
  sessions: 'sessions',
  users: 'totalUsers',
  new_users: 'newUsers',
  pageviews: 'screenPageViews',
  engaged_sessions: 'engagedSessions',
  bounce_rate: 'bounceRate',
  avg_session_duration: 'averageSessionDuration',
  conversions: 'keyEvents',
} as const;

export interface ServiceAccountCredentials {
  client_email: string;
  private_key: string;
}

export interface Ga4Options {
  propertyId: string;
  credentials: ServiceAccountCredentials;
  baseUrl?: string;
  tokenUrl?: string;
  /** Rows per request (GA4 allows up to 250,000). */
  pageSize?: number;
  retry?: RetryPolicy;
  /** Shared across syncs so every sync does not fetch a new token. */
  tokenCache?: AccessTokenCache;
}

interface CachedToken {
  token: string;
  expiresAt: number;
}

/** Access tokens per (token URL, service account), kept until shortly before they expire. */
export class AccessTokenCache {
  private readonly tokens = new Map<string, CachedToken>();
  private readonly pending = new Map<string, Promise<CachedToken>>();

  async get(key: string, fetchToken: () => Promise<CachedToken>): Promise<string> {
    const cached = this.tokens.get(key);
    if (cached && cached.expiresAt - TOKEN_RENEW_MARGIN_MS > Date.now()) return cached.token;
    let pending = this.pending.get(key);
    if (!pending) {
      pending = fetchToken().finally(() => this.pending.delete(key));
      this.pending.set(key, pending);
    }
    const fresh = await pending;
    this.tokens.set(key, fresh);
    return fresh.token;
  }

  drop(key: string): void {
    this.tokens.delete(key);
  }
}

/** Checks a service-account JSON enough to fail at connect time rather than at the first sync. */
export async function checkServiceAccount(credentials: ServiceAccountCredentials): Promise<void> {
  await importPKCS8(credentials.private_key, 'RS256');
}

function parseMetric(value: string | undefined, type: string | undefined, name: string): number | null {
  if (value === undefined || value === '') return null;
  const number = Number(value);
  if (!Number.isFinite(number)) throw new ProviderError('ga4', `metric ${name} is not a number: "${value}"`);
  // TYPE_MILLISECONDS etc. are converted to the stored units (seconds); integers and floats are as given.
  if (type === 'TYPE_MILLISECONDS') return number / 1000;
  if (type === 'TYPE_MINUTES') return number * 60;
  if (type === 'TYPE_HOURS') return number * 3600;
  return number;
}

export function ga4Provider(options: Ga4Options): TrafficProvider {
  const baseUrl = (options.baseUrl ?? GA4_DEFAULT_BASE_URL).replace(/\/+$/, '');
  const tokenUrl = options.tokenUrl ?? GA4_DEFAULT_TOKEN_URL;
  const pageSize = options.pageSize ?? 250_000;
  const policy = options.retry ?? DEFAULT_RETRY_POLICY;
  const cache = options.tokenCache ?? new AccessTokenCache();
  const cacheKey = `${tokenUrl}\n${options.credentials.client_email}`;
  const propertyId = options.propertyId.replace(/^properties\//, '');

  async function fetchToken(): Promise<CachedToken> {
    let key: Awaited<ReturnType<typeof importPKCS8>>;
    try {
      key = await importPKCS8(options.credentials.private_key, 'RS256');
    } catch {
      throw new ProviderError('ga4', 'the service account private_key is not a PEM PKCS#8 RSA key');
    }
    const now = Math.floor(Date.now() / 1000);
    const assertion = await new SignJWT({ scope: SCOPE })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
      .setIssuer(options.credentials.client_email)
      .setAudience(tokenUrl)
      .setIssuedAt(now)
      .setExpirationTime(now + 3600)
      .sign(key);
    const body = (await requestJson({
      provider: 'ga4',
      url: tokenUrl,
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion }).toString(),
      policy,
      reasonOf: (status, json, text) => `token request failed: ${errorReason(status, json, text)}`,
    })) as { access_token?: unknown; expires_in?: unknown };
    if (typeof body.access_token !== 'string') throw new ProviderError('ga4', 'the token response has no access_token');
    const expiresIn = typeof body.expires_in === 'number' ? body.expires_in : 3600;
    return { token: body.access_token, expiresAt: Date.now() + expiresIn * 1000 };
  }

  async function runReport(range: DateRange, offset: number): Promise<Record<string, unknown>> {
    const request = (token: string) =>
      requestJson({
        provider: 'ga4',
        url: `${baseUrl}/v1beta/properties/${encodeURIComponent(propertyId)}:runReport`,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({
          dateRanges: [{ startDate: range.from, endDate: range.to }],
          dimensions: DIMENSIONS.map((name) => ({ name })),
          metrics: Object.values(METRICS).map((name) => ({ name })),
          orderBys: DIMENSIONS.map((dimensionName) => ({ dimension: { dimensionName } })),
          limit: pageSize,
          offset,
          keepEmptyRows: false,
          returnPropertyQuota: true,
        }),
        policy,
        reasonOf: errorReason,
      }) as Promise<Record<string, unknown>>;
    const token = await cache.get(cacheKey, fetchToken);
    try {
      return await request(token);
    } catch (error) {
      // A token revoked or expired early: fetch a new one, once.
      if (!(error instanceof ProviderError) || error.status !== 401) throw error;
      cache.drop(cacheKey);
      return request(await cache.get(cacheKey, fetchToken));
    }
  }

  return {
    name: 'ga4',
    async fetchRows(range) {
      const rows: TrafficRow[] = [];
      for (let offset = 0; ;) {
        const body = await runReport(range, offset);
        const pageRows = body.rows === undefined ? [] : body.rows;
        if (!Array.isArray(pageRows)) throw new ProviderError('ga4', 'the response rows are not a list');
        const rowCount = typeof body.rowCount === 'number' ? body.rowCount : 0;
        if (pageRows.length > 0) rows.push(...mapPage(body, pageRows));
        offset += pageRows.length;
        if (pageRows.length === 0 || offset >= rowCount) return rows;
      }
    },
  };
}

function mapPage(body: Record<string, unknown>, pageRows: unknown[]): TrafficRow[] {
  const dimensionHeaders = (Array.isArray(body.dimensionHeaders) ? body.dimensionHeaders : []) as Array<{
    name?: unknown;
  }>;
  const metricHeaders = (Array.isArray(body.metricHeaders) ? body.metricHeaders : []) as Array<{
    name?: unknown;
    type?: unknown;
  }>;
  const dimensionIndex = (name: string) => {
    const index = dimensionHeaders.findIndex((h) => h.name === name);
    if (index < 0) throw new ProviderError('ga4', `the response lacks dimension ${name}`);
    return index;
  };
  const metricIndex = new Map(metricHeaders.map((h, i) => [h.name, i]));
  const [dateAt, sourceAt, mediumAt, campaignAt, pageAt] = DIMENSIONS.map(dimensionIndex) as [
    number,
    number,
    number,
    number,
    number,
  ];

  return pageRows.map((raw) => {
    const row = raw as { dimensionValues?: Array<{ value?: string }>; metricValues?: Array<{ value?: string }> };
    const dims = row.dimensionValues ?? [];
    const values = row.metricValues ?? [];
    const dimension = (at: number) => {
      const value = dims[at]?.value;
      if (typeof value !== 'string')
        throw new ProviderError('ga4', `a row lacks a dimension value: ${JSON.stringify(raw).slice(0, 200)}`);
      return value;
    };
    const metric = (name: string) => {
      const at = metricIndex.get(name);
      if (at === undefined) return null; // not supplied: stays null
      const header = metricHeaders[at]!;
      return parseMetric(values[at]?.value, typeof header.type === 'string' ? header.type : undefined, name);
    };
    const compact = dimension(dateAt);
    const date = /^\d{8}$/.exec(compact)
      ? `${compact.slice(0, 4)}-${compact.slice(4, 6)}-${compact.slice(6, 8)}`
      : undefined;
    if (date === undefined) throw new ProviderError('ga4', `unexpected date "${compact}"`);
    return {
      date,
      source: dimension(sourceAt),
      medium: dimension(mediumAt),
      campaign: dimension(campaignAt),
      landing_page: dimension(pageAt),
      sessions: metric(METRICS.sessions),
      users: metric(METRICS.users),
      new_users: metric(METRICS.new_users),
      pageviews: metric(METRICS.pageviews),
      engaged_sessions: metric(METRICS.engaged_sessions),
      bounce_rate: metric(METRICS.bounce_rate),
      avg_session_duration: metric(METRICS.avg_session_duration),
      conversions: metric(METRICS.conversions),
    };
  });
}
