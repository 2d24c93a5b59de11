// The catalogue's counts in memory (governance.md §1): per product, each name's count, first/last seen,
// sources, keys and the JSON types of its dotted property paths (never a value), and the trait paths. In
// memory each product keeps at most `maxEvents` names and `maxProperties` paths per name between flushes,
// so a flood of new names cannot grow memory.
import type { CatalogScope, EventRecord, JsonType } from '../../storage/types.js';

/** Paths are followed into nested objects down to this depth (`a.b.c`). */
export const CATALOG_MAX_DEPTH = 3;
/**
 * A longer path (a sender using values as keys, or a hostile one) is counted as overflow instead: it would be
 * useless to read, and PostgreSQL refuses B-tree index entries over ~2.7 kB, which would fail every flush.
 */
export const CATALOG_MAX_PATH_LENGTH = 256;

export interface TypeCount {
  count: number;
  first: string;
  last: string;
}

export type PathTypes = Map<string, Map<JsonType, TypeCount>>;

export interface NameAggregate {
  eventType: string;
  action: string;
  count: number;
  first: string;
  last: string;
  sources: Set<string>;
  keyIds: Set<string>;
  paths: PathTypes;
  propertiesOverflow: number;
}

export interface ProductAggregate {
  names: Map<string, NameAggregate>;
  traits: PathTypes;
  overflow: Record<CatalogScope, number>;
}

export function jsonType(value: unknown): JsonType {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  switch (typeof value) {
    case 'string':
      return 'string';
    case 'boolean':
      return 'boolean';
    case 'number':
      return Number.isInteger(value) ? 'integer' : 'number';
    default:
      return 'object';
  }
}

/** Calls `visit` for each dotted path of `object` down to CATALOG_MAX_DEPTH. */
export function walkPaths(
  object: Record<string, unknown>,
  visit: (path: string, type: JsonType) => void,
  prefix = '',
  depth = 1,
): void {
  for (const key in object) {
    const value = object[key];
    if (value === undefined) continue;
    const path = prefix === '' ? key : `${prefix}.${key}`;
    const type = jsonType(value);
    visit(path, type);
    if (type === 'object' && depth < CATALOG_MAX_DEPTH)
      walkPaths(value as Record<string, unknown>, visit, path, depth + 1);
  }
}

export function addType(
  paths: PathTypes,
  path: string,
  type: JsonType,
  count: number,
  first: string,
  last: string,
): void {
  let types = paths.get(path);
  if (types === undefined) paths.set(path, (types = new Map()));
  const entry = types.get(type);
  if (entry === undefined) types.set(type, { count, first, last });
  else {
    entry.count += count;
    if (first < entry.first) entry.first = first;
    if (last > entry.last) entry.last = last;
  }
}

/** Counts the paths of one object; returns how many path observations did not fit under `maxPaths`. */
function observePaths(paths: PathTypes, object: Record<string, unknown>, at: string, maxPaths: number): number {
  let dropped = 0;
  walkPaths(object, (path, type) => {
    if (path.length > CATALOG_MAX_PATH_LENGTH || (!paths.has(path) && paths.size >= maxPaths)) {
      dropped++;
      return;
    }
    addType(paths, path, type, 1, at, at);
  });
  return dropped;
}

export function newProductCounts(): ProductAggregate {
  return { names: new Map(), traits: new Map(), overflow: { event: 0, trait: 0 } };
}

/** Counts stored events into the product's counts, new names only while there is room. */
export function countEvents(
  product: ProductAggregate,
  events: EventRecord[],
  limits: { maxEvents: number; maxProperties: number },
): void {
  for (const event of events) {
    let agg = product.names.get(event.canonicalName);
    if (agg === undefined) {
      if (product.names.size >= limits.maxEvents) {
        product.overflow.event++;
        continue;
      }
      agg = {
        eventType: event.eventType,
        action: event.action,
        count: 0,
        first: event.receivedAt,
        last: event.receivedAt,
        sources: new Set(),
        keyIds: new Set(),
        paths: new Map(),
        propertiesOverflow: 0,
      };
      product.names.set(event.canonicalName, agg);
    }
    agg.count++;
    if (event.receivedAt < agg.first) agg.first = event.receivedAt;
    if (event.receivedAt > agg.last) agg.last = event.receivedAt;
    agg.sources.add(event.source);
    if (event.apiKeyId !== null) agg.keyIds.add(event.apiKeyId);
    agg.propertiesOverflow += observePaths(agg.paths, event.properties, event.receivedAt, limits.maxProperties);
  }
}

/** Counts the trait paths of one identify. */
export function countTraits(
  product: ProductAggregate,
  traits: Record<string, unknown>,
  at: string,
  maxPaths: number,
): void {
  product.overflow.trait += observePaths(product.traits, traits, at, maxPaths);
}

/** Adds the counts of `from` (a flush that could not be written) into `into`. */
export function mergeCounts(into: ProductAggregate, from: ProductAggregate): void {
  into.overflow.event += from.overflow.event;
  into.overflow.trait += from.overflow.trait;
  for (const [path, types] of from.traits)
    for (const [type, c] of types) addType(into.traits, path, type, c.count, c.first, c.last);
  for (const [name, agg] of from.names) {
    const target = into.names.get(name);
    if (target === undefined) {
      into.names.set(name, agg);
      continue;
    }
    target.count += agg.count;
    if (agg.first < target.first) target.first = agg.first;
    if (agg.last > target.last) target.last = agg.last;
    for (const s of agg.sources) target.sources.add(s);
    for (const k of agg.keyIds) target.keyIds.add(k);
    target.propertiesOverflow += agg.propertiesOverflow;
    for (const [path, types] of agg.paths)
      for (const [type, c] of types) addType(target.paths, path, type, c.count, c.first, c.last);
  }
}
