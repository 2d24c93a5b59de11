// `inlet traffic import`: rows from a CSV file whose header names the stored row fields. The whole
// file is validated before anything is written; then each date it contains is replaced like a sync
// replaces it (one transaction), and the import is recorded as a run.
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { AppError } from '../domain/errors.js';
import { uuidv7 } from '../domain/ids.js';
import { isCalendarDate } from '../domain/timestamps.js';
import {
  MAX_DIMENSION_LENGTH,
  TRAFFIC_DIMENSIONS,
  TRAFFIC_METRICS,
  type TrafficRow,
} from '../domain/traffic-reports.js';
import type { Storage } from '../storage/types.js';

export const CSV_COLUMNS = [...TRAFFIC_DIMENSIONS, ...TRAFFIC_METRICS] as const;
const INTEGER_METRICS = new Set(['sessions', 'users', 'new_users', 'pageviews', 'engaged_sessions', 'conversions']);

export class CsvImportError extends Error {
  constructor(
    readonly line: number,
    readonly column: string | undefined,
    problem: string,
  ) {
    super(`line ${line}${column === undefined ? '' : `, column "${column}"`}: ${problem}`);
    this.name = 'CsvImportError';
  }
}

export interface CsvImportResult {
  /** Data lines read (the header not counted). */
  lines: number;
  rows: number;
  dates: number;
  from: string | null;
  to: string | null;
}

export interface CsvImportOptions {
  /** Called after every `progressEvery` data lines, and once at the end. */
  onProgress?: (lines: number) => void;
  progressEvery?: number;
  now?: () => Date;
}

/** RFC 4180 fields of one line: commas, double-quoted fields with "" escapes. A record cannot span lines. */
export function splitCsvLine(line: string, lineNumber: number): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  let wasQuoted = false;
  for (let i = 0; i < line.length; i++) {
    const char = line[i]!;
    if (quoted) {
      if (char === '"' && line[i + 1] === '"') {
        field += '"';
        i++;
      } else if (char === '"') quoted = false;
      else field += char;
    } else if (char === ',') {
      fields.push(field);
      field = '';
      wasQuoted = false;
    } else if (char === '"' && field === '' && !wasQuoted) {
      quoted = true;
      wasQuoted = true;
    } else if (wasQuoted) {
      throw new CsvImportError(
        lineNumber,
        undefined,
        `unexpected character after a closing quote in field ${fields.length + 1}`,
      );
    } else field += char;
  }
  if (quoted) throw new CsvImportError(lineNumber, undefined, 'a quoted field is not closed on this line');
  fields.push(field);
  return fields;
}

function parseValue(column: string, raw: string, line: number): string | number | null {
  if ((TRAFFIC_DIMENSIONS as readonly string[]).includes(column)) {
    if (column === 'date') {
      if (!isCalendarDate(raw))
        throw new CsvImportError(line, column, `must be a calendar date YYYY-MM-DD, got "${raw}"`);
      return raw;
    }
    const max = MAX_DIMENSION_LENGTH[column as keyof typeof MAX_DIMENSION_LENGTH];
    if (raw.length > max) throw new CsvImportError(line, column, `must be at most ${max} characters`);
    // An empty dimension is the providers' placeholder for "no value".
    return raw === '' ? '(not set)' : raw;
  }
  const value = raw.trim();
  if (value === '') return null;
  if (INTEGER_METRICS.has(column)) {
    if (!/^\d{1,15}$/.test(value))
      throw new CsvImportError(line, column, `must be a whole number ≥ 0 or empty, got "${raw}"`);
    return Number(value);
  }
  const number = Number(value);
  if (!/^\d+(\.\d+)?([eE][-+]?\d+)?$/.test(value) || !Number.isFinite(number)) {
    throw new CsvImportError(line, column, `must be a number ≥ 0 or empty, got "${raw}"`);
  }
  if (column === 'bounce_rate' && number > 1)
    throw new CsvImportError(line, column, `must be a fraction from 0 to 1 (0.35 = 35 %), got "${raw}"`);
  return number;
}

