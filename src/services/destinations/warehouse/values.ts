// Property values as warehouse columns (warehouses.md §1): nested objects flattened with `_` for paths of up
// to 3 segments, arrays (and objects below the third segment) as one jsonb column; each column's type inferred
// from the first value seen and widened when a later value does not fit (bigint → double precision → text;
// boolean, timestamptz or jsonb → text), so a load never fails and no value is lost. Values are written in
// COPY's binary format (copy.ts).
import { parseTime, type CopyRows } from './copy.js';

export type ColumnType = 'boolean' | 'bigint' | 'double precision' | 'timestamptz' | 'text' | 'jsonb';

/** Paths of up to this many segments become columns of their own. */
const MAX_DEPTH = 3;
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;
/** bigint's range, short of its ends (a number this large is not exact in JavaScript anyway). */
const BIGINT_LIMIT = 9_000_000_000_000_000_000;

/** One flattened value: its path (the JSON of its segments, the column map's key) and value. */
export interface Leaf {
  path: string;
  /** Shared between leaves of one path: never changed. */
  segments: readonly string[];
  value: unknown;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A path's key and segments, made once per path seen (the same few paths come in event after event). */
interface PathNode {
  path: string;
  segments: string[];
  children: Map<string, PathNode> | undefined;
}

/** Paths kept at most: properties with ever new keys would otherwise grow it without end. */
const PATH_CACHE_LIMIT = 10_000;
const rootPaths = new Map<string, PathNode>();
let pathsCached = 0;

function pathNode(siblings: Map<string, PathNode>, prefix: string[], key: string): PathNode {
  const known = siblings.get(key);
  if (known !== undefined) return known;
  const segments = [...prefix, key];
  const node: PathNode = { path: JSON.stringify(segments), segments, children: undefined };
  if (pathsCached < PATH_CACHE_LIMIT) {
    siblings.set(key, node);
    pathsCached++;
  }
  return node;
}

/** The leaves of a properties (or traits) object; null values are skipped (they carry no type). */
export function flatten(object: Record<string, unknown>): Leaf[] {
  const leaves: Leaf[] = [];
  const walk = (value: Record<string, unknown>, prefix: string[], siblings: Map<string, PathNode>) => {
    for (const key in value) {
      if (!Object.hasOwn(value, key)) continue;
      const child = value[key];
      if (child === null || child === undefined) continue;
      const node = pathNode(siblings, prefix, key);
      if (isObject(child) && node.segments.length < MAX_DEPTH)
        walk(child, node.segments, (node.children ??= new Map()));
      else leaves.push({ path: node.path, segments: node.segments, value: child });
    }
  };
  walk(object, [], rootPaths);
  return leaves;
}

/** Whether a string is an RFC 3339 time PostgreSQL takes as timestamptz (a real date: no February 30th). */
function isTime(value: string): boolean {
  return RFC3339.test(value) && Number(value.slice(0, 4)) >= 1 && parseTime(value) !== undefined;
}

/** The type a value would have in a new column. */
export function typeOf(value: unknown): ColumnType {
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number')
    return Number.isInteger(value) && Math.abs(value) < BIGINT_LIMIT ? 'bigint' : 'double precision';
  if (typeof value === 'string') return isTime(value) ? 'timestamptz' : 'text';
  return 'jsonb';
}

/** Whether a value of type `value` can be written to a column of type `column` as it is. */
function fits(column: ColumnType, value: ColumnType): boolean {
  return column === value || column === 'text' || (column === 'double precision' && value === 'bigint');
}

/** The column type that holds both (the column's type when the value fits it). */
export function widened(column: ColumnType, value: ColumnType): ColumnType {
  if (fits(column, value)) return column;
  if (column === 'bigint' && value === 'double precision') return 'double precision';
  return 'text';
}

/** A value as a COPY field of a column of type `column` (which it fits: the column was widened first). */
export function copyValue(out: CopyRows, value: unknown, column: ColumnType): void {
  if (value === null || value === undefined) out.nul();
  else if (column === 'jsonb') out.jsonb(JSON.stringify(value));
  else if (column === 'text')
    out.text(typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value));
  else if (column === 'bigint') out.int8(value as number);
  else if (column === 'double precision') out.float8(value as number);
  else if (column === 'boolean') out.bool(value as boolean);
  else out.time(value as string);
}
