// RFC 3339 timestamps with an explicit offset, normalised to UTC with millisecond precision.

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;
export const RFC3339_PATTERN_SOURCE =
  '^\\d{4}-\\d{2}-\\d{2}[Tt]\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?([Zz]|[+-]\\d{2}:\\d{2})$';

/** The days of a month of the proleptic Gregorian calendar, any year (Date.UTC would read years 0–99 as 19xx). */
export function daysInMonth(year: number, month: number): number {
  if (month !== 2) return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
  return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
}

/** Whether the fields name a real date and time of day (no February 30th, no hour 24, no second 60). */
export function isCivilDateTime(
  year: number,
  month: number,
  day: number,
  hour: number,
  minute: number,
  second: number,
): boolean {
  return (
    month >= 1 &&
    month <= 12 &&
    day >= 1 &&
    day <= daysInMonth(year, month) &&
    hour <= 23 &&
    minute <= 59 &&
    second <= 59
  );
}

/** The number of the two digits at `at`, or NaN. */
export function twoDigits(value: string, at: number): number {
  const tens = value.charCodeAt(at) - 48;
  const ones = value.charCodeAt(at + 1) - 48;
  return tens >= 0 && tens <= 9 && ones >= 0 && ones <= 9 ? tens * 10 + ones : NaN;
}

/**
 * A timestamp already in UTC as `toISOString` writes it, with or without the milliseconds (`…:ssZ`, `…:ss.sssZ`),
 * the form most senders use: checked character by character, and its UTC form is itself (with `.000` added),
 * without the regular expression and the date arithmetic below. Anything else is undefined and goes the long way.
 */
function canonicalUtc(value: string): string | undefined {
  const length = value.length;
  if (length !== 24 && length !== 20) return undefined;
  if (
    value.charCodeAt(4) !== 45 /* - */ ||
    value.charCodeAt(7) !== 45 ||
    value.charCodeAt(10) !== 84 /* T */ ||
    value.charCodeAt(13) !== 58 /* : */ ||
    value.charCodeAt(16) !== 58 ||
    value.charCodeAt(length - 1) !== 90 /* Z */
  )
    return undefined;
  if (
    length === 24 &&
    (value.charCodeAt(19) !== 46 /* . */ || !(twoDigits(value, 20) >= 0) || !(twoDigits(value, 21) >= 0))
  )
    return undefined;
  const year = twoDigits(value, 0) * 100 + twoDigits(value, 2);
  const month = twoDigits(value, 5);
  const day = twoDigits(value, 8);
  if (!(year >= 0 && month >= 1 && month <= 12 && day >= 1)) return undefined;
  if (day > daysInMonth(year, month)) return undefined;
  if (!(twoDigits(value, 11) <= 23 && twoDigits(value, 14) <= 59 && twoDigits(value, 17) <= 59)) return undefined;
  return length === 24 ? value : `${value.slice(0, 19)}.000Z`;
}

/** Parses an RFC 3339 timestamp; returns the UTC form `YYYY-MM-DDTHH:mm:ss.sssZ`, or undefined if invalid. */
export function parseRfc3339(value: string): string | undefined {
  const canonical = canonicalUtc(value);
  if (canonical !== undefined) return canonical;
  const m = RFC3339.exec(value);
  if (!m) return undefined;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4]);
  const minute = Number(m[5]);
  const second = Number(m[6]);
  if (!isCivilDateTime(year, month, day, hour, minute, second)) return undefined;
  const millis = m[7] === undefined ? 0 : Number(m[7].padEnd(3, '0').slice(0, 3));
  let offsetMinutes = 0;
  if (m[8] === undefined) {
    const offsetHours = Number(m[10]);
    const offsetMins = Number(m[11]);
    if (offsetHours > 23 || offsetMins > 59) return undefined;
    offsetMinutes = (m[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMins);
  }
  // setUTCFullYear, unlike Date.UTC, keeps years 0–99 as they are.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, millis);
  date.setTime(date.getTime() - offsetMinutes * 60_000);
  const iso = date.toISOString();
  return /^\d{4}-/.test(iso) ? iso : undefined;
}

/** `YYYY-MM-DD` calendar date check. */
export function isCalendarDate(value: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  if (!m) return false;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month);
}
