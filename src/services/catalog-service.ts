// The event catalogue (governance.md §1). Kept off the request path: the accept pipeline hands over the
// events it stored and this service only counts them in memory (names, dotted property paths up to
// depth 3, JSON types, first/last seen; never a value). A timer flushes the counts every few seconds
// in small upserts that add to the stored rows, so several instances sharing a PostgreSQL database
// add up. The bounds are decided at flush time against what is stored, so they hold across instances
// (up to what two instances flush at the same moment); in memory each product keeps at most the same
// number of names and paths per name between flushes, so a flood of new names cannot grow memory.
import type {
  CatalogEventDelta,
  CatalogPropertyDelta,
  CatalogScope,
  EventRecord,
  JsonType,
  Storage,
} from '../storage/types.js';

/** Paths are followed into nested objects down to this depth (`a.b.c`). */
export const CATALOG_MAX_DEPTH = 3;
/**
 * A longer path (a sender using values as keys, or a hostile one) is counted as overflow instead: it would be
 * useless to read, and PostgreSQL refuses B-tree index entries over ~2.7 kB, which would fail every flush.
 */
export const CATALOG_MAX_PATH_LENGTH = 256;

export interface CatalogOptions {
  enabled: boolean;
  maxEvents: number;
  maxProperties: number;
  flushMs: number;
}

interface TypeCount {
  count: number;
  first: string;
  last: string;
}

type PathTypes = Map<string, Map<JsonType, TypeCount>>;

interface NameAggregate {
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

interface ProductAggregate {
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

function addType(paths: PathTypes, path: string, type: JsonType, count: number, first: string, last: string): void {
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

export function createCatalogService(storage: Storage, options: CatalogOptions) {
  let pending = new Map<string, ProductAggregate>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;

  function productOf(productId: string): ProductAggregate {
    let product = pending.get(productId);
    if (product === undefined)
      pending.set(productId, (product = { names: new Map(), traits: new Map(), overflow: { event: 0, trait: 0 } }));
    return product;
  }

  function schedule(): void {
    timer ??= setTimeout(() => void flush().catch(() => {}), options.flushMs).unref();
  }

  /** Adds a flush that could not be written back into the pending counts, so nothing is lost. */
  function restore(products: Map<string, ProductAggregate>): void {
    for (const [productId, from] of products) {
      const into = productOf(productId);
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
    if (products.size > 0) schedule();
  }

  function propertyDeltas(
    scope: CatalogScope,
    canonicalName: string,
    paths: PathTypes,
    known: Set<string> | undefined,
    room: number,
  ): { rows: CatalogPropertyDelta[]; dropped: number } {
    const rows: CatalogPropertyDelta[] = [];
    let dropped = 0;
    let left = room;
    for (const [path, types] of paths) {
      const isNew = known === undefined || !known.has(path);
      if (isNew && left <= 0) {
        for (const c of types.values()) dropped += c.count;
        continue;
      }
      if (isNew) left--;
      for (const [jsonType, c] of types)
        rows.push({ scope, canonicalName, path, jsonType, count: c.count, firstSeen: c.first, lastSeen: c.last });
    }
    return { rows, dropped };
  }

  async function writeProduct(productId: string, product: ProductAggregate): Promise<void> {
    const names = [...product.names.keys()];
    const state = names.length === 0 ? undefined : await storage.governance.catalogState(productId, 'event', names);
    const events: CatalogEventDelta[] = [];
    const properties: CatalogPropertyDelta[] = [];
    const overflow = { ...product.overflow };
    let roomForNames = options.maxEvents - (state?.totalNames ?? 0);
    // New names get the room left in order of how often they were seen in this flush.
    const ordered = [...product.names.entries()].sort((a, b) => b[1].count - a[1].count);
    for (const [name, agg] of ordered) {
      if (!state!.knownNames.has(name)) {
        if (roomForNames <= 0) {
          overflow.event += agg.count;
          continue;
        }
        roomForNames--;
      }
      const known = state!.paths.get(name);
      const { rows, dropped } = propertyDeltas(
        'event',
        name,
        agg.paths,
        known,
        options.maxProperties - (known?.size ?? 0),
      );
      properties.push(...rows);
      events.push({
        canonicalName: name,
        eventType: agg.eventType,
        action: agg.action,
        count: agg.count,
        firstSeen: agg.first,
        lastSeen: agg.last,
        sources: [...agg.sources],
        keyIds: [...agg.keyIds],
        propertiesOverflow: agg.propertiesOverflow + dropped,
      });
    }
    if (product.traits.size > 0) {
      const traitState = await storage.governance.catalogState(productId, 'trait', ['']);
      const known = traitState.paths.get('');
      const { rows, dropped } = propertyDeltas(
        'trait',
        '',
        product.traits,
        known,
        options.maxProperties - (known?.size ?? 0),
      );
      properties.push(...rows);
      overflow.trait += dropped;
    }
    await storage.governance.writeCatalog({ productId, events, properties, overflow });
  }

  async function writePending(): Promise<void> {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const products = pending;
    pending = new Map();
    const failed = new Map<string, ProductAggregate>();
    let firstError: unknown;
    for (const [productId, product] of products) {
      try {
        await writeProduct(productId, product);
      } catch (error) {
        // Storage away (a failover): keep the counts for the next flush, so none are lost.
        failed.set(productId, product);
        firstError ??= error;
      }
    }
    restore(failed);
    if (firstError !== undefined) throw firstError;
  }

  function flush(): Promise<void> {
    const run = (flushing ?? Promise.resolve()).then(writePending, writePending);
    flushing = run.catch(() => {});
    return run;
  }

  return {
    enabled: options.enabled,

    /** Counts stored events (cheap, synchronous; written by the next flush). */
    observeEvents(productId: string, events: EventRecord[]): void {
      if (!options.enabled || events.length === 0) return;
      const product = productOf(productId);
      for (const event of events) {
        let agg = product.names.get(event.canonicalName);
        if (agg === undefined) {
          if (product.names.size >= options.maxEvents) {
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
        agg.propertiesOverflow += observePaths(agg.paths, event.properties, event.receivedAt, options.maxProperties);
      }
      schedule();
    },

    /** Counts the trait paths of one identify. */
    observeTraits(productId: string, traits: Record<string, unknown> | undefined, at: string): void {
      if (!options.enabled || traits === undefined) return;
      const product = productOf(productId);
      product.overflow.trait += observePaths(product.traits, traits, at, options.maxProperties);
      schedule();
    },

    flush,

    async listEvents(productId: string, query: Parameters<Storage['governance']['listCatalogEvents']>[1]) {
      await flush();
      const [events, overflow] = await Promise.all([
        storage.governance.listCatalogEvents(productId, query),
        storage.governance.catalogOverflow(productId),
      ]);
      return { events, overflow: overflow.event };
    },

    async getEvent(productId: string, canonicalName: string) {
      await flush();
      return storage.governance.getCatalogEvent(productId, canonicalName);
    },

    async traits(productId: string) {
      await flush();
      const [paths, overflow] = await Promise.all([
        storage.governance.listCatalogProperties(productId, 'trait', ''),
        storage.governance.catalogOverflow(productId),
      ]);
      return { paths, overflow: overflow.trait };
    },

    async close(): Promise<void> {
      await flush();
    },
  };
}

export type CatalogService = ReturnType<typeof createCatalogService>;
