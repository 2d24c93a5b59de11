// The admin reads the console needs (clarifications §28), through the real app on the dialect under test:
// the traffic report with the admin token, a user looked up by identifier, and the service's stats.
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { adminHeaders, bearer, createTestApp, dialect, problemOf, type TestContext } from './helpers.js';
import { startPlausibleFake, type PlausibleFake } from './fakes/plausible-fake.js';

function daysAgo(n: number): string {
  return new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
}

describe('admin reads for the console', () => {
  let ctx: TestContext;
  let plausible: PlausibleFake;
  let acme: { id: string; eventsKey: string; reportsKey: string };

  before(async () => {
    ctx = await createTestApp({ trafficRetryMaxMs: 500 });
    plausible = await startPlausibleFake({
      siteId: 'acme.example',
      apiKey: 'plausible-secret-key',
      rows: [
        {
          date: daysAgo(2),
          source: 'Google',
          utm_medium: 'organic',
          utm_campaign: '(not set)',
          entry_page: '/',
          visitors: 7,
          visits: 9,
          pageviews: 20,
          bounce_rate: 50,
          visit_duration: 30,
        },
        {
          date: daysAgo(1),
          source: 'Newsletter',
          utm_medium: 'email',
          utm_campaign: 'spring',
          entry_page: '/pricing',
          visitors: 3,
          visits: 4,
          pageviews: 5,
          bounce_rate: 25,
          visit_duration: 60,
        },
      ],
    });
    acme = await ctx.product('Acme');
  });
  after(async () => {
    await ctx.close();
    await plausible.close();
  });

  const admin = (url: string) => ctx.app.inject({ method: 'GET', url, headers: adminHeaders() });

  it('GET …/traffic_reports answers what GET /api/v2/traffic_reports answers, with the admin token', async () => {
    const put = await ctx.app.inject({
      method: 'PUT',
      url: `/admin/v1/products/${acme.id}/traffic_source`,
      headers: adminHeaders(),
      payload: {
        provider: 'plausible',
        site_id: 'acme.example',
        api_key: 'plausible-secret-key',
        base_url: plausible.url,
      },
    });
    assert.equal(put.statusCode, 200);
    const sync = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${acme.id}/traffic_source/sync`,
      headers: adminHeaders(),
    });
    assert.equal(sync.statusCode, 200, sync.body);

    for (const query of ['', '?group_by=date', '?group_by=source&medium=email', '?group_by=date,source&sort=date']) {
      const viaAdmin = await admin(`/admin/v1/products/${acme.id}/traffic_reports${query}`);
      const viaKey = await ctx.app.inject({
        method: 'GET',
        url: `/api/v2/traffic_reports${query}`,
        headers: bearer(acme.reportsKey),
      });
      assert.equal(viaAdmin.statusCode, 200, viaAdmin.body);
      assert.deepEqual(viaAdmin.json(), viaKey.json(), query);
    }
    const byDate = (await admin(`/admin/v1/products/${acme.id}/traffic_reports?group_by=date&sort=date`)).json();
    assert.deepEqual(
      byDate.data.map((row: { date: string; sessions: number }) => [row.date, row.sessions]),
      [
        [daysAgo(2), 9],
        [daysAgo(1), 4],
      ],
    );
    assert.equal(byDate.meta.provider, 'plausible');
  });

  it('…/traffic_reports: bad parameters are 400, an unknown product 404, a reports key 401', async () => {
    const bad = await admin(`/admin/v1/products/${acme.id}/traffic_reports?group_by=nope`);
    assert.equal(bad.statusCode, 400);
    assert.equal(problemOf(bad).code, 'validation_error');
    const unknown = await admin(`/admin/v1/products/${acme.id}/traffic_reports?colour=red`);
    assert.equal(unknown.statusCode, 400);
    assert.equal((await admin('/admin/v1/products/prd_nope/traffic_reports')).statusCode, 404);
    const withKey = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${acme.id}/traffic_reports`,
      headers: bearer(acme.reportsKey),
    });
    assert.equal(withKey.statusCode, 401);
  });

  it('GET …/users?identifier=kind:value finds the user holding it, with its merges; the email is compared as stored', async () => {
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(acme.eventsKey),
      payload: {
        external_id: 'user_1',
        identifiers: { email: 'Ada@Example.com', stripe_customer: 'cus:42' },
        traits: { plan: 'pro' },
      },
    });
    assert.ok([200, 201].includes(identify.statusCode), identify.body);
    const alias = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(acme.eventsKey),
      payload: { from_external_id: 'anon_9', to_external_id: 'user_1' },
    });
    assert.ok([200, 201].includes(alias.statusCode), alias.body);

    const byEmail = await admin(
      `/admin/v1/products/${acme.id}/users?identifier=${encodeURIComponent('email: ADA@example.com ')}`,
    );
    assert.equal(byEmail.statusCode, 200, byEmail.body);
    const user = byEmail.json().data;
    assert.equal(user.external_id, 'user_1');
    assert.deepEqual(user.aliases, ['anon_9']);
    assert.equal(user.merges.length, 1);
    assert.equal(user.merges[0].from_external_id, 'anon_9');
    // The value is everything after the first colon.
    const byStripe = await admin(
      `/admin/v1/products/${acme.id}/users?identifier=${encodeURIComponent('stripe_customer:cus:42')}&events_limit=0`,
    );
    assert.equal(byStripe.statusCode, 200, byStripe.body);
    assert.deepEqual(byStripe.json().data.events, []);
    // The same answer as the lookup by an alias.
    const byAlias = await admin(`/admin/v1/products/${acme.id}/users/anon_9`);
    assert.deepEqual({ ...byAlias.json().data, events: [] }, { ...user, events: [] });
    // The identified flag (clarifications §18): set by the native identify; not by an anonymous-only Segment identify.
    assert.equal(user.identified, true);
    const basic = { authorization: `Basic ${Buffer.from(`${acme.eventsKey}:`).toString('base64')}` };
    const anonymous = await ctx.app.inject({
      method: 'POST',
      url: '/v1/identify',
      headers: basic,
      payload: { anonymousId: 'anon_only', messageId: 'anon-only-1', traits: { plan: 'free' } },
    });
    assert.equal(anonymous.statusCode, 200, anonymous.body);
    const anon = await admin(`/admin/v1/products/${acme.id}/users/anon_only`);
    assert.equal(anon.statusCode, 200, anon.body);
    assert.equal(anon.json().data.identified, false);
  });

  it('…/users?identifier: unknown identifier 404, malformed 400, missing 400', async () => {
    const none = await admin(`/admin/v1/products/${acme.id}/users?identifier=email:nobody@example.com`);
    assert.equal(none.statusCode, 404);
    assert.equal(problemOf(none).code, 'not_found');
    for (const bad of ['email', 'Email:x@y.z', ':x', 'email:']) {
      const res = await admin(`/admin/v1/products/${acme.id}/users?identifier=${encodeURIComponent(bad)}`);
      assert.equal(res.statusCode, 400, bad);
      assert.equal(problemOf(res).errors?.[0]?.pointer, '/identifier', bad);
    }
    assert.equal((await admin(`/admin/v1/products/${acme.id}/users`)).statusCode, 400);
  });

  it('GET /stats: ingest counts and rate, rejections, commit latency, pool, destinations by status', async () => {
    const first = (await admin('/admin/v1/stats')).json().data;
    for (let i = 0; i < 3; i++) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(acme.eventsKey),
        payload: { event_type: 'page', action: 'viewed', subject_type: 'user', subject_id: 'u1' },
      });
      assert.equal(res.statusCode, 201, res.body);
    }
    const rejected = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(acme.eventsKey),
      payload: {
        events: [
          { event_type: 'page', action: 'viewed', subject_type: 'user', subject_id: 'u1', occurred_at: 'yesterday' },
        ],
      },
    });
    assert.ok(rejected.statusCode < 500, rejected.body);
    const res = await admin('/admin/v1/stats');
    assert.equal(res.statusCode, 200, res.body);
    const stats = res.json().data;
    assert.equal(stats.ingest.events_total.created - (first.ingest.events_total.created ?? 0), 3);
    assert.ok(stats.ingest.events_per_second > 0);
    // Which process answered: its figures are its own.
    assert.equal(stats.instance.pid, process.pid);
    assert.equal(stats.instance.hostname, hostname());
    assert.ok(stats.commit.count >= 1);
    assert.equal(typeof stats.commit.p99_ms, 'number');
    assert.ok(stats.rejections.total >= 1, JSON.stringify(stats.rejections));
    assert.equal(stats.pool === null, dialect === 'sqlite');
    assert.deepEqual(
      { active: stats.destinations.active, paused: stats.destinations.paused, disabled: stats.destinations.disabled },
      { active: 0, paused: 0, disabled: 0 },
    );
    const noToken = await ctx.app.inject({ method: 'GET', url: '/admin/v1/stats' });
    assert.equal(noToken.statusCode, 401);
  });
});
