import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { AppError } from '../../src/domain/errors.js';
import {
  aggregateMetrics,
  cursorAfter,
  emptyMetrics,
  mergeDuplicateRows,
  parseTrafficReportQuery,
  type TrafficMetrics,
  type TrafficRow,
} from '../../src/domain/traffic-reports.js';

const NOW = new Date('2026-03-15T10:00:00Z');

function errorsOf(query: Record<string, unknown>): Array<{ pointer: string; message: string }> {
  try {
    parseTrafficReportQuery(query, NOW);
  } catch (error) {
    assert.ok(error instanceof AppError);
    assert.equal(error.code, 'validation_error');
    assert.equal(error.status, 400);
    return error.errors ?? [];
  }
  assert.fail(`expected ${JSON.stringify(query)} to be rejected`);
}

describe('parseTrafficReportQuery: defaults', () => {
  it('defaults to the 28 days up to yesterday (UTC), group_by source,medium,campaign,landing_page, -sessions, limit 100', () => {
    const q = parseTrafficReportQuery({}, NOW);
    assert.equal(q.to, '2026-03-14');
    assert.equal(q.from, '2026-02-15');
    assert.deepEqual(q.groupBy, ['source', 'medium', 'campaign', 'landing_page']);
    assert.deepEqual(q.sort, { field: 'sessions', direction: 'desc' });
    assert.equal(q.limit, 100);
    assert.deepEqual(q.filters, {});
    assert.equal(q.cursor, undefined);
  });

  it('uses "yesterday" in UTC even just after midnight', () => {
    assert.equal(parseTrafficReportQuery({}, new Date('2026-01-01T00:00:01Z')).to, '2025-12-31');
  });

  it('accepts every valid parameter', () => {
    const q = parseTrafficReportQuery(
      {
        from: '2025-01-01',
        to: '2026-01-01',
        group_by: 'date,source',
        source: 'google',
        medium: 'cpc',
        campaign: 'x',
        landing_page: '/a',
        sort: 'date',
        limit: '1000',
      },
      NOW,
    );
    assert.equal(q.from, '2025-01-01');
    assert.equal(q.to, '2026-01-01');
    assert.deepEqual(q.groupBy, ['date', 'source']);
    assert.deepEqual(q.filters, { source: 'google', medium: 'cpc', campaign: 'x', landing_page: '/a' });
    assert.deepEqual(q.sort, { field: 'date', direction: 'asc' });
    assert.equal(q.limit, 1000);
  });

  it('sorts by any metric, descending with "-"', () => {
    assert.deepEqual(parseTrafficReportQuery({ sort: '-bounce_rate' }, NOW).sort, {
      field: 'bounce_rate',
      direction: 'desc',
    });
    assert.deepEqual(parseTrafficReportQuery({ sort: 'users' }, NOW).sort, { field: 'users', direction: 'asc' });
  });

  it('with only `to`, the range is the 28 days up to it', () => {
    const q = parseTrafficReportQuery({ to: '2026-01-28' }, NOW);
    assert.equal(q.from, '2026-01-01');
  });
});

