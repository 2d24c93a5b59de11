// `inlet traffic connect|sync|import|runs` end to end: the real CLI entry on a real database of the
// dialect under test, with the Plausible and GA4 fakes on 127.0.0.1.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cliEnv, inlet, type CliEnv } from './support/cli.js';
import { createTestServices } from './helpers.js';
import { startPlausibleFake, type PlausibleFake } from './fakes/plausible-fake.js';
import { startGa4Fake, type Ga4Fake } from './fakes/ga4-fake.js';
import { makeServiceAccount } from './fakes/keys.js';

const HEADER =
  'date,source,medium,campaign,landing_page,sessions,users,new_users,pageviews,engaged_sessions,bounce_rate,avg_session_duration,conversions';

describe('inlet traffic …', () => {
  let env: CliEnv;
  let productId: string;
  let dir: string;
  let plausible: PlausibleFake;
  let ga4: Ga4Fake;
  let close: () => Promise<void>;
  const account = makeServiceAccount();

  const cli = (...argv: string[]) => inlet(env, ...argv);

  before(async () => {
    // The test services create (and migrate) the database; the CLI then opens the same one by URL.
    const opened = await createTestServices();
    const { database, services } = opened;
    close = opened.close;
    env = cliEnv(database);
    productId = (await services.keys.createProduct('CLI Co')).id;
    dir = mkdtempSync(join(tmpdir(), 'inlet-traffic-cli-'));
    plausible = await startPlausibleFake({ siteId: 'cli.example', apiKey: 'cli-plausible-key' });
    ga4 = await startGa4Fake({
      propertyId: '777',
      clientEmail: account.credentials.client_email,
      publicKey: account.publicKey,
    });
  });
  after(async () => {
    await plausible.close();
    await ga4.close();
    await close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('connect names a missing or bad flag, and never prints the secret', async () => {
    const missing = await cli(
      'traffic',
      'connect',
      '--product',
      productId,
      '--provider',
      'plausible',
      '--site-id',
      'cli.example',
    );
    assert.equal(missing.code, 2);
    assert.match(missing.err, /--api-key is required/);
    const bad = await cli(
      'traffic',
      'connect',
      '--product',
      productId,
      '--provider',
      'plausible',
      '--site-id',
      'cli.example',
      '--api-key',
      'k',
      '--base-url',
      'not a url',
    );
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--base-url must be an http\(s\) URL/);
    const ok = await cli(
      'traffic',
      'connect',
      '--product',
      productId,
      '--provider',
      'plausible',
      '--site-id',
      'cli.example',
      '--api-key',
      'cli-plausible-key',
      '--base-url',
      plausible.url,
      '--json',
    );
    assert.equal(ok.code, 0, ok.err);
    assert.equal(JSON.parse(ok.out).data.provider, 'plausible');
    assert.ok(!ok.out.includes('cli-plausible-key'));
  });

  it('sync fetches and reports the stored rows; a provider failure exits 1 with its reason', async () => {
    plausible.rows = [
      {
        date: '2026-01-10',
        source: 'Google',
        utm_medium: 'organic',
        utm_campaign: '(not set)',
        entry_page: '/',
        visitors: 5,
        visits: 6,
        pageviews: 9,
        bounce_rate: 50,
        visit_duration: 30,
      },
      {
        date: '2026-01-11',
        source: 'Direct / None',
        utm_medium: '(not set)',
        utm_campaign: '(not set)',
        entry_page: '/',
        visitors: 2,
        visits: 2,
        pageviews: 2,
        bounce_rate: 100,
        visit_duration: 0,
      },
    ];
    const res = await cli(
      'traffic',
      'sync',
      '--product',
      productId,
      '--from',
      '2026-01-10',
      '--to',
      '2026-01-12',
      '--json',
    );
    assert.equal(res.code, 0, res.err);
    assert.deepEqual(JSON.parse(res.out).data, { status: 'succeeded', from: '2026-01-10', to: '2026-01-12', rows: 2 });
    const human = await cli('traffic', 'sync', '--product', productId, '--from', '2026-01-10', '--to', '2026-01-12');
    assert.equal(human.out, 'synced 2026-01-10 to 2026-01-12: 2 rows stored');

    plausible.script({
      status: 402,
      body: { error: 'The account that owns this API key does not have access to Stats API.' },
    });
    const failed = await cli('traffic', 'sync', '--product', productId, '--from', '2026-01-10', '--to', '2026-01-12');
    assert.equal(failed.code, 1);
    assert.match(failed.err, /HTTP 402.*does not have access to Stats API/);
  });

  it('import validates the whole file first, then replaces the dates it contains', async () => {
    const badFile = join(dir, 'bad.csv');
    writeFileSync(badFile, `${HEADER}\n2026-01-10,a,b,c,/,1,1,,1,,0.5,1,\n2026-01-11,a,b,c,/,1,1,,1,,1.5,1,\n`);
    const bad = await cli('traffic', 'import', '--product', productId, badFile);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /line 3, column "bounce_rate": must be a fraction/);
    assert.match(bad.err, /nothing was imported/);

    const file = join(dir, 'good.csv');
    writeFileSync(file, `${HEADER}\n2026-01-10,newsletter,email,jan,/,4,4,,8,,0.25,12.5,1\n`);
    const res = await cli('traffic', 'import', '--product', productId, file, '--json');
    assert.equal(res.code, 0, res.err);
    assert.deepEqual(JSON.parse(res.out).data, { lines: 1, rows: 1, dates: 1, from: '2026-01-10', to: '2026-01-10' });
    const missing = await cli('traffic', 'import', '--product', productId, join(dir, 'nope.csv'));
    assert.equal(missing.code, 2);
  });

  it('runs lists syncs and imports, newest first', async () => {
    const res = await cli('traffic', 'runs', '--product', productId, '--json');
    assert.equal(res.code, 0, res.err);
    const runs = JSON.parse(res.out).data as Array<{
      kind: string;
      outcome: string;
      provider: string;
      error: string | null;
    }>;
    assert.deepEqual(
      runs.map((r) => [r.kind, r.provider, r.outcome]),
      [
        ['import', 'csv', 'succeeded'],
        ['cli', 'plausible', 'failed'],
        ['cli', 'plausible', 'succeeded'],
        ['cli', 'plausible', 'succeeded'],
      ],
    );
    assert.match(runs[1]!.error ?? '', /Stats API/);
    const table = await cli('traffic', 'runs', '--product', productId);
    assert.match(table.out.split('\n')[0]!, /^STARTED_AT\s+KIND\s+PROVIDER/);
  });

  it('connects GA4 from a service-account file', async () => {
    const credentials = join(dir, 'sa.json');
    writeFileSync(credentials, JSON.stringify(account.credentials));
    const res = await cli(
      'traffic',
      'connect',
      '--product',
      productId,
      '--provider',
      'ga4',
      '--property-id',
      '777',
      '--credentials',
      credentials,
      '--base-url',
      ga4.url,
      '--token-url',
      ga4.tokenUrl,
    );
    assert.equal(res.code, 0, res.err);
    assert.ok(!res.out.includes('PRIVATE KEY'));
    ga4.rows = [
      {
        date: '2026-01-10',
        sessionSource: 'google',
        sessionMedium: 'cpc',
        sessionCampaignName: 'x',
        landingPage: '/',
        sessions: 3,
        totalUsers: 3,
        newUsers: 3,
        screenPageViews: 3,
        engagedSessions: 3,
        bounceRate: 0,
        averageSessionDuration: 1,
        keyEvents: 0,
      },
    ];
    const sync = await cli(
      'traffic',
      'sync',
      '--product',
      productId,
      '--from',
      '2026-01-10',
      '--to',
      '2026-01-10',
      '--json',
    );
    assert.deepEqual(JSON.parse(sync.out).data, { status: 'succeeded', from: '2026-01-10', to: '2026-01-10', rows: 1 });
    const unreadable = await cli(
      'traffic',
      'connect',
      '--product',
      productId,
      '--provider',
      'ga4',
      '--property-id',
      '777',
      '--credentials',
      join(dir, 'missing.json'),
    );
    assert.equal(unreadable.code, 2);
  });
});
