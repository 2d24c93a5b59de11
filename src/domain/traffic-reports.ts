// Traffic reports (contract §8): the query parameters of GET /api/v2/traffic_reports, the opaque
// keyset cursor, and the aggregation rules. Pure: no I/O. The storage adapter aggregates in SQL by the
// same rules; `aggregateRows` is the reference implementation (and merges rows that map to one key).
import { createHash } from 'node:crypto';
import { validationError, type FieldError } from './errors.js';
import { isCalendarDate } from './timestamps.js';

export const TRAFFIC_DIMENSIONS = ['date', 'source', 'medium', 'campaign', 'landing_page'] as const;
export type TrafficDimension = (typeof TRAFFIC_DIMENSIONS)[number];

/** Summed over rows. (`users` summed over days is an upper bound: one person on two days counts twice.) */
export const COUNT_METRICS = [
  'sessions',
  'users',
  'new_users',
  'pageviews',
  'engaged_sessions',
  'conversions',
] as const;
/** Averaged over rows, weighted by each row's sessions. */
export const WEIGHTED_METRICS = ['bounce_rate', 'avg_session_duration'] as const;
export const TRAFFIC_METRICS = [
  'sessions',
  'users',
  'new_users',
  'pageviews',
  'engaged_sessions',
  'bounce_rate',
  'avg_session_duration',
  'conversions',
] as const;
export type TrafficMetric = (typeof TRAFFIC_METRICS)[number];
export type CountMetric = (typeof COUNT_METRICS)[number];
export type WeightedMetric = (typeof WEIGHTED_METRICS)[number];

/** Metric values: `null` when the provider cannot supply the metric (Plausible has no new_users, for example). */
export type TrafficMetrics = Record<TrafficMetric, number | null>;
export type TrafficDimensions = Record<TrafficDimension, string>;

/** One stored row: one (date, source, medium, campaign, landing page) of one product. */
export type TrafficRow = TrafficDimensions & TrafficMetrics;
/** One row of a report: the grouped dimensions and every metric. */
export type TrafficReportRow = Partial<TrafficDimensions> & TrafficMetrics;

export const DEFAULT_GROUP_BY: TrafficDimension[] = ['source', 'medium', 'campaign', 'landing_page'];
export const DEFAULT_REPORT_DAYS = 28;
export const MAX_REPORT_DAYS = 366;
export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;
const MAX_FILTER_LENGTH = 2048;

export type FilterDimension = Exclude<TrafficDimension, 'date'>;
export const FILTER_DIMENSIONS: FilterDimension[] = ['source', 'medium', 'campaign', 'landing_page'];

export interface ReportSort {
  field: TrafficMetric | TrafficDimension;
  direction: 'asc' | 'desc';
}

/** Where the previous page ended: the sort value and the group key of its last row. */
export interface ReportCursor {
  value: string | number | null;
  key: string[];
}

export interface TrafficReportQuery {
  from: string;
  to: string;
  groupBy: TrafficDimension[];
  filters: Partial<Record<FilterDimension, string>>;
  sort: ReportSort;
  limit: number;
  cursor: ReportCursor | undefined;
}

const KNOWN_PARAMETERS = new Set(['from', 'to', 'group_by', 'sort', 'limit', 'cursor', ...FILTER_DIMENSIONS]);

// ---------------------------------------------------------------------------------------------
// Dates

const DAY_MS = 86_400_000;

export function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * DAY_MS).toISOString().slice(0, 10);
}

