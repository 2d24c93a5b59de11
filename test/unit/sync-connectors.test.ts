// The real connectors against local fakes of Plausible and GA4 (127.0.0.1 only).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ga4Provider, AccessTokenCache } from '../../src/sync/ga4.js';
import { plausibleProvider } from '../../src/sync/plausible.js';
import { ProviderError, parseRetryAfter, type RetryPolicy } from '../../src/sync/provider.js';
import { startGa4Fake, type Ga4Fake, type Ga4FakeRow } from '../fakes/ga4-fake.js';
import {
  PLAUSIBLE_401,
  PLAUSIBLE_429,
  startPlausibleFake,
  type PlausibleFake,
  type PlausibleFakeRow,
} from '../fakes/plausible-fake.js';
import { makeServiceAccount } from '../fakes/keys.js';
import { createOutboundGuard } from '../../src/services/outbound-guard.js';

// Through an outbound guard that allows loopback only (the fakes listen there), as the test runner sets it.
const FAST: RetryPolicy = {
  maxTotalMs: 2_000,
  initialDelayMs: 20,
  maxDelayMs: 100,
  requestTimeoutMs: 2_000,
  dispatcher: createOutboundGuard({ allow: ['127.0.0.0/8', '::1'], allowPrivate: true }).dispatcher(),
};

function plausibleRow(partial: Partial<PlausibleFakeRow>): PlausibleFakeRow {
  return {
    date: '2025-06-01',
    source: 'Google',
    utm_medium: '(not set)',
    utm_campaign: '(not set)',
    entry_page: '/',
    visitors: 1,
    visits: 1,
    pageviews: 1,
    bounce_rate: 0,
    visit_duration: 0,
    ...partial,
  };
}

