// The traffic store against SQLite and PostgreSQL: the same suite, the same expectations.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { OpenedStorage } from '../src/storage/connect.js';
import { DIALECTS, openTestStorage, type TestStorage } from './traffic-support.js';
import {
  aggregateMetrics,
  cursorAfter,
  emptyMetrics,
  parseTrafficReportQuery,
  TRAFFIC_METRICS,
  type TrafficDimension,
  type TrafficMetrics,
  type TrafficRow,
} from '../src/domain/traffic-reports.js';

const NOW = new Date('2026-03-15T12:00:00Z');

function row(partial: Partial<TrafficRow> & { date: string }): TrafficRow {
  return {
    source: 'google',
    medium: 'organic',
    campaign: '(not set)',
    landing_page: '/',
    ...emptyMetrics(),
    ...partial,
  };
}

function byDate(rows: TrafficRow[]): Map<string, TrafficRow[]> {
  const map = new Map<string, TrafficRow[]>();
  for (const r of rows) map.set(r.date, [...(map.get(r.date) ?? []), r]);
  return map;
}

function query(params: Record<string, string>) {
  return parseTrafficReportQuery(params, NOW);
}

function close(actual: number | null | undefined, expected: number | null, label: string) {
  if (expected === null) return assert.equal(actual, null, label);
  assert.ok(
    typeof actual === 'number' && Math.abs(actual - expected) <= 1e-9 * Math.max(1, Math.abs(expected)),
    `${label}: ${actual} ≠ ${expected}`,
  );
}

/** A tiny deterministic PRNG so a failure can be replayed. */
function prng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

