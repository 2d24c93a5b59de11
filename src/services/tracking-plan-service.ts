// Tracking plans (governance.md §2): versions stored per product, each compiled once (Ajv) and cached per
// instance (tracking-plans/plan-cache.ts); violations recorded like rejections (tracking-plans/violations.ts);
// a draft drawn from the catalogue (tracking-plans/draft.ts).
import { validationError } from '../domain/errors.js';
import { compilePlan, type CompiledPlan, type TrackingPlan } from '../domain/tracking-plan.js';
import type { Storage, TrackingPlanVersion, ViolationQuery, ViolationRecord } from '../storage/types.js';
import type { CatalogService } from './catalog-service.js';
import type { Metrics } from './metrics.js';
import { draftFromCatalogue } from './tracking-plans/draft.js';
import { createPlanCache } from './tracking-plans/plan-cache.js';
import { createViolationRecorder } from './tracking-plans/violations.js';

export { planRefusal, type ViolationEntry } from './tracking-plans/violations.js';

export interface TrackingPlanOptions {
  /** How old a cached plan may get before this instance asks storage for a newer version. */
  refreshMs: number;
  maxViolationsPerHour: number;
  retentionDays: number;
  now?: () => number;
}

export function createTrackingPlanService(
  storage: Storage,
  metrics: Metrics,
  catalog: CatalogService,
  options: TrackingPlanOptions,
) {
  const clock = options.now ?? Date.now;
  const governance = storage.governance;
  const plans = createPlanCache(governance, options.refreshMs, clock);
  const violations = createViolationRecorder(governance, metrics, options, clock);
  const flush = violations.flush;

  return {
    /** The product's compiled plan (undefined: none): at once when this instance holds it (version-cache.ts). */
    planFor: (productId: string): CompiledPlan | undefined | Promise<CompiledPlan | undefined> => plans.get(productId),

    async get(productId: string): Promise<TrackingPlanVersion | undefined> {
      return governance.currentPlan(productId);
    },

    /** Stores a new version after compiling it; an invalid plan is a 400 with pointers into the plan. */
    async put(productId: string, document: unknown): Promise<TrackingPlanVersion> {
      const compiled = compilePlan(document, 0);
      if (!compiled.ok) throw validationError(compiled.errors);
      const stored = await governance.putPlan(
        productId,
        document as Record<string, unknown>,
        new Date(clock()).toISOString(),
      );
      compiled.plan.version = stored.version;
      plans.set(productId, compiled.plan);
      return stored;
    },

    versions(productId: string): Promise<TrackingPlanVersion[]> {
      return governance.listPlanVersions(productId);
    },

    /** A plan (mode off) drawn from the catalogue: the observed types, `required` for properties present in every event. */
    draft: (productId: string): Promise<TrackingPlan> => draftFromCatalogue(governance, catalog, productId),

    record: violations.record,

    async listViolations(productId: string, query: ViolationQuery): Promise<ViolationRecord[]> {
      await flush();
      return governance.listViolations(productId, query);
    },

    flush,

    async close(): Promise<void> {
      await flush();
    },
  };
}

export type TrackingPlanService = ReturnType<typeof createTrackingPlanService>;
