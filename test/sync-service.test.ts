// The sync service, scheduler and CSV import, with real storage (SQLite and PostgreSQL) and the
// provider fakes on 127.0.0.1.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { AppError } from '../src/domain/errors.js';
import { parseTrafficReportQuery } from '../src/domain/traffic-reports.js';
import { CsvImportError, importTrafficCsv } from '../src/sync/csv-import.js';
import { createTrafficScheduler } from '../src/sync/scheduler.js';
import { createTrafficSyncService, type SyncLogger } from '../src/sync/sync-service.js';
import type { RetryPolicy } from '../src/sync/provider.js';
import type { OpenedStorage } from '../src/storage/connect.js';
import { createOutboundGuard } from '../src/services/outbound-guard.js';
import { startGa4Fake, type Ga4Fake } from './fakes/ga4-fake.js';
import { makeServiceAccount } from './fakes/keys.js';
import {
  PLAUSIBLE_401,
  startPlausibleFake,
  type PlausibleFake,
  type PlausibleFakeRow,
} from './fakes/plausible-fake.js';
import { DIALECTS, openTestStorage, type TestStorage } from './traffic-support.js';

const FAST: RetryPolicy = {
  maxTotalMs: 3_000,
  initialDelayMs: 20,
  maxDelayMs: 100,
  requestTimeoutMs: 3_000,
};
// An outbound guard that allows loopback only (the fakes listen there), as the test runner sets it.
const LOOPBACK = createOutboundGuard({ allow: ['127.0.0.0/8', '::1'], allowPrivate: true });
const TODAY = '2026-03-15';
const now = () => new Date(`${TODAY}T09:30:00Z`);

function prow(partial: Partial<PlausibleFakeRow> & { date: string }): PlausibleFakeRow {
  return {
    source: 'Google',
    utm_medium: '(not set)',
    utm_campaign: '(not set)',
    entry_page: '/',
    visitors: 1,
    visits: 1,
    pageviews: 1,
    bounce_rate: 50,
    visit_duration: 10,
    ...partial,
  };
}

function expectAppError(code: string, check?: (error: AppError) => void) {
  return (error: unknown) => {
    assert.ok(error instanceof AppError, String(error));
    assert.equal(error.code, code);
    check?.(error);
    return true;
  };
}

async function report(storage: OpenedStorage, productId: string, params: Record<string, string>) {
  return storage.traffic.report(productId, parseTrafficReportQuery(params, now()));
}