describe('parseTrafficReportQuery: rejected input names the parameter', () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['unknown parameter', { foo: '1' }, '/foo'],
    ['impossible date', { from: '2026-02-30' }, '/from'],
    ['non-date', { to: 'yesterday' }, '/to'],
    ['from after to', { from: '2026-03-02', to: '2026-03-01' }, '/from'],
    ['more than 366 days', { from: '2025-01-01', to: '2026-01-02' }, '/to'],
    ['unknown dimension', { group_by: 'source,country' }, '/group_by'],
    ['empty group_by', { group_by: '' }, '/group_by'],
    ['duplicate dimension', { group_by: 'source,source' }, '/group_by'],
    ['unknown sort', { sort: '-visits' }, '/sort'],
    ['sort by a dimension not grouped', { sort: 'date' }, '/sort'],
    ['limit 0', { limit: '0' }, '/limit'],
    ['limit 1001', { limit: '1001' }, '/limit'],
    ['limit not a number', { limit: '10abc' }, '/limit'],
    ['negative limit', { limit: '-5' }, '/limit'],
    ['empty filter', { source: '' }, '/source'],
    ['repeated parameter', { source: ['a', 'b'] }, '/source'],
    ['garbage cursor', { cursor: '!!!' }, '/cursor'],
    ['base64 but not a cursor', { cursor: Buffer.from('{"a":1}').toString('base64url') }, '/cursor'],
  ];
  for (const [name, query, pointer] of cases) {
    it(name, () => {
      const errors = errorsOf(query);
      assert.ok(
        errors.some((e) => e.pointer === pointer && e.message.length > 0),
        JSON.stringify(errors),
      );
    });
  }

  it('reports every bad parameter at once', () => {
    const pointers = errorsOf({ limit: '0', sort: 'nope', bogus: 'x' })
      .map((e) => e.pointer)
      .sort();
    assert.deepEqual(pointers, ['/bogus', '/limit', '/sort']);
  });

  it('accepts exactly 366 days', () => {
    assert.equal(parseTrafficReportQuery({ from: '2024-01-01', to: '2024-12-31' }, NOW).from, '2024-01-01');
  });
});

describe('cursor', () => {
  it('round-trips for the same query and is refused for another one', () => {
    const base = parseTrafficReportQuery({ from: '2026-01-01', to: '2026-01-31', group_by: 'source' }, NOW);
    const cursor = cursorAfter(base, { source: 'google', sessions: 42 });
    const next = parseTrafficReportQuery({ from: '2026-01-01', to: '2026-01-31', group_by: 'source', cursor }, NOW);
    assert.deepEqual(next.cursor, { value: 42, key: ['google'] });
    const errors = errorsOf({ from: '2026-01-02', to: '2026-01-31', group_by: 'source', cursor });
    assert.deepEqual(
      errors.map((e) => e.pointer),
      ['/cursor'],
    );
    // A different limit is fine: the cursor belongs to the rows, not the page size.
    assert.ok(
      parseTrafficReportQuery({ from: '2026-01-01', to: '2026-01-31', group_by: 'source', cursor, limit: '5' }, NOW)
        .cursor,
    );
  });

  it('carries a null sort value (rows whose metric the provider cannot supply)', () => {
    const base = parseTrafficReportQuery({ group_by: 'source', sort: 'new_users' }, NOW);
    const cursor = cursorAfter(base, { source: 'x', new_users: null });
    assert.deepEqual(parseTrafficReportQuery({ group_by: 'source', sort: 'new_users', cursor }, NOW).cursor, {
      value: null,
      key: ['x'],
    });
  });
});

function metrics(partial: Partial<TrafficMetrics>): TrafficMetrics {
  return { ...emptyMetrics(), ...partial };
}

describe('aggregateMetrics', () => {
  const cases: Array<[string, TrafficMetrics[], Partial<TrafficMetrics>]> = [
    ['no rows: every metric null', [], emptyMetrics()],
    [
      'sums counts, weights bounce_rate and avg_session_duration by sessions',
      [
        metrics({ sessions: 100, users: 90, pageviews: 300, bounce_rate: 0.5, avg_session_duration: 60 }),
        metrics({ sessions: 300, users: 250, pageviews: 500, bounce_rate: 0.1, avg_session_duration: 20 }),
      ],
      {
        sessions: 400,
        users: 340,
        pageviews: 800,
        bounce_rate: 0.2,
        avg_session_duration: 30,
        new_users: null,
        engaged_sessions: null,
        conversions: null,
      },
    ],
    [
      'a metric no row supplies stays null; a partly supplied one sums what is there',
      [metrics({ sessions: 1, conversions: 2 }), metrics({ sessions: 1 })],
      { sessions: 2, conversions: 2, new_users: null, bounce_rate: null },
    ],
    [
      'averages weight only the rows that supply them',
      [metrics({ sessions: 10, bounce_rate: 0.3 }), metrics({ sessions: 1000, bounce_rate: null })],
      { sessions: 1010, bounce_rate: 0.3 },
    ],
    [
      'zero sessions: averages null, not NaN',
      [metrics({ sessions: 0, bounce_rate: 0.5 })],
      { sessions: 0, bounce_rate: null },
    ],
  ];
  for (const [name, rows, expected] of cases) {
    it(name, () => {
      const out = aggregateMetrics(rows);
      for (const [key, value] of Object.entries(expected)) {
        const actual = out[key as keyof TrafficMetrics];
        if (typeof value === 'number')
          assert.ok(actual !== null && Math.abs(actual - value) < 1e-9, `${key}: ${actual} ≠ ${value}`);
        else assert.equal(actual, value, key);
      }
    });
  }
});