/** Inclusive number of days from `from` to `to`. */
export function daysBetween(from: string, to: string): number {
  return Math.round((Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / DAY_MS) + 1;
}

export function utcDate(now: Date): string {
  return now.toISOString().slice(0, 10);
}

/** Every date from `from` to `to`, inclusive. */
export function datesInRange(from: string, to: string): string[] {
  const dates: string[] = [];
  for (let date = from; date <= to; date = addDays(date, 1)) dates.push(date);
  return dates;
}

// ---------------------------------------------------------------------------------------------
// Query parameters

function isMetric(value: string): value is TrafficMetric {
  return (TRAFFIC_METRICS as readonly string[]).includes(value);
}

function isDimension(value: string): value is TrafficDimension {
  return (TRAFFIC_DIMENSIONS as readonly string[]).includes(value);
}

/**
 * Validates the query string of GET /api/v2/traffic_reports. `query` is what the HTTP layer parsed
 * (a repeated parameter arrives as an array). Throws `validation_error` naming every bad parameter.
 */
export function parseTrafficReportQuery(query: Record<string, unknown>, now: Date = new Date()): TrafficReportQuery {
  const errors: FieldError[] = [];
  const fail = (name: string, message: string) => errors.push({ pointer: `/${name}`, message });

  const single = (name: string): string | undefined => {
    const value = query[name];
    if (value === undefined) return undefined;
    if (typeof value !== 'string') {
      fail(name, Array.isArray(value) ? 'must be given at most once' : 'must be a string');
      return undefined;
    }
    return value;
  };

  for (const name of Object.keys(query)) {
    if (!KNOWN_PARAMETERS.has(name)) {
      fail(name, `is not a known query parameter (known: ${[...KNOWN_PARAMETERS].join(', ')})`);
    }
  }

  // Dates: default the 28 days up to yesterday (UTC); an explicit `to` moves the default `from` along.
  const yesterday = addDays(utcDate(now), -1);
  const rawFrom = single('from');
  const rawTo = single('to');
  let datesValid = true;
  if (rawFrom !== undefined && !isCalendarDate(rawFrom)) {
    fail('from', 'must be a calendar date YYYY-MM-DD');
    datesValid = false;
  }
  if (rawTo !== undefined && !isCalendarDate(rawTo)) {
    fail('to', 'must be a calendar date YYYY-MM-DD');
    datesValid = false;
  }
  const to = rawTo !== undefined && isCalendarDate(rawTo) ? rawTo : yesterday;
  const from = rawFrom !== undefined && isCalendarDate(rawFrom) ? rawFrom : addDays(to, -(DEFAULT_REPORT_DAYS - 1));
  if (datesValid) {
    if (from > to) fail('from', `must not be after to (${to})`);
    else if (daysBetween(from, to) > MAX_REPORT_DAYS) fail('to', `the range must span at most ${MAX_REPORT_DAYS} days`);
  }

  let groupBy = DEFAULT_GROUP_BY;
  const rawGroupBy = single('group_by');
  if (rawGroupBy !== undefined) {
    const parts = rawGroupBy.split(',').map((part) => part.trim());
    const unknown = parts.filter((part) => !isDimension(part));
    if (rawGroupBy.trim() === '') fail('group_by', `must list at least one of ${TRAFFIC_DIMENSIONS.join(', ')}`);
    else if (unknown.length > 0) {
      fail('group_by', `unknown dimension "${unknown[0]}"; allowed: ${TRAFFIC_DIMENSIONS.join(', ')}`);
    } else if (new Set(parts).size !== parts.length) fail('group_by', 'must not list a dimension twice');
    else groupBy = parts as TrafficDimension[];
  }

  const filters: TrafficReportQuery['filters'] = {};
  for (const dimension of FILTER_DIMENSIONS) {
    const value = single(dimension);
    if (value === undefined) continue;
    if (value.length === 0) fail(dimension, 'must not be empty');
    else if (value.length > MAX_FILTER_LENGTH) fail(dimension, `must be at most ${MAX_FILTER_LENGTH} characters`);
    else filters[dimension] = value;
  }

  let sort: ReportSort = { field: 'sessions', direction: 'desc' };
  const rawSort = single('sort');
  if (rawSort !== undefined) {
    const direction = rawSort.startsWith('-') ? 'desc' : 'asc';
    const field = direction === 'desc' ? rawSort.slice(1) : rawSort;
    if (isMetric(field)) sort = { field, direction };
    else if (isDimension(field)) {
      if (groupBy.includes(field)) sort = { field, direction };
      else fail('sort', `can only sort by a dimension listed in group_by ("${field}" is not)`);
    } else {
      fail(
        'sort',
        `must be a metric or dimension, optionally prefixed by "-": ${[...TRAFFIC_METRICS, ...TRAFFIC_DIMENSIONS].join(', ')}`,
      );
    }
  }

  let limit = DEFAULT_LIMIT;
  const rawLimit = single('limit');
  if (rawLimit !== undefined) {
    if (!/^\d{1,7}$/.test(rawLimit) || Number(rawLimit) < 1 || Number(rawLimit) > MAX_LIMIT) {
      fail('limit', `must be a whole number from 1 to ${MAX_LIMIT}`);
    } else limit = Number(rawLimit);
  }

  const shape = { from, to, groupBy, filters, sort };
  let cursor: ReportCursor | undefined;
  const rawCursor = single('cursor');
  if (rawCursor !== undefined && errors.length === 0) {
    cursor = decodeCursor(rawCursor, shape);
    if (cursor === undefined)
      fail('cursor', 'is not a cursor of this query (use meta.next_cursor with the same parameters)');
  }

  if (errors.length > 0) throw validationError(errors);
  return { ...shape, limit, cursor };
}

// ---------------------------------------------------------------------------------------------
// Cursor: base64url JSON of the last row's sort key plus a fingerprint of the query it belongs to,
// so a cursor reused with other parameters is refused instead of silently skipping rows.

type QueryShape = Pick<TrafficReportQuery, 'from' | 'to' | 'groupBy' | 'filters' | 'sort'>;

function fingerprint(shape: QueryShape): string {
  const filters = FILTER_DIMENSIONS.map((d) => shape.filters[d] ?? null);
  const canonical = JSON.stringify([
    shape.from,
    shape.to,
    shape.groupBy,
    filters,
    shape.sort.field,
    shape.sort.direction,
  ]);
  return createHash('sha256').update(canonical).digest('base64url').slice(0, 16);
}

export function encodeCursor(shape: QueryShape, cursor: ReportCursor): string {
  return Buffer.from(JSON.stringify({ f: fingerprint(shape), v: cursor.value, k: cursor.key })).toString('base64url');
}

export function decodeCursor(raw: string, shape: QueryShape): ReportCursor | undefined {
  if (!/^[A-Za-z0-9_-]{1,8192}$/.test(raw)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { f, v, k } = parsed as Record<string, unknown>;
  if (f !== fingerprint(shape)) return undefined;
  if (!Array.isArray(k) || k.length !== shape.groupBy.length || !k.every((part) => typeof part === 'string'))
    return undefined;
  const field = shape.sort.field;
  if (isMetric(field)) {
    if (v !== null && (typeof v !== 'number' || !Number.isFinite(v))) return undefined;
  } else if (typeof v !== 'string') return undefined;
  return { value: v as string | number | null, key: k as string[] };
}

/** The cursor that continues after `row` (one row of the report, keyed by the query's group_by). */
export function cursorAfter(query: QueryShape, row: Partial<TrafficRow>): string {
  const value = row[query.sort.field] ?? null;
  return encodeCursor(query, { value, key: query.groupBy.map((d) => String(row[d])) });
}

// ---------------------------------------------------------------------------------------------
// Aggregation

export function emptyMetrics(): TrafficMetrics {
  return {
    sessions: null,
    users: null,
    new_users: null,
    pageviews: null,
    engaged_sessions: null,
    bounce_rate: null,
    avg_session_duration: null,
    conversions: null,
  };
}

/**
 * Aggregates rows by the rules of contract §8, exactly as the SQL report does: counts are summed
 * (null when no row supplies the metric); bounce_rate and avg_session_duration are averaged weighted
 * by sessions, over the rows that supply both (null when their sessions add up to 0 or nothing supplies them).
 */
export function aggregateMetrics(rows: readonly TrafficMetrics[]): TrafficMetrics {
  const out = emptyMetrics();
  for (const metric of COUNT_METRICS) {
    let sum: number | null = null;
    for (const row of rows) {
      const value = row[metric];
      if (value !== null) sum = (sum ?? 0) + value;
    }
    out[metric] = sum;
  }
  for (const metric of WEIGHTED_METRICS) {
    let weighted = 0;
    let weight = 0;
    let supplied = false;
    for (const row of rows) {
      const value = row[metric];
      if (value === null || row.sessions === null) continue;
      supplied = true;
      weighted += value * row.sessions;
      weight += row.sessions;
    }
    out[metric] = supplied && weight > 0 ? weighted / weight : null;
  }
  return out;
}

/**
 * Longest stored dimension values. Every dimension is part of the primary key, and a PostgreSQL index
 * entry must stay under ~2.7 kB, so provider values beyond these lengths are cut (URLs with long query
 * strings, mostly) and the CSV import refuses them.
 */
export const MAX_DIMENSION_LENGTH: Record<Exclude<TrafficDimension, 'date'>, number> = {
  source: 255,
  medium: 255,
  campaign: 255,
  landing_page: 1000,
};

/** Cuts over-long dimension values (see MAX_DIMENSION_LENGTH); merge duplicates afterwards. */
export function truncateDimensions(row: TrafficRow): TrafficRow {
  const cut = (value: string, max: number) => (value.length > max ? value.slice(0, max) : value);
  return {
    ...row,
    source: cut(row.source, MAX_DIMENSION_LENGTH.source),
    medium: cut(row.medium, MAX_DIMENSION_LENGTH.medium),
    campaign: cut(row.campaign, MAX_DIMENSION_LENGTH.campaign),
    landing_page: cut(row.landing_page, MAX_DIMENSION_LENGTH.landing_page),
  };
}

function naturalKey(row: TrafficDimensions): string {
  return JSON.stringify([row.date, row.source, row.medium, row.campaign, row.landing_page]);
}

/** Merges rows with the same (date, source, medium, campaign, landing_page) into one, by `aggregateMetrics`. */
export function mergeDuplicateRows(rows: readonly TrafficRow[]): TrafficRow[] {
  const groups = new Map<string, TrafficRow[]>();
  for (const row of rows) {
    const key = naturalKey(row);
    const group = groups.get(key);
    if (group) group.push(row);
    else groups.set(key, [row]);
  }
  return [...groups.values()].map((group) =>
    group.length === 1 ? group[0]! : { ...pickDimensions(group[0]!), ...aggregateMetrics(group) },
  );
}

function pickDimensions(row: TrafficDimensions): TrafficDimensions {
  return {
    date: row.date,
    source: row.source,
    medium: row.medium,
    campaign: row.campaign,
    landing_page: row.landing_page,
  };
}
