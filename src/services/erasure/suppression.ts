// Suppression (governance.md §3): ids whose person was erased are refused on ingest, checked against an
// in-memory set per product (HMACs of the suppressed ids), so a product without suppressions pays one Map
// lookup and a product with some pays one HMAC per id an item names. Correctness across instances
// (PostgreSQL) and processes (the CLI on SQLite): an instance uses its copy only while it is younger than
// INLET_SUPPRESSION_REFRESH_MS (R), counted from the moment the query that loaded it *started*; an older copy
// is checked against the database first (one cheap query for the whole instance, shared by the requests
// waiting on it). The erasure request answers only R after its suppressions committed (requests.ts).
import { performance } from 'node:perf_hooks';
import { Counter } from 'prom-client';
import { AppError } from '../../domain/errors.js';
import type { ErasureStore } from '../../storage/types.js';
import type { AuthContext } from '../key-service.js';
import type { Metrics } from '../metrics.js';
import type { RejectionService } from '../rejection-service.js';
import { hmacWith, type ErasureKey } from './key.js';

/** The detail of a refusal: never the id (the rejection is recorded with this text and without the item). */
export const SUPPRESSED_DETAIL =
  "The item names a person whose data was erased at the product's request; items for them are refused until the suppression is lifted.";

export function suppressedError(): AppError {
  return new AppError('subject_suppressed', SUPPRESSED_DETAIL);
}

export interface SuppressionOptions {
  store: ErasureStore;
  key: ErasureKey;
  metrics: Metrics;
  rejections: RejectionService | undefined;
  refreshMs: number;
}

export function createSuppressions({ store, key, metrics, rejections, refreshMs }: SuppressionOptions) {
  const suppressedItems = new Counter({
    name: 'inlet_suppressed_items_total',
    help: 'Items refused because they name an erased (suppressed) id',
    registers: [metrics.registry],
  });

  // The in-memory copy of the suppressions (see the header).
  let byProduct = new Map<string, Set<string>>();
  let marker: string | undefined;
  let loadedAt = -Infinity;
  let loading: Promise<void> | undefined;

  async function reload(): Promise<void> {
    const started = performance.now();
    await key.load();
    const current = await store.suppressionsMarker();
    if (current !== marker) {
      const next = new Map<string, Set<string>>();
      for (const row of await store.allSuppressions()) {
        let set = next.get(row.productId);
        if (set === undefined) next.set(row.productId, (set = new Set()));
        set.add(row.idHmac);
      }
      byProduct = next;
      marker = current;
    }
    loadedAt = started;
  }

  function fresh(): Promise<void> | undefined {
    if (performance.now() - loadedAt < refreshMs) return undefined;
    loading ??= reload().finally(() => {
      loading = undefined;
    });
    return loading;
  }

  /**
   * The check for one request: undefined when the product has no suppressions (the usual case: a Map
   * lookup), else a function telling whether any of an item's ids is suppressed (one HMAC per id).
   * The copy is refreshed first when too old.
   */
  async function suppressionCheck(productId: string): Promise<((ids: Iterable<string>) => boolean) | undefined> {
    const refreshing = fresh();
    if (refreshing !== undefined) await refreshing;
    const set = byProduct.get(productId);
    if (set === undefined || set.size === 0) return undefined;
    const secret = key.loaded!;
    return (ids) => {
      for (const id of ids) if (set.has(hmacWith(secret, productId, id))) return true;
      return false;
    };
  }

  async function anySuppressed(productId: string, ids: Iterable<string>): Promise<boolean> {
    return (await suppressionCheck(productId))?.(ids) ?? false;
  }

  return {
    /** True when an item naming these ids must be refused (`subject_suppressed`). */
    anySuppressed,
    suppressionCheck,

    /**
     * The identity routes: refuses (409 subject_suppressed) when an id is suppressed, recording the
     * rejection without the request body.
     */
    async refuseSuppressed(auth: AuthContext, ids: string[], route: string): Promise<void> {
      if (!(await anySuppressed(auth.productId, ids))) return;
      suppressedItems.inc();
      rejections?.record(
        auth,
        route,
        [
          {
            index: 0,
            messageId: null,
            code: 'subject_suppressed',
            detail: SUPPRESSED_DETAIL,
            severity: 'rejected',
            item: null,
          },
        ],
        new Date().toISOString(),
      );
      throw suppressedError();
    },

    /** Counts refused items (the accept pipeline refuses them). */
    countSuppressed(n: number): void {
      suppressedItems.inc(n);
    },

    /** This instance refuses these HMACs at once (just suppressed here). */
    add(productId: string, idHmacs: Iterable<string>): void {
      let set = byProduct.get(productId);
      if (set === undefined) byProduct.set(productId, (set = new Set()));
      for (const idHmac of idHmacs) set.add(idHmac);
    },

    /** A suppression of the product was lifted: its copy is dropped, and reloaded before the next check. */
    lifted(productId: string): void {
      byProduct.get(productId)?.clear();
      loadedAt = -Infinity;
      marker = undefined;
    },
  };
}

export type Suppressions = ReturnType<typeof createSuppressions>;