describe('mergeDuplicateRows', () => {
  it('merges rows that share the natural key and keeps others', () => {
    const dims = { date: '2026-01-01', source: '(direct)', medium: '(none)', campaign: '(not set)', landing_page: '/' };
    const rows: TrafficRow[] = [
      { ...dims, ...metrics({ sessions: 1, bounce_rate: 1 }) },
      { ...dims, ...metrics({ sessions: 3, bounce_rate: 0 }) },
      { ...dims, landing_page: '/b', ...metrics({ sessions: 5 }) },
    ];
    const merged = mergeDuplicateRows(rows);
    assert.equal(merged.length, 2);
    assert.equal(merged[0]!.sessions, 4);
    assert.equal(merged[0]!.bounce_rate, 0.25);
    assert.equal(merged[1]!.landing_page, '/b');
  });
});

describe('properties (fast-check)', () => {
  const fullRow = fc.record({
    sessions: fc.integer({ min: 1, max: 10_000 }),
    users: fc.integer({ min: 0, max: 10_000 }),
    new_users: fc.integer({ min: 0, max: 10_000 }),
    pageviews: fc.integer({ min: 0, max: 100_000 }),
    engaged_sessions: fc.integer({ min: 0, max: 10_000 }),
    bounce_rate: fc.double({ min: 0, max: 1, noNaN: true }),
    avg_session_duration: fc.double({ min: 0, max: 3600, noNaN: true }),
    conversions: fc.integer({ min: 0, max: 100 }),
  });

  it('aggregating parts then the parts gives the aggregate of the whole (rows supplying every metric)', () => {
    fc.assert(
      fc.property(
        fc.array(fullRow, { minLength: 1, maxLength: 20 }),
        fc.array(fullRow, { minLength: 1, maxLength: 20 }),
        (a, b) => {
          const whole = aggregateMetrics([...a, ...b]);
          const parts = aggregateMetrics([aggregateMetrics(a), aggregateMetrics(b)]);
          for (const key of Object.keys(whole) as Array<keyof TrafficMetrics>) {
            const [x, y] = [whole[key]!, parts[key]!];
            assert.ok(Math.abs(x - y) <= 1e-9 * Math.max(1, Math.abs(x)), `${key}: ${x} vs ${y}`);
          }
        },
      ),
    );
  });

  it('weighted averages stay within the range of the rows they average', () => {
    fc.assert(
      fc.property(fc.array(fullRow, { minLength: 1, maxLength: 30 }), (rows) => {
        const out = aggregateMetrics(rows);
        const rates = rows.map((r) => r.bounce_rate);
        assert.ok(out.bounce_rate! >= Math.min(...rates) - 1e-12 && out.bounce_rate! <= Math.max(...rates) + 1e-12);
      }),
    );
  });

  it('a cursor made for a query is accepted by that query and carries the same key', () => {
    const text = fc.string({ minLength: 1, maxLength: 40 });
    fc.assert(
      fc.property(
        text,
        text,
        fc.option(fc.double({ noNaN: true, noDefaultInfinity: true }), { nil: null }),
        (source, medium, value) => {
          const q = parseTrafficReportQuery({ group_by: 'source,medium', sort: '-bounce_rate' }, NOW);
          const cursor = cursorAfter(q, { source, medium, bounce_rate: value });
          const again = parseTrafficReportQuery({ group_by: 'source,medium', sort: '-bounce_rate', cursor }, NOW);
          assert.deepEqual(again.cursor, { value: Object.is(value, -0) ? 0 : value, key: [source, medium] });
        },
      ),
    );
  });
});
