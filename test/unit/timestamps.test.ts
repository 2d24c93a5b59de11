// RFC 3339 timestamps (domain/timestamps.ts): the UTC form `toISOString` writes is taken by a character check
// (`canonicalUtc`), everything else by the regular expression and the date arithmetic. Both ways must give the
// same answers: valid dates normalised to UTC with milliseconds, impossible ones refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRfc3339 } from '../../src/domain/timestamps.js';

test('timestamps are normalised to UTC with milliseconds, and impossible ones refused', () => {
  const cases: Array<[string, string | undefined]> = [
    ['2026-03-01T12:00:00Z', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01T12:00:00.123Z', '2026-03-01T12:00:00.123Z'],
    ['2024-02-29T12:00:00.000Z', '2024-02-29T12:00:00.000Z'],
    ['2026-02-29T12:00:00Z', undefined],
    ['2100-02-29T00:00:00.000Z', undefined],
    ['2000-02-29T00:00:00Z', '2000-02-29T00:00:00.000Z'],
    ['2026-04-31T00:00:00Z', undefined],
    ['2026-13-01T00:00:00Z', undefined],
    ['2026-00-10T00:00:00Z', undefined],
    ['2026-03-00T00:00:00Z', undefined],
    ['2026-03-01T24:00:00Z', undefined],
    ['2026-03-01T23:60:00Z', undefined],
    ['2026-03-01T23:59:60Z', undefined],
    ['0000-01-01T00:00:00.000Z', '0000-01-01T00:00:00.000Z'],
    ['0099-12-31T23:59:59.999Z', '0099-12-31T23:59:59.999Z'],
    ['2026-03-01t12:00:00z', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01T12:00:00.1Z', '2026-03-01T12:00:00.100Z'],
    ['2026-03-01T12:00:00+01:00', '2026-03-01T11:00:00.000Z'],
    ['20x6-03-01T12:00:00Z', undefined],
    ['2026-03-01T12:00:00.12xZ', undefined],
    ['2026-03-01 12:00:00Z', undefined],
  ];
  for (const [value, expected] of cases) assert.equal(parseRfc3339(value), expected, value);
});

test('the character check agrees with the long way on dates across four centuries', () => {
  // The long way, on the same instant written with an offset of zero (which the character check never takes).
  for (let day = Date.UTC(1999, 0, 1); day < Date.UTC(2401, 0, 1); day += 86_400_000 * 7 + 3_723_001) {
    const iso = new Date(day).toISOString();
    assert.equal(parseRfc3339(iso), iso);
    assert.equal(parseRfc3339(iso), parseRfc3339(`${iso.slice(0, 23)}+00:00`));
    assert.equal(parseRfc3339(`${iso.slice(0, 19)}Z`), `${iso.slice(0, 19)}.000Z`);
  }
});

test('leap days of years 0–99 follow the proleptic Gregorian calendar, not 19xx', () => {
  // Year 0 is divisible by 400: a leap year (1900 is not one, which is what Date.UTC would read "0000" as).
  assert.equal(parseRfc3339('0000-02-29T00:00:00+00:00'), '0000-02-29T00:00:00.000Z');
  assert.equal(parseRfc3339('0004-02-29T12:00:00Z'), '0004-02-29T12:00:00.000Z');
  assert.equal(parseRfc3339('0001-02-29T00:00:00+00:00'), undefined);
  assert.equal(parseRfc3339('1900-02-29T00:00:00+00:00'), undefined);
});