describe('Plausible connector', () => {
  let fake: PlausibleFake;
  before(async () => {
    fake = await startPlausibleFake({ siteId: 'example.com', apiKey: 'plausible-key' });
  });
  after(() => fake.close());

  const provider = (overrides: Partial<Parameters<typeof plausibleProvider>[0]> = {}) =>
    plausibleProvider({ siteId: 'example.com', apiKey: 'plausible-key', baseUrl: fake.url, retry: FAST, ...overrides });

  it('maps the documented example to stored rows', async () => {
    fake.rows = [
      plausibleRow({
        source: 'Google',
        entry_page: '/pricing',
        visitors: 111,
        visits: 120,
        pageviews: 305,
        bounce_rate: 35.0,
        visit_duration: 195,
      }),
      plausibleRow({
        source: 'Direct / None',
        entry_page: '/',
        visitors: 75,
        visits: 80,
        pageviews: 140,
        bounce_rate: 49.0,
        visit_duration: 63,
      }),
      plausibleRow({ date: '2025-06-02', source: 'Bing' }),
    ];
    const before = fake.requests.length;
    const rows = await provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.deepEqual(rows, [
      {
        date: '2025-06-01',
        source: 'Google',
        medium: '(not set)',
        campaign: '(not set)',
        landing_page: '/pricing',
        sessions: 120,
        users: 111,
        new_users: null,
        pageviews: 305,
        engaged_sessions: null,
        bounce_rate: 0.35,
        avg_session_duration: 195,
        conversions: null,
      },
      {
        date: '2025-06-01',
        source: '(direct)',
        medium: '(not set)',
        campaign: '(not set)',
        landing_page: '/',
        sessions: 80,
        users: 75,
        new_users: null,
        pageviews: 140,
        engaged_sessions: null,
        bounce_rate: 0.49,
        avg_session_duration: 63,
        conversions: null,
      },
    ]);
    const request = fake.requests[before]!;
    assert.equal(request.headers.authorization, 'Bearer plausible-key');
    const body = JSON.parse(request.body) as Record<string, unknown>;
    assert.deepEqual(body.date_range, ['2025-06-01', '2025-06-01']);
    assert.deepEqual(body.dimensions, [
      'time:day',
      'visit:source',
      'visit:utm_medium',
      'visit:utm_campaign',
      'visit:entry_page',
    ]);
    assert.deepEqual(body.include, { total_rows: true });
  });

  it('turns percent bounce rates into exact fractions', async () => {
    fake.rows = [49, 35, 100, 0, 33.3].map((bounce, i) =>
      plausibleRow({ entry_page: `/b${i}`, visits: 10 - i, bounce_rate: bounce }),
    );
    const rows = await provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.deepEqual(
      rows.map((r) => r.bounce_rate),
      [0.49, 0.35, 1, 0, 0.333],
    );
  });

  it('pages with limit/offset until total_rows', async () => {
    fake.rows = Array.from({ length: 5 }, (_, i) => plausibleRow({ entry_page: `/p${i}`, visits: 10 - i }));
    const before = fake.queries().length;
    const rows = await provider({ pageSize: 2 }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.deepEqual(
      rows.map((r) => r.landing_page),
      ['/p0', '/p1', '/p2', '/p3', '/p4'],
    );
    assert.deepEqual(
      fake
        .queries()
        .slice(before)
        .map((q) => q.pagination),
      [
        { limit: 2, offset: 0 },
        { limit: 2, offset: 2 },
        { limit: 2, offset: 4 },
      ],
    );
  });

  it('retries 429 (honouring Retry-After) and 500, then succeeds', async () => {
    fake.rows = [plausibleRow({})];
    fake.script(
      { status: 429, body: { error: PLAUSIBLE_429 }, headers: { 'retry-after': '1' } },
      { status: 500, body: { error: 'Internal server error' } },
    );
    const started = Date.now();
    const rows = await provider({ retry: { ...FAST, maxTotalMs: 5_000 } }).fetchRows({
      from: '2025-06-01',
      to: '2025-06-01',
    });
    assert.equal(rows.length, 1);
    assert.ok(Date.now() - started >= 1_000, 'waited at least the Retry-After second');
  });

  it('gives up within the time budget with the provider reason', async () => {
    fake.script(...Array.from({ length: 50 }, () => ({ status: 503, body: { error: 'Service unavailable' } })));
    const started = Date.now();
    await assert.rejects(
      provider({ retry: { ...FAST, maxTotalMs: 300 } }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error: unknown) => {
        assert.ok(error instanceof ProviderError);
        assert.equal(error.status, 503);
        assert.equal(error.reason, 'Service unavailable');
        return true;
      },
    );
    assert.ok(Date.now() - started < 1_000);
    fake.clearScript();
  });

  it('does not wait for a Retry-After beyond the budget', async () => {
    fake.script({ status: 429, body: { error: PLAUSIBLE_429 }, headers: { 'retry-after': '3600' } });
    const started = Date.now();
    await assert.rejects(
      provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error: unknown) => error instanceof ProviderError && error.status === 429 && error.reason === PLAUSIBLE_429,
    );
    assert.ok(Date.now() - started < 500);
  });

  it('surfaces 4xx at once with the provider reason (no retry)', async () => {
    const before = fake.requests.length;
    await assert.rejects(
      provider({ apiKey: 'wrong' }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error: unknown) => {
        assert.ok(error instanceof ProviderError);
        assert.equal(error.status, 401);
        assert.equal(error.reason, PLAUSIBLE_401);
        assert.match(error.message, /^plausible \(HTTP 401\): Invalid API key/);
        return true;
      },
    );
    assert.equal(fake.requests.length - before, 1);
    fake.script({
      status: 402,
      body: { error: 'The account that owns this API key does not have access to Stats API.' },
    });
    await assert.rejects(
      provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      /HTTP 402.*does not have access to Stats API/,
    );
  });

  it('fails at once when the outbound guard refuses the server: its reason, the setting, no retry', async () => {
    const before = fake.requests.length;
    const started = Date.now();
    // A retry would wait at least 2.5 s (half the first backoff) within a 60 s budget.
    const patient: RetryPolicy = {
      ...FAST,
      maxTotalMs: 60_000,
      initialDelayMs: 5_000,
      dispatcher: createOutboundGuard({ allow: undefined, allowPrivate: false }).dispatcher(),
    };
    await assert.rejects(provider({ retry: patient }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }), (error) => {
      assert.ok(error instanceof ProviderError);
      assert.equal(error.refused, true);
      assert.equal(error.retryable, false);
      assert.match(
        error.message,
        /^plausible: refused by the outbound guard: .*loopback.*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it$/,
      );
      return true;
    });
    assert.ok(Date.now() - started < 1_000, `took ${Date.now() - started} ms`);
    assert.equal(fake.requests.length, before, 'nothing reached the server');
  });

  it('treats an unreachable server as retryable and fails within the budget', async () => {
    const closed = await startPlausibleFake({ siteId: 'x', apiKey: 'y' });
    await closed.close();
    await assert.rejects(
      provider({ baseUrl: closed.url, retry: { ...FAST, maxTotalMs: 200 } }).fetchRows({
        from: '2025-06-01',
        to: '2025-06-01',
      }),
      (error: unknown) => error instanceof ProviderError && /request failed/.test(error.reason),
    );
  });
});