for (const dialect of DIALECTS) {
  describe(`traffic sync on ${dialect}`, () => {
    let opened: TestStorage;
    let storage: OpenedStorage;
    let plausible: PlausibleFake;
    let ga4: Ga4Fake;
    const account = makeServiceAccount();

    before(async () => {
      opened = await openTestStorage(dialect);
      storage = opened.storage;
      for (const id of ['prod_p', 'prod_g', 'prod_x', 'prod_csv'])
        await storage.products.create({ id, name: id, createdAt: '2026-01-01T00:00:00.000Z' });
      plausible = await startPlausibleFake({ siteId: 'example.com', apiKey: 'pk' });
      ga4 = await startGa4Fake({
        propertyId: '42',
        clientEmail: account.credentials.client_email,
        publicKey: account.publicKey,
      });
    });
    after(async () => {
      await plausible.close();
      await ga4.close();
      await opened.cleanup();
    });

    const service = (s: OpenedStorage = storage, logger?: SyncLogger) =>
      createTrafficSyncService(s, { retry: FAST, guard: LOOPBACK, now, pageSize: 3, ...(logger ? { logger } : {}) });

    it('validates the source and never answers its secret', async () => {
      const sync = service();
      await assert.rejects(
        sync.connectSource('prod_p', { provider: 'matomo' }),
        expectAppError('validation_error', (e) =>
          assert.deepEqual(
            e.errors?.map((x) => x.pointer),
            ['/provider'],
          ),
        ),
      );
      await assert.rejects(
        sync.connectSource('prod_p', { provider: 'plausible', site_id: '', apiKey: 'x' }),
        expectAppError('validation_error', (e) =>
          assert.deepEqual(e.errors?.map((x) => x.pointer).sort(), ['/apiKey', '/api_key', '/site_id']),
        ),
      );
      await assert.rejects(
        sync.connectSource('prod_g', {
          provider: 'ga4',
          property_id: '42',
          credentials: { client_email: 'a@b.c', private_key: 'not a key' },
        }),
        expectAppError('validation_error', (e) =>
          assert.deepEqual(
            e.errors?.map((x) => x.pointer),
            ['/credentials/private_key'],
          ),
        ),
      );
      await assert.rejects(
        sync.connectSource('prod_g', {
          provider: 'ga4',
          property_id: 'UA-1',
          credentials: account.credentials,
          base_url: 'ftp://x',
        }),
        expectAppError('validation_error', (e) =>
          assert.deepEqual(e.errors?.map((x) => x.pointer).sort(), ['/base_url', '/property_id']),
        ),
      );
      await assert.rejects(
        sync.connectSource('nope', { provider: 'plausible', site_id: 'a', api_key: 'b' }),
        expectAppError('not_found'),
      );

      const p = await sync.connectSource('prod_p', {
        provider: 'plausible',
        site_id: 'example.com',
        api_key: 'pk',
        base_url: plausible.url,
      });
      assert.deepEqual(
        { provider: p.provider, config: p.config },
        { provider: 'plausible', config: { site_id: 'example.com', base_url: plausible.url } },
      );
      const g = await sync.connectSource('prod_g', {
        provider: 'ga4',
        property_id: '42',
        credentials: account.credentials,
        base_url: ga4.url,
        token_url: ga4.tokenUrl,
      });
      assert.equal(g.config.client_email, account.credentials.client_email);
      assert.ok(!JSON.stringify([p, g]).includes('PRIVATE KEY') && !JSON.stringify(p).includes('"pk"'));
    });

    it('first sync backfills 90 days; later syncs re-fetch the trailing 3 days and today, replacing those slices', async () => {
      plausible.rows = [
        prow({ date: '2025-12-15', entry_page: '/too-old' }), // outside the 90 days
        prow({ date: '2025-12-16', entry_page: '/first-day', visits: 7 }),
        ...['/a', '/b', '/c', '/d'].map((page, i) => prow({ date: '2026-03-12', entry_page: page, visits: 10 + i })),
        prow({ date: '2026-03-15', source: 'Direct / None', visits: 5, bounce_rate: 20 }),
      ];
      const sync = service();
      const queriesBefore = plausible.queries().length;
      const first = await sync.syncProduct('prod_p', { kind: 'schedule' });
      assert.deepEqual(first, { status: 'succeeded', from: '2025-12-16', to: '2026-03-15', rows: 6 });
      const queries = plausible.queries().slice(queriesBefore);
      assert.deepEqual(
        queries.map((q) => [q.date_range, q.pagination]),
        [
          [['2025-12-16', '2026-03-15'], { limit: 3, offset: 0 }],
          [['2025-12-16', '2026-03-15'], { limit: 3, offset: 3 }],
        ],
      );

      // Upstream revises the recent days: /d disappears, /a changes; the old day is left alone.
      plausible.rows = [
        prow({ date: '2026-03-12', entry_page: '/a', visits: 99 }),
        prow({ date: '2026-03-13', entry_page: '/new', visits: 1 }),
      ];
      const second = await sync.syncProduct('prod_p', { kind: 'schedule' });
      assert.deepEqual(second, { status: 'succeeded', from: '2026-03-12', to: '2026-03-15', rows: 2 });
      const byPage = await report(storage, 'prod_p', {
        from: '2025-12-01',
        to: TODAY,
        group_by: 'date,landing_page,source',
        sort: 'date',
      });
      assert.deepEqual(
        byPage.rows.map((r) => [r.date, r.landing_page, r.source, r.sessions]),
        [
          ['2025-12-16', '/first-day', 'Google', 7],
          ['2026-03-12', '/a', 'Google', 99],
          ['2026-03-13', '/new', 'Google', 1],
        ],
      );
      const runs = await sync.listRuns('prod_p');
      assert.deepEqual(
        runs.map((r) => [r.kind, r.outcome, r.from, r.to, r.rows, r.provider]),
        [
          ['schedule', 'succeeded', '2026-03-12', '2026-03-15', 2, 'plausible'],
          ['schedule', 'succeeded', '2025-12-16', '2026-03-15', 6, 'plausible'],
        ],
      );
      assert.ok(runs.every((r) => r.finishedAt !== null));
    });

    it('cuts over-long provider values so every row fits the key, merging rows that then coincide', async () => {
      const long = `/search?q=${'x'.repeat(3000)}`;
      plausible.rows = [
        prow({ date: '2026-02-10', entry_page: `${long}a`, visits: 2 }),
        prow({ date: '2026-02-10', entry_page: `${long}b`, visits: 3 }),
      ];
      const result = await service().syncProduct('prod_p', { from: '2026-02-10', to: '2026-02-10' });
      assert.deepEqual(result, { status: 'succeeded', from: '2026-02-10', to: '2026-02-10', rows: 1 });
      const r = await report(storage, 'prod_p', { from: '2026-02-10', to: '2026-02-10', group_by: 'landing_page' });
      assert.equal(r.rows[0]?.landing_page, long.slice(0, 1000));
      assert.equal(r.rows[0]?.sessions, 5);
    });

    it('syncs an explicit range, and rejects a bad one', async () => {
      plausible.rows = [prow({ date: '2026-02-01', visits: 3 }), prow({ date: '2026-02-03', visits: 4 })];
      const sync = service();
      assert.deepEqual(await sync.syncProduct('prod_p', { from: '2026-02-01', to: '2026-02-02' }), {
        status: 'succeeded',
        from: '2026-02-01',
        to: '2026-02-02',
        rows: 1,
      });
      await assert.rejects(
        sync.syncProduct('prod_p', { from: '2026-02-03', to: '2026-02-01' }),
        expectAppError('validation_error', (e) => assert.equal(e.errors?.[0]?.pointer, '/from')),
      );
      await assert.rejects(sync.syncProduct('prod_p', { from: '2026-02-30' }), expectAppError('validation_error'));
      await assert.rejects(
        sync.syncProduct('prod_p', { to: '2026-04-01' }),
        expectAppError('validation_error', (e) => assert.equal(e.errors?.[0]?.pointer, '/to')),
      );
      await assert.rejects(sync.syncProduct('prod_x', {}), expectAppError('not_found'));
    });

    it('a provider failure is upstream_error with the reason, is recorded, and leaves stored rows alone', async () => {
      const sync = service();
      const before = await storage.traffic.countRows('prod_p', '2025-01-01', TODAY);
      plausible.script({ status: 401, body: { error: PLAUSIBLE_401 } });
      await assert.rejects(
        sync.syncProduct('prod_p', {}),
        expectAppError('upstream_error', (e) => {
          assert.equal(e.status, 502);
          assert.ok(e.message.includes(PLAUSIBLE_401), e.message);
          assert.equal(e.extras.provider_status, 401);
        }),
      );
      assert.equal(await storage.traffic.countRows('prod_p', '2025-01-01', TODAY), before);
      const [run] = await sync.listRuns('prod_p', 1);
      assert.equal(run?.outcome, 'failed');
      assert.ok(run?.error?.includes(PLAUSIBLE_401));
    });

    it('retries a 429 with Retry-After during a sync', async () => {
      plausible.rows = [prow({ date: '2026-03-14' })];
      plausible.script({ status: 429, body: { error: 'Too many API requests.' }, headers: { 'retry-after': '1' } });
      const result = await service().syncProduct('prod_p', {});
      assert.equal(result.status, 'succeeded');
    });

    it('refuses to connect a source whose URLs the outbound guard refuses, naming the field, the reason and the setting', async () => {
      const strict = createTrafficSyncService(storage, {
        retry: FAST,
        guard: createOutboundGuard({ allow: undefined, allowPrivate: false }),
        now,
      });
      const before = await storage.traffic.getSource('prod_x');
      await assert.rejects(
        strict.connectSource('prod_x', {
          provider: 'plausible',
          site_id: 'example.com',
          api_key: 'pk',
          base_url: plausible.url,
        }),
        expectAppError('validation_error', (e) => {
          assert.deepEqual(
            e.errors?.map((x) => x.pointer),
            ['/base_url'],
          );
          assert.match(
            e.errors?.[0]?.message ?? '',
            /^refused by the outbound guard: .*loopback.*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it$/,
          );
        }),
      );
      // With the test runner's allow list (loopback only), a private address elsewhere is not on it.
      await assert.rejects(
        service().connectSource('prod_x', {
          provider: 'ga4',
          property_id: '42',
          credentials: account.credentials,
          base_url: ga4.url,
          token_url: 'http://10.1.2.3/token',
        }),
        expectAppError('validation_error', (e) => {
          assert.deepEqual(
            e.errors?.map((x) => x.pointer),
            ['/token_url'],
          );
          assert.match(e.errors?.[0]?.message ?? '', /not on INLET_OUTBOUND_ALLOW; listing it there would allow it/);
        }),
      );
      assert.deepEqual(await storage.traffic.getSource('prod_x'), before, 'nothing stored');
    });

    it('a sync the outbound guard refuses fails at once with its reason: no retry, nothing sent, the run recorded', async () => {
      // prod_p's source is on 127.0.0.1 (connected above); this instance allows no private targets. A retry
      // would wait at least 2.5 s within a 60 s budget (today's default answered after 57 s).
      const strict = createTrafficSyncService(storage, {
        retry: { ...FAST, maxTotalMs: 60_000, initialDelayMs: 5_000 },
        guard: createOutboundGuard({ allow: undefined, allowPrivate: false }),
        now,
      });
      const queries = plausible.queries().length;
      const started = Date.now();
      await assert.rejects(
        strict.syncProduct('prod_p', { from: '2026-03-14', to: TODAY }),
        expectAppError('upstream_error', (e) => {
          assert.match(
            e.message,
            /^The traffic provider was not contacted: plausible: refused by the outbound guard: .*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it$/,
          );
          assert.doesNotMatch(e.message, /attempts/);
        }),
      );
      assert.ok(Date.now() - started < 1_000, `took ${Date.now() - started} ms`);
      assert.equal(plausible.queries().length, queries, 'nothing reached the provider');
      const [run] = await strict.listRuns('prod_p', 1);
      assert.equal(run?.outcome, 'failed');
      assert.match(run?.error ?? '', /refused by the outbound guard: .*INLET_OUTBOUND_ALLOW_PRIVATE=true/);
    });

    it('syncs GA4 end to end (service-account token, string values)', async () => {
      ga4.rows = [
        {
          date: '2026-03-13',
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
          averageSessionDuration: 194.5,
          keyEvents: 6,
        },
        {
          date: '2026-03-14',
          sessionSource: 'google',
          sessionMedium: 'organic',
          sessionCampaignName: '(organic)',
          landingPage: '/pricing',
          sessions: 80,
          totalUsers: 75,
          newUsers: 30,
          screenPageViews: 140,
          engagedSessions: 41,
          bounceRate: 0.5,
          averageSessionDuration: 62.5,
          keyEvents: 2,
        },
      ];
      const result = await service().syncProduct('prod_g', {});
      assert.deepEqual(result, { status: 'succeeded', from: '2025-12-16', to: TODAY, rows: 2 });
      const r = await report(storage, 'prod_g', { from: '2026-03-01', to: TODAY, group_by: 'source' });
      assert.equal(r.rows[0]?.sessions, 200);
      assert.equal(r.rows[0]?.new_users, 94);
      assert.equal(r.rows[0]?.conversions, 8);
      assert.ok(Math.abs((r.rows[0]?.bounce_rate ?? 0) - (0.35 * 120 + 0.5 * 80) / 200) < 1e-9);
    });

    it('never runs two syncs of one product at once, in this process or across instances', async () => {
      const release = plausible.hold();
      try {
        // The provider's answer is held while a second instance opens its storage, which can take
        // seconds on a loaded machine: a request timeout longer than FAST's keeps the first sync alive.
        const sync = createTrafficSyncService(storage, {
          retry: { ...FAST, requestTimeoutMs: 60_000, maxTotalMs: 60_000 },
          guard: LOOPBACK,
          now,
          pageSize: 3,
        });
        const providerCalled = plausible.nextRequest();
        const first = sync.syncProduct('prod_p', { kind: 'schedule' });
        await providerCalled; // the first sync holds the lock until the provider's answer is released
        const second = await sync.syncProduct('prod_p', { kind: 'admin' });
        assert.equal(second.status, 'already_running');
        const otherInstance = service(await opened.openAnother());
        assert.equal((await otherInstance.syncProduct('prod_p', {})).status, 'already_running');
        release();
        assert.equal((await first).status, 'succeeded');
        assert.equal(
          (await otherInstance.syncProduct('prod_p', {})).status,
          'succeeded',
          'the lock is released afterwards',
        );
      } finally {
        release();
      }
    });

    it('the scheduler syncs every connected product; one failure does not stop the others; stop() waits', async () => {
      const sync = service();
      await sync.connectSource('prod_x', {
        provider: 'plausible',
        site_id: 'example.com',
        api_key: 'wrong-key',
        base_url: plausible.url,
      });
      const scheduler = createTrafficScheduler(storage, sync, { intervalMs: 60_000 });
      const outcomes = await scheduler.runOnce();
      const byProduct = Object.fromEntries(outcomes.map((o) => [o.productId, o]));
      assert.deepEqual(Object.keys(byProduct).sort(), ['prod_g', 'prod_p', 'prod_x']);
      assert.ok(byProduct.prod_x?.error?.includes('HTTP 401'));
      assert.equal(byProduct.prod_g?.result?.status, 'succeeded');
      assert.equal(byProduct.prod_p?.result?.status, 'succeeded');

      // start(): the first pass begins at once; stop() waits for the sync in progress.
      const prodXRuns = (await storage.traffic.listRuns('prod_x', 100)).length;
      plausible.latencyMs = 300;
      const live = createTrafficScheduler(storage, service(), { intervalMs: 60_000 });
      try {
        const plausibleCalled = plausible.nextRequest();
        live.start();
        await plausibleCalled; // prod_p's sync is in flight (the fake answers in 300 ms)
        await live.stop();
        const [latest] = await storage.traffic.listRuns('prod_p', 1);
        assert.equal(latest?.kind, 'schedule');
        assert.equal(latest?.outcome, 'succeeded', 'stop() waited for the sync in progress to finish');
        // Products are synced in id order (prod_g, prod_p, prod_x): after stop() no further product starts.
        assert.equal((await storage.traffic.listRuns('prod_x', 100)).length, prodXRuns);
      } finally {
        plausible.latencyMs = 0;
      }
    });

    it('imports a CSV: quoted fields, empty metrics as null, progress, dates replaced like a sync', async () => {
      const csv = [
        'date,source,medium,campaign,landing_page,sessions,users,new_users,pageviews,engaged_sessions,bounce_rate,avg_session_duration,conversions',
        '2026-01-01,newsletter,email,"spring, 2026",/a,10,9,,20,,0.5,30,',
        '2026-01-01,"quoted ""source""",email,spring,/b,30,25,,40,,0.1,10,1',
        '2026-01-02,newsletter,email,spring,/a,5,5,,5,,,,',
      ].join('\r\n');
      const progress: number[] = [];
      const result = await importTrafficCsv(storage, 'prod_csv', Readable.from([csv]), {
        progressEvery: 2,
        onProgress: (n) => progress.push(n),
        now,
      });
      assert.deepEqual(result, { lines: 3, rows: 3, dates: 2, from: '2026-01-01', to: '2026-01-02' });
      assert.deepEqual(progress, [2, 3]);
      const r = await report(storage, 'prod_csv', {
        from: '2026-01-01',
        to: '2026-01-02',
        group_by: 'source,campaign',
        sort: 'source',
      });
      assert.deepEqual(
        r.rows.map((x) => [x.source, x.campaign, x.sessions, x.new_users]),
        [
          ['newsletter', 'spring', 5, null],
          ['newsletter', 'spring, 2026', 10, null],
          ['quoted "source"', 'spring', 30, null],
        ],
      );
      assert.ok(
        Math.abs((r.totals.bounce_rate ?? 0) - (0.5 * 10 + 0.1 * 30) / 40) < 1e-9,
        'rows without bounce_rate are not weighted',
      );
      const [run] = await storage.traffic.listRuns('prod_csv', 1);
      assert.deepEqual([run?.provider, run?.kind, run?.outcome, run?.rows], ['csv', 'import', 'succeeded', 3]);

      // Re-importing one date replaces that date only.
      const again =
        'date,source,medium,campaign,landing_page,sessions,users,new_users,pageviews,engaged_sessions,bounce_rate,avg_session_duration,conversions\n2026-01-02,x,y,z,/,1,1,1,1,1,0,0,0\n';
      await importTrafficCsv(storage, 'prod_csv', Readable.from([again]));
      const r2 = await report(storage, 'prod_csv', {
        from: '2026-01-01',
        to: '2026-01-02',
        group_by: 'date',
        sort: 'date',
      });
      assert.deepEqual(
        r2.rows.map((x) => [x.date, x.sessions]),
        [
          ['2026-01-01', 40],
          ['2026-01-02', 1],
        ],
      );
    });

    it('rejects a bad CSV naming the line and column, and writes nothing', async () => {
      const header =
        'date,source,medium,campaign,landing_page,sessions,users,new_users,pageviews,engaged_sessions,bounce_rate,avg_session_duration,conversions';
      const cases: Array<[string, RegExp]> = [
        [
          `${header}\n2026-02-01,a,b,c,/,1,1,1,1,1,0,0,0\n2026-02-01,a,b,c,/x,ten,1,1,1,1,0,0,0\n`,
          /^line 3, column "sessions": must be a whole number/,
        ],
        [`${header}\n2026-02-31,a,b,c,/,1,1,1,1,1,0,0,0\n`, /^line 2, column "date": must be a calendar date/],
        [`${header}\n2026-02-01,a,b,c,/,1,1,1,1,1,35,0,0\n`, /^line 2, column "bounce_rate": must be a fraction/],
        [`${header}\n2026-02-01,a,b,c,/,1,1,1,1,1,0,0\n`, /^line 2: has 12 fields, the header has 13/],
        [
          `${header}\n2026-02-01,a,b,c,/,1,1,1,1,1,0,0,0\n2026-02-01,a,b,c,/,2,1,1,1,1,0,0,0\n`,
          /^line 3: repeats .* of line 2/,
        ],
        [`${header}\n2026-02-01,"a,b,c,/,1,1,1,1,1,0,0,0\n`, /^line 2: a quoted field is not closed/],
        [
          'date,source,medium,campaign,landing_page,sessions,visits\n',
          /^line 1, column "visits": is not a known column/,
        ],
        [
          'date,source,medium,campaign,landing_page,sessions,users,new_users,pageviews,engaged_sessions,bounce_rate,avg_session_duration\n',
          /^line 1, column "conversions": is missing/,
        ],
        ['', /^line 1: the file is empty/],
      ];
      for (const [csv, message] of cases) {
        await assert.rejects(importTrafficCsv(storage, 'prod_csv', Readable.from([csv])), (error: unknown) => {
          assert.ok(error instanceof CsvImportError, String(error));
          assert.match(error.message, message);
          return true;
        });
      }
      assert.equal(await storage.traffic.countRows('prod_csv', '2026-02-01', '2026-02-28'), 0);
    });
  });
}
