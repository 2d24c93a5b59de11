// The event catalogue (governance.md §1). Kept off the request path: the accept pipeline hands over the
// events it stored and this service only counts them in memory (catalog/counts.ts: names, dotted property
// paths up to depth 3, JSON types, first/last seen; never a value). A timer flushes the counts every few
// seconds (catalog/flush.ts) in small upserts that add to the stored rows, with the bounds decided against
// what is stored; a flush that fails is added back, so nothing is lost.
import type { EventRecord, Storage } from '../storage/types.js';
import { countEvents, countTraits, mergeCounts, newProductCounts, type ProductAggregate } from './catalog/counts.js';
import { writeProduct } from './catalog/flush.js';

export { CATALOG_MAX_DEPTH, CATALOG_MAX_PATH_LENGTH, jsonType, walkPaths } from './catalog/counts.js';

export interface CatalogOptions {
  enabled: boolean;
  maxEvents: number;
  maxProperties: number;
  flushMs: number;
}

export function createCatalogService(storage: Storage, options: CatalogOptions) {
  let pending = new Map<string, ProductAggregate>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;

  function productOf(productId: string): ProductAggregate {
    let product = pending.get(productId);
    if (product === undefined) pending.set(productId, (product = newProductCounts()));
    return product;
  }

  function schedule(): void {
    timer ??= setTimeout(() => void flush().catch(() => {}), options.flushMs).unref();
  }

  async function writePending(): Promise<void> {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const products = pending;
    pending = new Map();
    let failed = 0;
    let firstError: unknown;
    for (const [productId, product] of products) {
      try {
        await writeProduct(storage.governance, options, productId, product);
      } catch (error) {
        // Storage away (a failover): keep the counts for the next flush, so none are lost.
        mergeCounts(productOf(productId), product);
        failed++;
        firstError ??= error;
      }
    }
    if (failed > 0) schedule();
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
      countEvents(productOf(productId), events, options);
      schedule();
    },

    /** Counts the trait paths of one identify. */
    observeTraits(productId: string, traits: Record<string, unknown> | undefined, at: string): void {
      if (!options.enabled || traits === undefined) return;
      countTraits(productOf(productId), traits, at, options.maxProperties);
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
