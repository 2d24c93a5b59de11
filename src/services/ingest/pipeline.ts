// Runs one call of `accept` through the stages, in order: the candidates an entry point could not translate
// are refused first (admission), then each stage sees the items still standing; the bookkeeping the stages
// left runs once the write succeeded, and every item is counted and, if asked, its refusal recorded.
import type { NameFormat } from '../../domain/event-names.js';
import type { AuthContext } from '../key-service.js';
import type { Metrics } from '../metrics.js';
import type { RejectionService } from '../rejection-service.js';
import { countOutcomes, recordRejections } from './outcomes.js';
import type {
  AcceptItem,
  AcceptOptions,
  AcceptResult,
  AcceptRun,
  AfterWrite,
  Candidate,
  ItemOutcome,
  Stage,
} from './types.js';

/** Admission: a candidate its entry point could not translate is answered with its error; the others go on. */
function admit(auth: AuthContext, candidates: Candidate[], options: AcceptOptions): AcceptRun {
  const outcomes: Array<ItemOutcome | undefined> = new Array(candidates.length);
  const formats: Array<NameFormat | 'unknown'> = new Array(candidates.length);
  const items: AcceptItem[] = [];
  for (let index = 0; index < candidates.length; index++) {
    const candidate = candidates[index]!;
    if (candidate.ok) {
      formats[index] = candidate.draft.name.nameFormat;
      items.push({ index, draft: candidate.draft });
    } else {
      outcomes[index] = { status: 'rejected', error: candidate.error };
      formats[index] = candidate.format ?? 'unknown';
    }
  }
  return { auth, options, outcomes, formats, items, legacySeen: false };
}

export interface PipelineDependencies {
  /** In order; the write is one of them (stages after it see the stored outcomes). */
  stages: readonly Stage[];
  metrics: Metrics;
  rejections: RejectionService | undefined;
}

export async function runPipeline(
  { stages, metrics, rejections }: PipelineDependencies,
  auth: AuthContext,
  candidates: Candidate[],
  options: AcceptOptions,
): Promise<AcceptResult> {
  const run = admit(auth, candidates, options);
  const afterWrite: AfterWrite[] = [];
  for (const stage of stages) {
    const returned = stage(run);
    const after = returned instanceof Promise ? await returned : returned;
    if (after !== undefined) afterWrite.push(after);
  }
  for (const after of afterWrite) after();
  // Every stage has answered: each item has its outcome.
  const outcomes = run.outcomes as ItemOutcome[];
  countOutcomes(metrics, options.endpoint, run.formats, outcomes);
  if (options.record !== undefined && rejections !== undefined)
    recordRejections(rejections, auth, options.record, outcomes, options.receivedAt, run);
  return { outcomes, legacySeen: run.legacySeen };
}