/** Reads and validates the whole CSV; throws CsvImportError naming the line and column of the first problem. */
export async function parseTrafficCsv(
  input: Readable,
  options: CsvImportOptions = {},
): Promise<{ rows: TrafficRow[]; lines: number }> {
  const every = options.progressEvery ?? 10_000;
  const reader = createInterface({ input, crlfDelay: Infinity });
  const rows: TrafficRow[] = [];
  const firstLineOfKey = new Map<string, number>();
  let columns: string[] | undefined;
  let lineNumber = 0;
  let dataLines = 0;
  for await (const rawLine of reader) {
    lineNumber++;
    const line = lineNumber === 1 ? rawLine.replace(/^\uFEFF/, '') : rawLine;
    if (columns === undefined) {
      columns = splitCsvLine(line, lineNumber).map((name) => name.trim());
      const unknown = columns.find((name) => !(CSV_COLUMNS as readonly string[]).includes(name));
      if (unknown !== undefined)
        throw new CsvImportError(
          1,
          unknown,
          `is not a known column; the header must name these columns: ${CSV_COLUMNS.join(',')}`,
        );
      const missing = CSV_COLUMNS.find((name) => !columns!.includes(name));
      if (missing !== undefined)
        throw new CsvImportError(1, missing, `is missing from the header; expected: ${CSV_COLUMNS.join(',')}`);
      const twice = columns.find((name, i) => columns!.indexOf(name) !== i);
      if (twice !== undefined) throw new CsvImportError(1, twice, 'appears twice in the header');
      continue;
    }
    if (line.trim() === '') continue;
    const fields = splitCsvLine(line, lineNumber);
    if (fields.length !== columns.length) {
      throw new CsvImportError(lineNumber, undefined, `has ${fields.length} fields, the header has ${columns.length}`);
    }
    const row: Record<string, string | number | null> = {};
    columns.forEach((column, i) => {
      row[column] = parseValue(column, fields[i]!, lineNumber);
    });
    const typed = row as unknown as TrafficRow;
    const key = JSON.stringify([typed.date, typed.source, typed.medium, typed.campaign, typed.landing_page]);
    const earlier = firstLineOfKey.get(key);
    if (earlier !== undefined)
      throw new CsvImportError(
        lineNumber,
        undefined,
        `repeats the date, source, medium, campaign and landing_page of line ${earlier}`,
      );
    firstLineOfKey.set(key, lineNumber);
    rows.push(typed);
    dataLines++;
    if (dataLines % every === 0) options.onProgress?.(dataLines);
  }
  if (columns === undefined)
    throw new CsvImportError(
      1,
      undefined,
      `the file is empty; the first line must be the header ${CSV_COLUMNS.join(',')}`,
    );
  if (dataLines % every !== 0 || dataLines === 0) options.onProgress?.(dataLines);
  return { rows, lines: dataLines };
}

/** Validates the CSV, then replaces the product's rows of every date it contains (provider `csv`). */
export async function importTrafficCsv(
  storage: Storage,
  productId: string,
  input: Readable,
  options: CsvImportOptions = {},
): Promise<CsvImportResult> {
  if ((await storage.products.get(productId)) === undefined)
    throw new AppError('not_found', `No product with id "${productId}".`);
  const now = options.now ?? (() => new Date());
  const { rows, lines } = await parseTrafficCsv(input, options);
  const byDate = new Map<string, TrafficRow[]>();
  for (const row of rows) {
    const slice = byDate.get(row.date);
    if (slice) slice.push(row);
    else byDate.set(row.date, [row]);
  }
  const dates = [...byDate.keys()].sort();
  const from = dates[0] ?? null;
  const to = dates.at(-1) ?? null;
  if (from === null || to === null) return { lines, rows: 0, dates: 0, from, to };

  const runId = uuidv7(); // time-ordered: runs started in the same millisecond still list in order
  await storage.traffic.startRun({
    id: runId,
    productId,
    provider: 'csv',
    kind: 'import',
    startedAt: now().toISOString(),
    finishedAt: null,
    from,
    to,
    rows: null,
    outcome: 'running',
    error: null,
  });
  try {
    const stored = await storage.traffic.replaceSlices(productId, 'csv', byDate);
    await storage.traffic.finishRun(productId, runId, {
      finishedAt: now().toISOString(),
      rows: stored,
      outcome: 'succeeded',
      error: null,
    });
    return { lines, rows: stored, dates: dates.length, from, to };
  } catch (error) {
    await storage.traffic
      .finishRun(productId, runId, {
        finishedAt: now().toISOString(),
        rows: null,
        outcome: 'failed',
        error: 'internal error (details are in the server log)',
      })
      .catch(() => {});
    throw error;
  }
}
