// GET /api/v2/traffic_reports and the traffic admin API through the real app (app.inject), on the
// dialect under test, with Plausible and GA4 fakes on 127.0.0.1.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import {
  PLAUSIBLE_401,
  startPlausibleFake,
  type PlausibleFake,
  type PlausibleFakeRow,
} from './fakes/plausible-fake.js';
import { startGa4Fake, type Ga4Fake } from './fakes/ga4-fake.js';
import { makeServiceAccount } from './fakes/keys.js';

function daysAgo(n: number): string {
  return new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
}

function prow(partial: Partial<PlausibleFakeRow>): PlausibleFakeRow {
  return {
    date: daysAgo(1),
    source: 'Google',
    utm_medium: 'organic',
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

describe('traffic reports over HTTP', () => {
  let ctx: TestContext;
  let plausible: PlausibleFake;
  let ga4: Ga4Fake;
  const account = makeServiceAccount();
  let acme: { id: string; eventsKey: string; reportsKey: string };
  let globex: { id: string; eventsKey: string; reportsKey: string };

  before(async () => {
    ctx = await createTestApp({ trafficRetryMaxMs: 500 });
    plausible = await startPlausibleFake({ siteId: 'acme.example', apiKey: 'plausible-secret-key' });
    ga4 = await startGa4Fake({
      propertyId: '314159',
      clientEmail: account.credentials.client_email,
      publicKey: account.publicKey,
    });
    acme = await ctx.product('Acme');
    globex = await ctx.product('Globex');
  });
  after(async () => {
    await ctx.close();
    await plausible.close();
    await ga4.close();
  });

  const get = (url: string, key: string) => ctx.app.inject({ method: 'GET', url, headers: bearer(key) });

  it('401 without a valid key (with WWW-Authenticate), 403 with an events key', async () => {
    const none = await ctx.app.inject({ method: 'GET', url: '/api/v2/traffic_reports' });
    assert.equal(none.statusCode, 401);
    assert.equal(problemOf(none).code, 'unauthorized');
    assert.equal(none.headers['www-authenticate'], 'Bearer');
    const wrong = await get('/api/v2/traffic_reports', 'inlet_rp_notarealkeynotarealkeynotarealkey12');
    assert.equal(wrong.statusCode, 401);
    const events = await get('/api/v2/traffic_reports', acme.eventsKey);
    assert.equal(events.statusCode, 403);
    assert.equal(problemOf(events).code, 'forbidden');
  });

  it('200 with an empty report when no source is connected, with the default range and grouping', async () => {
    const res = await get('/api/v2/traffic_reports', acme.reportsKey);
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.deepEqual(body.data, []);
    assert.deepEqual(body.meta, {
      from: daysAgo(28),
      to: daysAgo(1),
      group_by: ['source', 'medium', 'campaign', 'landing_page'],
      totals: {
        sessions: null,
        users: null,
        new_users: null,
        pageviews: null,
        engaged_sessions: null,
        bounce_rate: null,
        avg_session_duration: null,
        conversions: null,
      },
      provider: null,
      last_synced_at: null,
      next_cursor: null,
    });
  });

  it('400 naming each bad query parameter', async () => {
    const cases: Array<[string, string]> = [
      ['?foo=1', '/foo'],
      ['?from=2026-02-30', '/from'],
      ['?from=2026-03-02&to=2026-03-01', '/from'],
      ['?from=2024-01-01&to=2025-06-01', '/to'],
      ['?group_by=source,country', '/group_by'],
      ['?sort=-visits', '/sort'],
      ['?limit=0', '/limit'],
      ['?limit=1001', '/limit'],
      ['?cursor=garbage!', '/cursor'],
      ['?source=a&source=b', '/source'],
    ];
    for (const [query, pointer] of cases) {
      const res = await get(`/api/v2/traffic_reports${query}`, acme.reportsKey);
      assert.equal(res.statusCode, 400, query);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(
        problem.errors?.some((e) => e.pointer === pointer),
        `${query}: ${JSON.stringify(problem.errors)}`,
      );
    }
  });

  it('admin: connects a source without echoing the secret; validates it; needs the admin token', async () => {
    const url = `/admin/v1/products/${acme.id}/traffic_source`;
    const unauthorized = await ctx.app.inject({
      method: 'PUT',
      url,
      payload: { provider: 'plausible', site_id: 'a', api_key: 'b' },
    });
    assert.equal(unauthorized.statusCode, 401);
    const invalid = await ctx.app.inject({
      method: 'PUT',
      url,
      headers: adminHeaders(),
      payload: { provider: 'plausible', site_id: 'acme.example', apiKey: 'x' },
    });
    assert.equal(invalid.statusCode, 400);
    assert.deepEqual(
      problemOf(invalid)
        .errors?.map((e) => e.pointer)
        .sort(),
      ['/apiKey', '/api_key'],
    );
    const missing = await ctx.app.inject({
      method: 'PUT',
      url: '/admin/v1/products/prd_nope/traffic_source',
      headers: adminHeaders(),
      payload: { provider: 'plausible', site_id: 'a', api_key: 'b' },
    });
    assert.equal(missing.statusCode, 404);

    const res = await ctx.app.inject({
      method: 'PUT',
      url,
      headers: adminHeaders(),
      payload: {
        provider: 'plausible',
        site_id: 'acme.example',
        api_key: 'plausible-secret-key',
        base_url: plausible.url,
      },
    });
    assert.equal(res.statusCode, 200);
    assert.ok(!res.body.includes('plausible-secret-key'));
    assert.deepEqual(Object.keys(res.json().data).sort(), [
      'base_url',
      'created_at',
      'product_id',
      'provider',
      'site_id',
      'updated_at',
    ]);
    const shown = await ctx.app.inject({ method: 'GET', url, headers: adminHeaders() });
    assert.equal(shown.json().data.site_id, 'acme.example');
    assert.ok(!shown.body.includes('plausible-secret-key'));
  });

  it('admin: sync answers when done; the report then aggregates, totals weight by sessions, and pages by cursor', async () => {
    plausible.rows = [
      prow({
        date: daysAgo(2),
        source: 'Google',
        entry_page: '/pricing',
        visits: 100,
        visitors: 90,
        pageviews: 300,
        bounce_rate: 50,
        visit_duration: 60,
      }),
      prow({
        date: daysAgo(1),
        source: 'Google',
        entry_page: '/pricing',
        visits: 300,
        visitors: 250,
        pageviews: 500,
        bounce_rate: 10,
        visit_duration: 20,
      }),
      prow({
        date: daysAgo(1),
        source: 'Direct / None',
        utm_medium: '(not set)',
        entry_page: '/',
        visits: 50,
        visitors: 45,
        pageviews: 60,
        bounce_rate: 90,
        visit_duration: 5,
      }),
      ...Array.from({ length: 5 }, (_, i) =>
        prow({
          date: daysAgo(3),
          source: `ref${i}.example`,
          utm_medium: 'referral',
          entry_page: '/blog',
          visits: 10 + i,
        }),
      ),
    ];
    const sync = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${acme.id}/traffic_source/sync`,
      headers: adminHeaders(),
    });
    assert.equal(sync.statusCode, 200, sync.body);
    assert.deepEqual(sync.json().data, { status: 'succeeded', from: daysAgo(89), to: daysAgo(0), rows: 8 });

    const bySource = await get(
      `/api/v2/traffic_reports?group_by=source&from=${daysAgo(3)}&to=${daysAgo(1)}`,
      acme.reportsKey,
    );
    assert.equal(bySource.statusCode, 200);
    const body = bySource.json();
    assert.deepEqual(body.data[0], {
      source: 'Google',
      sessions: 400,
      users: 340,
      new_users: null,
      pageviews: 800,
      engaged_sessions: null,
      bounce_rate: 0.2,
      avg_session_duration: 30,
      conversions: null,
    });
    assert.equal(body.data[1].source, '(direct)');
    assert.equal(body.meta.provider, 'plausible');
    assert.ok(typeof body.meta.last_synced_at === 'string');
    assert.equal(body.meta.totals.sessions, 400 + 50 + 60);
    const weighted = (0.5 * 100 + 0.1 * 300 + 0.9 * 50 + 0 * 60) / 510;
    assert.ok(Math.abs(body.meta.totals.bounce_rate - weighted) < 1e-9);

    // Paging: 7 groups by 3 → 3 pages, same rows in the same order as one page, totals on every page.
    const all = (
      await get(
        `/api/v2/traffic_reports?group_by=source,landing_page&from=${daysAgo(3)}&to=${daysAgo(1)}&limit=1000`,
        acme.reportsKey,
      )
    ).json();
    const seen: unknown[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: { data: unknown[]; meta: { next_cursor: string | null; totals: unknown } } = (
        await get(
          `/api/v2/traffic_reports?group_by=source,landing_page&from=${daysAgo(3)}&to=${daysAgo(1)}&limit=3${cursor ? `&cursor=${cursor}` : ''}`,
          acme.reportsKey,
        )
      ).json();
      seen.push(...page.data);
      assert.deepEqual(page.meta.totals, all.meta.totals);
      cursor = page.meta.next_cursor;
      pages++;
    } while (cursor !== null && pages < 10);
    assert.equal(pages, 3);
    assert.deepEqual(seen, all.data);
    assert.equal(all.data.length, 7);

    // A cursor belongs to its query.
    const first = (
      await get(`/api/v2/traffic_reports?group_by=source&limit=1&from=${daysAgo(3)}&to=${daysAgo(1)}`, acme.reportsKey)
    ).json();
    const reused = await get(
      `/api/v2/traffic_reports?group_by=medium&limit=1&cursor=${first.meta.next_cursor}&from=${daysAgo(3)}&to=${daysAgo(1)}`,
      acme.reportsKey,
    );
    assert.equal(reused.statusCode, 400);
    assert.equal(problemOf(reused).errors?.[0]?.pointer, '/cursor');
  });

  it("filters, sorts ascending by a dimension, and never shows another product's rows", async () => {
    const filtered = (
      await get(
        `/api/v2/traffic_reports?group_by=date,source&medium=referral&sort=source&from=${daysAgo(3)}&to=${daysAgo(1)}`,
        acme.reportsKey,
      )
    ).json();
    assert.deepEqual(
      filtered.data.map((r: { source: string }) => r.source),
      ['ref0.example', 'ref1.example', 'ref2.example', 'ref3.example', 'ref4.example'],
    );
    assert.ok(filtered.data.every((r: Record<string, unknown>) => r.date === daysAgo(3) && !('medium' in r)));

    const other = (await get(`/api/v2/traffic_reports?from=${daysAgo(3)}&to=${daysAgo(1)}`, globex.reportsKey)).json();
    assert.deepEqual(other.data, []);
    assert.equal(other.meta.provider, null);
  });

  it('admin: a provider failure is 502 upstream_error with its reason, and the run is listed', async () => {
    await ctx.app.inject({
      method: 'PUT',
      url: `/admin/v1/products/${globex.id}/traffic_source`,
      headers: adminHeaders(),
      payload: { provider: 'plausible', site_id: 'acme.example', api_key: 'revoked-key', base_url: plausible.url },
    });
    const res = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${globex.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: { from: daysAgo(3), to: daysAgo(1) },
    });
    assert.equal(res.statusCode, 502);
    const problem = problemOf(res);
    assert.equal(problem.code, 'upstream_error');
    assert.ok(problem.detail.includes(PLAUSIBLE_401), problem.detail);
    assert.equal(problem.provider, 'plausible');
    assert.ok(!res.body.includes('revoked-key'));

    const runs = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${globex.id}/traffic_source/runs`,
      headers: adminHeaders(),
    });
    assert.equal(runs.statusCode, 200);
    const [run] = runs.json().data;
    assert.equal(run.outcome, 'failed');
    assert.equal(run.kind, 'admin');
    assert.deepEqual([run.from, run.to, run.rows], [daysAgo(3), daysAgo(1), null]);
    assert.ok(run.error.includes(PLAUSIBLE_401));
  });

  it('admin: retries 429/5xx within the configured time, then gives up with 502', async () => {
    plausible.script(...Array.from({ length: 100 }, () => ({ status: 500, body: { error: 'Internal server error' } })));
    const started = Date.now();
    const res = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${acme.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: {},
    });
    assert.equal(res.statusCode, 502);
    assert.ok(problemOf(res).detail.includes('Internal server error'));
    assert.ok(Date.now() - started < 3_000, 'bounded by INLET_TRAFFIC_RETRY_MAX_MS');
    plausible.clearScript();
  });

  it('admin: sync range validation, unknown product, product without source', async () => {
    const bad = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${acme.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: { from: daysAgo(1), to: daysAgo(3) },
    });
    assert.equal(bad.statusCode, 400);
    assert.equal(problemOf(bad).errors?.[0]?.pointer, '/from');
    const unknownField = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${acme.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: { since: daysAgo(1) },
    });
    assert.equal(unknownField.statusCode, 400);
    const unknown = await ctx.app.inject({
      method: 'POST',
      url: '/admin/v1/products/prd_nope/traffic_source/sync',
      headers: adminHeaders(),
    });
    assert.equal(unknown.statusCode, 404);
    const fresh = await ctx.product('Initech');
    const noSource = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${fresh.id}/traffic_source/sync`,
      headers: adminHeaders(),
    });
    assert.equal(noSource.statusCode, 404);
    assert.equal(problemOf(noSource).code, 'not_found');
  });

  it('admin: connects and syncs GA4 with a service account', async () => {
    const initech = await ctx.product('GA Corp');
    ga4.rows = [
      {
        date: daysAgo(1),
        sessionSource: 'google',
        sessionMedium: 'cpc',
        sessionCampaignName: 'spring',
        landingPage: '/',
        sessions: 40,
        totalUsers: 30,
        newUsers: 20,
        screenPageViews: 90,
        engagedSessions: 25,
        bounceRate: 0.25,
        averageSessionDuration: 42.5,
        keyEvents: 3,
      },
    ];
    const put = await ctx.app.inject({
      method: 'PUT',
      url: `/admin/v1/products/${initech.id}/traffic_source`,
      headers: adminHeaders(),
      payload: {
        provider: 'ga4',
        property_id: '314159',
        credentials: account.credentials,
        base_url: ga4.url,
        token_url: ga4.tokenUrl,
      },
    });
    assert.equal(put.statusCode, 200, put.body);
    assert.ok(!put.body.includes('PRIVATE KEY'));
    assert.equal(put.json().data.client_email, account.credentials.client_email);
    const sync = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${initech.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: { from: daysAgo(2), to: daysAgo(1) },
    });
    assert.deepEqual(sync.json().data, { status: 'succeeded', from: daysAgo(2), to: daysAgo(1), rows: 1 });
    const report = (await get('/api/v2/traffic_reports?group_by=campaign', initech.reportsKey)).json();
    assert.deepEqual(report.data, [
      {
        campaign: 'spring',
        sessions: 40,
        users: 30,
        new_users: 20,
        pageviews: 90,
        engaged_sessions: 25,
        bounce_rate: 0.25,
        avg_session_duration: 42.5,
        conversions: 3,
      },
    ]);
    assert.equal(report.meta.provider, 'ga4');
  });
});

describe('traffic sources and the outbound guard over HTTP', () => {
  let ctx: TestContext;
  let strict: TestContext;
  let plausible: PlausibleFake;

  before(async () => {
    ctx = await createTestApp();
    // An instance with the defaults of a real one: public addresses only, no private targets.
    strict = await createTestApp({ outboundAllow: undefined, outboundAllowPrivate: false });
    plausible = await startPlausibleFake({ siteId: 'acme.example', apiKey: 'plausible-secret-key' });
  });
  after(async () => {
    await ctx.close();
    await strict.close();
    await plausible.close();
  });

  const connect = (app: TestContext, productId: string, baseUrl: string) =>
    app.app.inject({
      method: 'PUT',
      url: `/admin/v1/products/${productId}/traffic_source`,
      headers: adminHeaders(),
      payload: { provider: 'plausible', site_id: 'acme.example', api_key: 'plausible-secret-key', base_url: baseUrl },
    });

  it('connecting a source whose base_url the guard refuses is 400 naming the field, the reason and the setting', async () => {
    const product = await strict.product('Private');
    const res = await connect(strict, product.id, plausible.url);
    assert.equal(res.statusCode, 400);
    const problem = problemOf(res);
    assert.equal(problem.code, 'validation_error');
    assert.equal(problem.errors?.[0]?.pointer, '/base_url');
    assert.match(
      problem.errors?.[0]?.message ?? '',
      /^refused by the outbound guard: 127\.0\.0\.1 resolves to 127\.0\.0\.1, a loopback, private or link-local address .*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it$/,
    );
    assert.match(problem.detail, /\/base_url: refused by the outbound guard/);
    const shown = await strict.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${product.id}/traffic_source`,
      headers: adminHeaders(),
    });
    assert.equal(shown.statusCode, 404, 'nothing was connected');

    // The test runner's allow list (loopback only): another address is not on it.
    const listed = await ctx.product('Listed');
    const other = await connect(ctx, listed.id, 'http://10.0.0.1:8000');
    assert.equal(other.statusCode, 400);
    assert.match(problemOf(other).errors?.[0]?.message ?? '', /is not on INLET_OUTBOUND_ALLOW; listing it there/);
  });

  it('a sync the guard refuses answers 502 at once with the reason and the setting, without retrying', async () => {
    // A source stored while the setting allowed it (written straight to storage: connecting is refused now).
    const product = await strict.product('Stored');
    const at = new Date().toISOString();
    await strict.services.storage.traffic.putSource({
      productId: product.id,
      provider: 'plausible',
      config: { site_id: 'acme.example', base_url: plausible.url },
      secret: { api_key: 'plausible-secret-key' },
      createdAt: at,
      updatedAt: at,
    });
    const queries = plausible.queries().length;
    const started = Date.now();
    const res = await strict.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${product.id}/traffic_source/sync`,
      headers: adminHeaders(),
      payload: {},
    });
    const took = Date.now() - started;
    assert.equal(res.statusCode, 502);
    const problem = problemOf(res);
    assert.equal(problem.code, 'upstream_error');
    assert.match(
      problem.detail,
      /^The traffic provider was not contacted: plausible: refused by the outbound guard: .*loopback.*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it$/,
    );
    assert.ok(
      took < 1_000,
      `answered after ${took} ms (INLET_TRAFFIC_RETRY_MAX_MS is ${strict.services.config.trafficRetryMaxMs})`,
    );
    assert.equal(plausible.queries().length, queries, 'nothing reached the provider');
    const runs = await strict.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${product.id}/traffic_source/runs`,
      headers: adminHeaders(),
    });
    const [run] = runs.json().data;
    assert.equal(run.outcome, 'failed');
    assert.match(run.error, /refused by the outbound guard/);
  });
});