function ga4Row(partial: Partial<Ga4FakeRow>): Ga4FakeRow {
  return {
    date: '2025-06-01',
    sessionSource: 'google',
    sessionMedium: 'organic',
    sessionCampaignName: '(organic)',
    landingPage: '/',
    sessions: 1,
    totalUsers: 1,
    newUsers: 1,
    screenPageViews: 1,
    engagedSessions: 1,
    bounceRate: 0,
    averageSessionDuration: 0,
    keyEvents: 0,
    ...partial,
  };
}

describe('GA4 connector', () => {
  const account = makeServiceAccount();
  let fake: Ga4Fake;
  before(async () => {
    fake = await startGa4Fake({
      propertyId: '123456789',
      clientEmail: account.credentials.client_email,
      publicKey: account.publicKey,
    });
  });
  after(() => fake.close());

  const provider = (overrides: Partial<Parameters<typeof ga4Provider>[0]> = {}) =>
    ga4Provider({
      propertyId: '123456789',
      credentials: account.credentials,
      baseUrl: fake.url,
      tokenUrl: fake.tokenUrl,
      retry: FAST,
      ...overrides,
    });

  it('maps the documented example: string values parsed by type, YYYYMMDD dates', async () => {
    fake.rows = [
      ga4Row({
        sessionSource: 'google',
        sessionMedium: 'organic',
        sessionCampaignName: '(organic)',
        landingPage: '/pricing',
        sessions: 120,
        totalUsers: 111,
        newUsers: 64,
        screenPageViews: 305,
        engagedSessions: 78,
        bounceRate: 0.35,
        averageSessionDuration: 194.76313766428572,
        keyEvents: 6,
      }),
      ga4Row({
        sessionSource: '(direct)',
        sessionMedium: '(none)',
        sessionCampaignName: '(direct)',
        landingPage: '/',
        sessions: 80,
        totalUsers: 75,
        newUsers: 30,
        screenPageViews: 140,
        engagedSessions: 41,
        bounceRate: 0.4875,
        averageSessionDuration: 62.5,
        keyEvents: 2,
      }),
    ];
    const rows = await provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.deepEqual(rows, [
      {
        date: '2025-06-01',
        source: '(direct)',
        medium: '(none)',
        campaign: '(direct)',
        landing_page: '/',
        sessions: 80,
        users: 75,
        new_users: 30,
        pageviews: 140,
        engaged_sessions: 41,
        bounce_rate: 0.4875,
        avg_session_duration: 62.5,
        conversions: 2,
      },
      {
        date: '2025-06-01',
        source: 'google',
        medium: 'organic',
        campaign: '(organic)',
        landing_page: '/pricing',
        sessions: 120,
        users: 111,
        new_users: 64,
        pageviews: 305,
        engaged_sessions: 78,
        bounce_rate: 0.35,
        avg_session_duration: 194.76313766428572,
        conversions: 6,
      },
    ]);
  });

  it('treats an empty report (no rows, no rowCount) as no rows', async () => {
    assert.deepEqual(await provider().fetchRows({ from: '2024-01-01', to: '2024-01-02' }), []);
  });

  it('pages with offset until rowCount, with one token for all pages', async () => {
    fake.rows = Array.from({ length: 5 }, (_, i) => ga4Row({ landingPage: `/p${i}` }));
    const [tokensBefore, reportsBefore] = [fake.tokenRequests, fake.reportBodies().length];
    const rows = await provider({ pageSize: 2 }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.deepEqual(
      rows.map((r) => r.landing_page),
      ['/p0', '/p1', '/p2', '/p3', '/p4'],
    );
    assert.deepEqual(
      fake
        .reportBodies()
        .slice(reportsBefore)
        .map((b) => [b.limit, b.offset]),
      [
        [2, 0],
        [2, 2],
        [2, 4],
      ],
    );
    assert.equal(fake.tokenRequests - tokensBefore, 1);
  });

  it('caches the access token across syncs until shortly before it expires', async () => {
    const cache = new AccessTokenCache();
    const before = fake.tokenRequests;
    await provider({ tokenCache: cache }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    await provider({ tokenCache: cache }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.equal(fake.tokenRequests - before, 1);

    const shortLived = await startGa4Fake({
      propertyId: '123456789',
      clientEmail: account.credentials.client_email,
      publicKey: account.publicKey,
      tokenLifetimeSeconds: 120,
    });
    try {
      const shortCache = new AccessTokenCache();
      const p = () => provider({ baseUrl: shortLived.url, tokenUrl: shortLived.tokenUrl, tokenCache: shortCache });
      await p().fetchRows({ from: '2025-06-01', to: '2025-06-01' });
      await p().fetchRows({ from: '2025-06-01', to: '2025-06-01' });
      assert.equal(shortLived.tokenRequests, 2, 'a token within the renewal margin is not reused');
    } finally {
      await shortLived.close();
    }
  });

  it('fetches a new token once when the API rejects the cached one', async () => {
    const cache = new AccessTokenCache();
    await provider({ tokenCache: cache }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    fake.revokeTokens();
    const before = fake.tokenRequests;
    const rows = await provider({ tokenCache: cache }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    assert.equal(rows.length, 5);
    assert.equal(fake.tokenRequests - before, 1);
  });

  it('is refused a token when the JWT is signed with another key', async () => {
    const stranger = makeServiceAccount(account.credentials.client_email);
    await assert.rejects(
      provider({ credentials: stranger.credentials }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error: unknown) => {
        assert.ok(error instanceof ProviderError);
        assert.equal(error.status, 400);
        assert.equal(error.reason, 'token request failed: invalid_grant: Invalid JWT Signature.');
        return true;
      },
    );
  });

  it('retries RESOURCE_EXHAUSTED and 500, then succeeds', async () => {
    fake.scriptReport(
      {
        status: 429,
        body: { error: { code: 429, message: 'Exhausted concurrent requests quota.', status: 'RESOURCE_EXHAUSTED' } },
      },
      { status: 500, body: { error: { code: 500, message: 'Internal error encountered.', status: 'INTERNAL' } } },
    );
    assert.equal((await provider().fetchRows({ from: '2025-06-01', to: '2025-06-01' })).length, 5);
  });

  it('fails at once when the outbound guard refuses the token URL', async () => {
    const started = Date.now();
    const guard = createOutboundGuard({ allow: ['10.0.0.0/8'], allowPrivate: true });
    await assert.rejects(
      provider({
        retry: { ...FAST, maxTotalMs: 60_000, initialDelayMs: 5_000, dispatcher: guard.dispatcher() },
      }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error) =>
        error instanceof ProviderError &&
        error.refused &&
        /refused by the outbound guard: .*is not on INLET_OUTBOUND_ALLOW/.test(error.message),
    );
    assert.ok(Date.now() - started < 1_000, `took ${Date.now() - started} ms`);
  });

  it('surfaces 403 PERMISSION_DENIED with the provider reason', async () => {
    await assert.rejects(
      provider({ propertyId: '999' }).fetchRows({ from: '2025-06-01', to: '2025-06-01' }),
      (error: unknown) => {
        assert.ok(error instanceof ProviderError);
        assert.equal(error.status, 403);
        assert.equal(error.reason, 'PERMISSION_DENIED: User does not have sufficient permissions for this property.');
        return true;
      },
    );
  });

  it('the fake accepts limit/offset as strings, as GA4 does', async () => {
    const token = (await (await fetch(fake.tokenUrl, { method: 'POST', body: 'grant_type=nope' })).json()) as {
      error: string;
    };
    assert.equal(token.error, 'unsupported_grant_type');
    const cache = new AccessTokenCache();
    await provider({ tokenCache: cache }).fetchRows({ from: '2025-06-01', to: '2025-06-01' });
    const access = await cache.get(`${fake.tokenUrl}\n${account.credentials.client_email}`, () =>
      Promise.reject(new Error('cached')),
    );
    const response = await fetch(`${fake.url}/v1beta/properties/123456789:runReport`, {
      method: 'POST',
      headers: { authorization: `Bearer ${access}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        dateRanges: [{ startDate: '2025-06-01', endDate: '2025-06-01' }],
        dimensions: [{ name: 'date' }],
        metrics: [{ name: 'sessions' }],
        limit: '2',
        offset: '4',
      }),
    });
    const body = (await response.json()) as {
      rows: Array<{ metricValues: Array<{ value: unknown }> }>;
      rowCount: number;
    };
    assert.equal(body.rowCount, 5);
    assert.equal(body.rows.length, 1);
    assert.equal(typeof body.rows[0]!.metricValues[0]!.value, 'string');
  });
});

describe('parseRetryAfter', () => {
  it('reads delta-seconds and HTTP dates', () => {
    assert.equal(parseRetryAfter('2'), 2000);
    assert.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:10 GMT', Date.parse('2026-01-01T00:00:00Z')), 10_000);
    assert.equal(parseRetryAfter(null), undefined);
    assert.equal(parseRetryAfter('soon'), undefined);
  });
});
