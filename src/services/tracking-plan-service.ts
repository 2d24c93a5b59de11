// Tracking plans (governance.md §2): versions stored per product, each compiled once (Ajv) and cached
// per instance. The accept pipeline asks `planFor` on every request: a cached plan younger than
// `refreshMs` costs a Map lookup; an older one is used as it is while one query in the background asks
// whether a newer version was stored (by another instance), so a new version is applied everywhere
// within `refreshMs` plus one query. A PUT on this instance applies at once here.
// Violations are recorded like rejections: buffered, flushed within a second, capped per product and hour.
import { Counter } from 'prom-client';
import { AppError, validationError } from '../domain/errors.js';
import { uuidv7 } from '../domain/ids.js';
import { storableText } from '../domain/json-values.js';
import { SEGMENT_SOURCE } from '../domain/segment.js';
import { compilePlan, draftPlan, type CompiledPlan, type TrackingPlan } from '../domain/tracking-plan.js';
import type { Storage, TrackingPlanVersion, ViolationQuery, ViolationRecord } from '../storage/types.js';
import { createCappedRecorder } from './capped-recorder.js';
import type { CatalogService } from './catalog-service.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';

/** Names of the metric label past which planned names are not spelled out (unplanned names come from senders). */
const UNPLANNED_LABEL = '(unplanned)';

export interface TrackingPlanOptions {
  /** How old a cached plan may get before this instance asks storage for a newer version. */
  refreshMs: number;
  maxViolationsPerHour: number;
  retentionDays: number;
  now?: () => number;
}

interface CacheEntry {
  plan: CompiledPlan | undefined;
  checkedAt: number;
  refreshing?: Promise<void>;
}

export type ViolationEntry = Omit<ViolationRecord, 'id' | 'productId' | 'receivedAt' | 'keyId' | 'route'>;

