// The one accept pipeline every entry point calls (v1, v2, batch, Segment). Its stages, one file each:
//
//   admission → suppression → legacy policy → transformation → entry point's rules → tracking plan → write
//   → catalogue → outcomes (metrics, rejections)
//
// `src/services/README.md` says how a stage is added. Also counts legacy-format use.
import type { LegacyFlatMode } from '../../domain/legacy-policy.js';
import type { Storage } from '../../storage/types.js';
import type { CatalogService } from '../catalog-service.js';
import type { AuthContext } from '../key-service.js';
import type { Metrics } from '../metrics.js';
import type { RejectionService } from '../rejection-service.js';
import type { TrackingPlanService } from '../tracking-plan-service.js';
import { catalogueStage } from './catalogue.js';
import { entryRulesStage } from './entry-rules.js';
import { legacyStage, LegacyUsageCounter } from './legacy.js';
import { runPipeline } from './pipeline.js';
import { suppressionStage, type SuppressionCheck } from './suppression.js';
import { trackingPlanStage } from './tracking-plan.js';
import { transformationStage } from './transformation.js';
import type { TransformationService } from '../transformations/service.js';
import type { AcceptOptions, AcceptResult, Candidate, Stage } from './types.js';
import { createEventWriter, writeStage } from './write.js';

export interface IngestOptions {
  legacyFlat: LegacyFlatMode;
  rejections?: RejectionService;
  suppressions?: SuppressionCheck;
  governance?: { catalog: CatalogService; plans: TrackingPlanService };
  transformations?: TransformationService;
}

export function createIngestService(
  storage: Storage,
  metrics: Metrics,
  options: IngestOptions = { legacyFlat: 'accept' },
) {
  const writer = createEventWriter(storage, metrics);
  const legacyUsage = new LegacyUsageCounter(storage.legacyUsage);
  const { suppressions, governance, transformations } = options;
  // The pipeline, in order (transformations.md §1). A stage is one line here; absent options leave theirs out.
  const stages: Stage[] = [
    ...(suppressions === undefined ? [] : [suppressionStage(suppressions)]),
    legacyStage(legacyUsage, options.legacyFlat),
    // After suppression (on the ids as received), before the tracking plan (transformations.md §1).
    ...(transformations === undefined ? [] : [transformationStage(transformations)]),
    // The Segment routes' browser-key rule, on the items as the steps left them (AcceptOptions.admit).
    entryRulesStage(),
    ...(governance === undefined ? [] : [trackingPlanStage(governance.plans)]),
    writeStage(writer),
    ...(governance === undefined ? [] : [catalogueStage(governance.catalog)]),
  ];
  const pipeline = { stages, metrics, rejections: options.rejections };

  return {
    /**
     * The pipeline every entry point calls: runs the stages, stores the drafts that pass in one group commit,
     * and counts each item once in `inlet_events_total`. A single-event route is a batch of one. Throws only
     * when storage fails (nothing of the request was stored then).
     */
    accept(auth: AuthContext, candidates: Candidate[], accept: AcceptOptions): Promise<AcceptResult> {
      return runPipeline(pipeline, auth, candidates, accept);
    },

    async legacyUsage(productId: string) {
      await legacyUsage.flush();
      return storage.legacyUsage.list(productId);
    },

    /** Waits for every accepted event to be committed, then writes pending bookkeeping. */
    async close(): Promise<void> {
      await writer.drain();
      await legacyUsage.flush();
    },
  };
}

export type IngestService = ReturnType<typeof createIngestService>;
export type { AcceptOptions, AcceptResult, Candidate, ItemOutcome } from './types.js';
export type { SuppressionCheck } from './suppression.js';