for (const dialect of DIALECTS) {
  describe(`traffic store on ${dialect}`, () => {
    let opened: TestStorage;
    let storage: OpenedStorage;

    before(async () => {
      opened = await openTestStorage(dialect);
      storage = opened.storage;
      for (const id of ['prod_a', 'prod_b', 'prod_c', 'prod_n', 'prod_p']) {
        await storage.products.create({ id, name: id, createdAt: '2026-01-01T00:00:00.000Z' });
      }
    });
    after(async () => opened.cleanup());

    it('applies the traffic migration (version 200)', async () => {
      // Applied by this open, or by an earlier one when the schema is an emptied one reused (helpers.ts).
      const versions = (await storage.db.selectFrom('inlet_migrations').select('version').execute()).map((row) =>
        Number(row.version),
      );
      assert.ok(versions.includes(200), `migration 200 is recorded (versions ${versions.join(', ')})`);
      assert.ok(
        storage.migration !== undefined && storage.migration.current >= 200,
        'the storage reports it migrated to at least 200',
      );
    });

    it('stores a source with its secret, and lists sources without it', async () => {
      const at = '2026-03-01T00:00:00.000Z';
      await storage.traffic.putSource({
        productId: 'prod_a',
        provider: 'plausible',
        config: { site_id: 'a.com' },
        secret: { api_key: 'sekrit' },
        createdAt: at,
        updatedAt: at,
      });
      await storage.traffic.putSource({
        productId: 'prod_a',
        provider: 'plausible',
        config: { site_id: 'b.com' },
        secret: { api_key: 'sekrit2' },
        createdAt: '2026-03-02T00:00:00.000Z',
        updatedAt: '2026-03-02T00:00:00.000Z',
      });
      const source = await storage.traffic.getSource('prod_a');
      assert.deepEqual(source?.config, { site_id: 'b.com' });
      assert.deepEqual(source?.secret, { api_key: 'sekrit2' });
      assert.equal(source?.createdAt, at, 'replacing keeps the creation time');
      const list = await storage.traffic.listSources();
      assert.equal(list.length, 1);
      assert.ok(!JSON.stringify(list).includes('sekrit'));
      assert.equal(await storage.traffic.getSource('prod_b'), undefined);
    });

    it('replaces each (product, date) slice and leaves other dates and products alone', async () => {
      await storage.traffic.replaceSlices(
        'prod_b',
        'ga4',
        byDate([
          row({ date: '2026-02-01', source: 'a', sessions: 1 }),
          row({ date: '2026-02-01', source: 'b', sessions: 2 }),
          row({ date: '2026-02-02', source: 'a', sessions: 3 }),
        ]),
      );
      await storage.traffic.replaceSlices(
        'prod_c',
        'ga4',
        byDate([row({ date: '2026-02-01', source: 'a', sessions: 100 })]),
      );
      const inserted = await storage.traffic.replaceSlices(
        'prod_b',
        'ga4',
        new Map([['2026-02-01', [row({ date: '2026-02-01', source: 'c', sessions: 5 })]]]),
      );
      assert.equal(inserted, 1);
      const report = await storage.traffic.report(
        'prod_b',
        query({ from: '2026-02-01', to: '2026-02-02', group_by: 'date,source', sort: 'date' }),
      );
      assert.deepEqual(
        report.rows.map((r) => [r.date, r.source, r.sessions]),
        [
          ['2026-02-01', 'c', 5],
          ['2026-02-02', 'a', 3],
        ],
      );
      // An empty list clears the date: a combination gone upstream does not linger.
      await storage.traffic.replaceSlices('prod_b', 'ga4', new Map([['2026-02-02', []]]));
      assert.equal(await storage.traffic.countRows('prod_b', '2026-02-01', '2026-02-28'), 1);
      assert.equal(await storage.traffic.countRows('prod_c', '2026-02-01', '2026-02-28'), 1);
    });

    it('replaces slices atomically: a failing insert leaves the previous rows', async () => {
      const dup = row({ date: '2026-02-01', source: 'x', sessions: 1 });
      await assert.rejects(storage.traffic.replaceSlices('prod_b', 'ga4', new Map([['2026-02-01', [dup, dup]]])));
      const report = await storage.traffic.report(
        'prod_b',
        query({ from: '2026-02-01', to: '2026-02-01', group_by: 'source' }),
      );
      assert.deepEqual(
        report.rows.map((r) => r.source),
        ['c'],
      );
    });

    it('aggregates in SQL: sums counts, weights averages by sessions, keeps unsupplied metrics null, totals', async () => {
      await storage.traffic.replaceSlices(
        'prod_a',
        'plausible',
        byDate([
          row({
            date: '2026-03-01',
            source: 'google',
            landing_page: '/a',
            sessions: 100,
            users: 90,
            pageviews: 300,
            bounce_rate: 0.5,
            avg_session_duration: 60,
          }),
          row({
            date: '2026-03-02',
            source: 'google',
            landing_page: '/b',
            sessions: 300,
            users: 200,
            pageviews: 500,
            bounce_rate: 0.1,
            avg_session_duration: 20,
          }),
          row({
            date: '2026-03-02',
            source: '(direct)',
            medium: '(none)',
            sessions: 50,
            users: 50,
            pageviews: 60,
            bounce_rate: 0.9,
            avg_session_duration: 5,
          }),
        ]),
      );
      const report = await storage.traffic.report(
        'prod_a',
        query({ from: '2026-03-01', to: '2026-03-02', group_by: 'source' }),
      );
      assert.deepEqual(
        report.rows.map((r) => Object.keys(r).sort()),
        [['source', ...TRAFFIC_METRICS].sort(), ['source', ...TRAFFIC_METRICS].sort()],
      );
      const google = report.rows[0]!;
      assert.equal(google.source, 'google');
      assert.equal(google.sessions, 400);
      assert.equal(google.users, 290);
      assert.equal(google.pageviews, 800);
      close(google.bounce_rate, 0.2, 'bounce_rate');
      close(google.avg_session_duration, 30, 'avg_session_duration');
      assert.equal(google.new_users, null);
      assert.equal(google.conversions, null);
      assert.equal(google.engaged_sessions, null);
      assert.equal(report.totals.sessions, 450);
      close(report.totals.bounce_rate, (0.5 * 100 + 0.1 * 300 + 0.9 * 50) / 450, 'total bounce_rate');
      assert.equal(report.totals.new_users, null);
      assert.equal(report.hasMore, false);
    });

    it('gives averages without binary noise (0.49 stays 0.49)', async () => {
      await storage.traffic.replaceSlices(
        'prod_n',
        'plausible',
        byDate([row({ date: '2026-03-05', source: 'n', sessions: 80, bounce_rate: 0.49, avg_session_duration: 63.1 })]),
      );
      const report = await storage.traffic.report(
        'prod_n',
        query({ from: '2026-03-05', to: '2026-03-05', group_by: 'source' }),
      );
      assert.equal(report.rows[0]?.bounce_rate, 0.49);
      assert.equal(report.rows[0]?.avg_session_duration, 63.1);
    });

    it('filters exactly, and an empty range gives no rows and null totals', async () => {
      const filtered = await storage.traffic.report(
        'prod_a',
        query({ from: '2026-03-01', to: '2026-03-02', group_by: 'landing_page', source: 'google' }),
      );
      assert.deepEqual(
        filtered.rows.map((r) => r.landing_page),
        ['/b', '/a'],
      );
      assert.equal(filtered.totals.sessions, 400);
      const none = await storage.traffic.report(
        'prod_a',
        query({ from: '2026-03-01', to: '2026-03-02', source: 'Google' }),
      );
      assert.deepEqual(none.rows, []);
      assert.equal(none.totals.sessions, null);
      const empty = await storage.traffic.report('prod_p', query({}));
      assert.deepEqual(empty.rows, []);
    });

    it('never reads another product', async () => {
      const report = await storage.traffic.report(
        'prod_c',
        query({ from: '2026-01-01', to: '2026-03-31', group_by: 'source' }),
      );
      assert.deepEqual(
        report.rows.map((r) => [r.source, r.sessions]),
        [['a', 100]],
      );
    });

    it('matches the reference aggregation on random data, and keyset pages add up to the whole, for every sort', async () => {
      const random = prng(42);
      const pick = <T>(list: T[]) => list[Math.floor(random() * list.length)]!;
      const rows: TrafficRow[] = [];
      const seen = new Set<string>();
      for (let i = 0; i < 300; i++) {
        const r = row({
          date: `2026-01-${String(1 + Math.floor(random() * 9)).padStart(2, '0')}`,
          source: pick(['google', 'bing', '(direct)', 'Zeta', 'ä-umlaut', 'news.ycombinator.com']),
          medium: pick(['organic', 'cpc', '(none)']),
          campaign: pick(['(not set)', 'spring', 'Spring']),
          landing_page: pick(['/', '/pricing', '/b', '/B']),
          sessions: Math.floor(random() * 50),
          users: Math.floor(random() * 40),
          new_users: random() < 0.3 ? null : Math.floor(random() * 10),
          pageviews: Math.floor(random() * 100),
          engaged_sessions: null,
          bounce_rate: random() < 0.1 ? null : Math.round(random() * 1000) / 1000,
          avg_session_duration: random() * 300,
          conversions: random() < 0.5 ? null : Math.floor(random() * 3),
        });
        const key = JSON.stringify([r.date, r.source, r.medium, r.campaign, r.landing_page]);
        if (seen.has(key)) continue;
        seen.add(key);
        rows.push(r);
      }
      await storage.traffic.replaceSlices('prod_p', 'ga4', byDate(rows));

      const groupings: TrafficDimension[][] = [['source'], ['source', 'medium'], ['date', 'campaign', 'landing_page']];
      const sorts = ['-sessions', 'sessions', '-bounce_rate', 'new_users', '-conversions', 'avg_session_duration'];
      for (const groupBy of groupings) {
        for (const sort of [...sorts, groupBy[0]!, `-${groupBy.at(-1)!}`]) {
          const params = { from: '2026-01-01', to: '2026-01-09', group_by: groupBy.join(','), sort };
          const whole = await storage.traffic.report('prod_p', query({ ...params, limit: '1000' }));
          // Reference: group in JS, aggregate with the domain rules.
          const groups = new Map<string, TrafficMetrics[]>();
          for (const r of rows) {
            const key = JSON.stringify(groupBy.map((d) => r[d]));
            groups.set(key, [...(groups.get(key) ?? []), r]);
          }
          assert.equal(whole.rows.length, groups.size, `${params.group_by} ${sort}: group count`);
          for (const got of whole.rows) {
            const expected = aggregateMetrics(groups.get(JSON.stringify(groupBy.map((d) => got[d])))!);
            for (const metric of TRAFFIC_METRICS) close(got[metric], expected[metric], `${params.group_by} ${metric}`);
          }
          // Paging through cursors gives exactly the same rows in the same order.
          const paged: Array<Partial<TrafficRow>> = [];
          let cursor: string | undefined;
          for (let page = 0; page < 100; page++) {
            const result = await storage.traffic.report(
              'prod_p',
              query({ ...params, limit: '7', ...(cursor ? { cursor } : {}) }),
            );
            paged.push(...result.rows);
            if (!result.hasMore) break;
            cursor = cursorAfter(query(params), result.rows.at(-1)!);
          }
          assert.deepEqual(
            paged.map((r) => groupBy.map((d) => r[d])),
            whole.rows.map((r) => groupBy.map((d) => r[d])),
            `${params.group_by} ${sort}: paging`,
          );
          // And the order is the requested one, NULLs last.
          const field = sort.replace(/^-/, '') as keyof TrafficRow;
          const values = whole.rows.map((r) => r[field] ?? null);
          const nonNull = values.filter((v) => v !== null);
          assert.ok(
            values.slice(nonNull.length).every((v) => v === null),
            'nulls last',
          );
          for (let i = 1; i < nonNull.length; i++) {
            const [a, b] = [nonNull[i - 1]!, nonNull[i]!];
            assert.ok(sort.startsWith('-') ? a >= b : a <= b, `${params.group_by} ${sort}: order at ${i}`);
          }
        }
      }
    });

    it('records sync runs, newest first, and the last success', async () => {
      await storage.traffic.startRun({
        id: 'run_1',
        productId: 'prod_a',
        provider: 'plausible',
        kind: 'admin',
        startedAt: '2026-03-10T00:00:00.000Z',
        finishedAt: null,
        from: '2026-03-01',
        to: '2026-03-04',
        rows: null,
        outcome: 'running',
        error: null,
      });
      await storage.traffic.finishRun('prod_a', 'run_1', {
        finishedAt: '2026-03-10T00:00:05.000Z',
        rows: 12,
        outcome: 'succeeded',
        error: null,
      });
      await storage.traffic.startRun({
        id: 'run_2',
        productId: 'prod_a',
        provider: 'plausible',
        kind: 'schedule',
        startedAt: '2026-03-11T00:00:00.000Z',
        finishedAt: null,
        from: '2026-03-07',
        to: '2026-03-11',
        rows: null,
        outcome: 'running',
        error: null,
      });
      await storage.traffic.finishRun('prod_a', 'run_2', {
        finishedAt: '2026-03-11T00:00:01.000Z',
        rows: null,
        outcome: 'failed',
        error: 'plausible: HTTP 401: Invalid API key',
      });
      const runs = await storage.traffic.listRuns('prod_a', 10);
      assert.deepEqual(
        runs.map((r) => [r.id, r.outcome, r.rows, r.from, r.to, r.error]),
        [
          ['run_2', 'failed', null, '2026-03-07', '2026-03-11', 'plausible: HTTP 401: Invalid API key'],
          ['run_1', 'succeeded', 12, '2026-03-01', '2026-03-04', null],
        ],
      );
      assert.equal(runs[1]!.finishedAt, '2026-03-10T00:00:05.000Z');
      assert.equal(await storage.traffic.lastSucceededAt('prod_a'), '2026-03-10T00:00:05.000Z');
      assert.equal(await storage.traffic.lastSucceededAt('prod_a', 'plausible'), '2026-03-10T00:00:05.000Z');
      assert.equal(await storage.traffic.lastSucceededAt('prod_a', 'ga4'), null);
      assert.equal(await storage.traffic.lastSucceededAt('prod_b'), null);
      assert.deepEqual(await storage.traffic.listRuns('prod_b', 10), []);
    });

    it('holds the sync lock exclusively, across instances, and releases it', async () => {
      const other = await opened.openAnother();
      let release!: () => void;
      let acquired!: () => void;
      const held = new Promise<void>((resolve) => {
        acquired = resolve;
      });
      const holding = storage.traffic.withSyncLock('prod_a', () => {
        acquired();
        return new Promise<string>((resolve) => {
          release = () => resolve('done');
        });
      });
      await held;
      assert.deepEqual(await other.traffic.withSyncLock('prod_a', async () => 'second'), { acquired: false });
      assert.deepEqual(await other.traffic.withSyncLock('prod_b', async () => 'other product'), {
        acquired: true,
        value: 'other product',
      });
      release();
      assert.deepEqual(await holding, { acquired: true, value: 'done' });
      assert.deepEqual(await other.traffic.withSyncLock('prod_a', async () => 'after'), {
        acquired: true,
        value: 'after',
      });
    });
  });
}