export function createTrackingPlanService(
  storage: Storage,
  metrics: Metrics,
  catalog: CatalogService,
  options: TrackingPlanOptions,
) {
  const clock = options.now ?? Date.now;
  const cache = new Map<string, CacheEntry>();
  const violationsCounter = new Counter({
    name: 'inlet_tracking_plan_violations_total',
    help: 'Items that broke the tracking plan, by canonical name (planned names only), code and severity, and whether they were recorded',
    labelNames: ['canonical_name', 'code', 'severity', 'recorded'],
    registers: [metrics.registry],
  });

  async function load(productId: string, entry: CacheEntry): Promise<void> {
    const version = await storage.governance.currentPlanVersion(productId);
    if (version !== (entry.plan?.version ?? 0)) {
      const stored = await storage.governance.currentPlan(productId);
      if (stored === undefined) entry.plan = undefined;
      else {
        const compiled = compilePlan(stored.plan, stored.version);
        // A stored plan always compiled when it was PUT; a library upgrade could change that: keep the old one then.
        if (compiled.ok) entry.plan = compiled.plan;
      }
    }
    entry.checkedAt = clock();
  }

  function refresh(productId: string, entry: CacheEntry): Promise<void> {
    entry.refreshing ??= load(productId, entry).finally(() => {
      entry.refreshing = undefined;
    });
    return entry.refreshing;
  }

  // Violation recording, bounded like rejections (clarifications §20), kept through a failed flush.
  const recorder = createCappedRecorder<ViolationRecord>({
    maxPerHour: options.maxViolationsPerHour,
    retentionDays: options.retentionDays,
    now: clock,
    insert: (rows) => storage.governance.insertViolations(rows),
    addUnrecorded: (counts) => storage.governance.addUnrecordedViolations(counts),
    deleteOlderThan: (at) => storage.governance.deleteViolationsOlderThan(at),
  });
  const flush = recorder.flush;

  return {
    /**
     * The compiled plan of a product (undefined: none). Awaits storage only the first time a product is
     * seen by this instance; afterwards a stale entry is served while a refresh runs in the background.
     */
    async planFor(productId: string): Promise<CompiledPlan | undefined> {
      let entry = cache.get(productId);
      if (entry === undefined) {
        entry = { plan: undefined, checkedAt: 0 };
        cache.set(productId, entry);
        await refresh(productId, entry);
        return entry.plan;
      }
      if (entry.checkedAt === 0) await refresh(productId, entry);
      else if (clock() - entry.checkedAt >= options.refreshMs) void refresh(productId, entry).catch(() => {});
      return entry.plan;
    },

    async get(productId: string): Promise<TrackingPlanVersion | undefined> {
      return storage.governance.currentPlan(productId);
    },

    /** Stores a new version after compiling it; an invalid plan is a 400 with pointers into the plan. */
    async put(productId: string, document: unknown): Promise<TrackingPlanVersion> {
      const compiled = compilePlan(document, 0);
      if (!compiled.ok) throw validationError(compiled.errors);
      const stored = await storage.governance.putPlan(
        productId,
        document as Record<string, unknown>,
        new Date(clock()).toISOString(),
      );
      compiled.plan.version = stored.version;
      const entry = cache.get(productId);
      // This instance applies it at once; a refresh already running may still set the older one, then the next corrects it.
      if (entry === undefined) cache.set(productId, { plan: compiled.plan, checkedAt: clock() });
      else {
        entry.plan = compiled.plan;
        entry.checkedAt = clock();
      }
      return stored;
    },

    versions(productId: string): Promise<TrackingPlanVersion[]> {
      return storage.governance.listPlanVersions(productId);
    },

    /** A plan (mode off) drawn from the catalogue: the observed types, `required` for properties present in every event. */
    async draft(productId: string): Promise<TrackingPlan> {
      await catalog.flush();
      const names: Array<{
        canonicalName: string;
        count: number;
        properties: Array<{ path: string; types: Record<string, number> }>;
      }> = [];
      for (let offset = 0; ; offset += 500) {
        const page = await storage.governance.listCatalogEvents(productId, { sort: 'name', offset, limit: 500 });
        for (const event of page) {
          // Segment identify items are stored as `user_identified` events but checked against `traits`: their
          // trait paths are in the traits catalogue, an event schema for them would check nothing.
          if (event.canonicalName === 'user_identified' && event.sources.every((source) => source === SEGMENT_SOURCE))
            continue;
          const properties = await storage.governance.listCatalogProperties(productId, 'event', event.canonicalName);
          names.push({
            canonicalName: event.canonicalName,
            count: event.count,
            properties: properties.map((p) => ({ path: p.path, types: p.types as Record<string, number> })),
          });
        }
        if (page.length < 500) break;
      }
      const traits = await storage.governance.listCatalogProperties(productId, 'trait', '');
      return draftPlan(
        names,
        traits.map((p) => ({ path: p.path, types: p.types as Record<string, number> })),
      );
    },

    /** Records (or, past the hourly cap, only counts) violations of one request. */
    record(auth: AuthContext, route: string, entries: ViolationEntry[], receivedAt: string, plan: CompiledPlan): void {
      for (const entry of entries) {
        const recorded = recorder.admit(auth.productId, receivedAt);
        const label = plan.events.has(entry.canonicalName) ? entry.canonicalName : UNPLANNED_LABEL;
        violationsCounter.inc({
          canonical_name: label,
          code: entry.code,
          severity: entry.severity,
          recorded: String(recorded),
        });
        if (!recorded) continue;
        recorder.push({
          ...entry,
          id: uuidv7(),
          productId: auth.productId,
          receivedAt,
          keyId: auth.keyId,
          route: storableText(route),
          canonicalName: storableText(entry.canonicalName),
          messageId: entry.messageId === null ? null : storableText(entry.messageId),
          subjectId: entry.subjectId === null ? null : storableText(entry.subjectId),
          errors: entry.errors.map((e) => ({ pointer: storableText(e.pointer), message: storableText(e.message) })),
        });
      }
    },

    async listViolations(productId: string, query: ViolationQuery): Promise<ViolationRecord[]> {
      await flush();
      return storage.governance.listViolations(productId, query);
    },

    flush,

    async close(): Promise<void> {
      await flush();
    },
  };
}

export type TrackingPlanService = ReturnType<typeof createTrackingPlanService>;

/** The 400 of a refused item: `tracking_plan_violation` or `unplanned_event`, with pointers into the request body. */
export function planRefusal(
  code: 'tracking_plan_violation' | 'unplanned_event',
  canonicalName: string,
  errors: Array<{ pointer: string; message: string }>,
  traits = false,
): AppError {
  const what = traits ? 'The traits do' : `The event "${canonicalName}" does`;
  const detail =
    code === 'unplanned_event'
      ? `The event "${canonicalName}" is not in the tracking plan, which refuses unplanned events.`
      : `${what} not match the tracking plan: ${errors[0]?.pointer ?? ''} ${errors[0]?.message ?? ''}${errors.length > 1 ? ` (and ${errors.length - 1} more)` : ''}.`;
  return new AppError(code, detail, { errors });
}
