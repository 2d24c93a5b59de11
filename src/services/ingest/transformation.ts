// Stage: the product's transformation (transformations.md §1, §5). After suppression, before the tracking
// plan: each item's document goes through the steps; a kept item's draft is replaced by the transformed one,
// so what is checked, stored, streamed and catalogued is the transformed event. A dropped item is answered
// `dropped`; a failing step refuses the item with `transformation_error`. Whatever happens to an item, a
// refusal records its document as the steps left it (masks applied), never the item as received.
import { AppError } from '../../domain/errors.js';
import { uuidv7 } from '../../domain/ids.js';
import type { EventDraft } from '../../domain/events.js';
import {
  applyStepsToBatch,
  applyStepsToEach,
  type RunContext,
  type TransformResult,
} from '../../domain/transform-engine.js';
import { checkStoredSize, documentOf, draftOf } from '../../domain/transform-document.js';
import type { StepKind } from '../../domain/transform-types.js';
import type { PreparedTransformation, TransformationService } from '../transformations/service.js';
import { API_SOURCE, type AcceptItem, type AcceptRun, type Stage } from './types.js';

/** The refusal of an item whose step failed: the step index, kind and message (transformations.md §8). */
export function transformationRefusal(failure: { step: number; kind: StepKind; message: string }): AppError {
  return new AppError(
    'transformation_error',
    `Transformation step ${failure.step} (${failure.kind}) failed: ${failure.message}`,
    { extras: { step: failure.step, kind: failure.kind } },
  );
}

/** An item's message id: sampling by message id on an item without one uses its event id, assigned here. */
function messageIdOf(item: AcceptItem): string {
  if (item.draft.externalId === null) item.eventId = uuidv7();
  return item.draft.externalId ?? item.eventId!;
}

/** The items' runs: one by one without functions, as a batch (one sandbox call per function step) with them. */
function runItems(
  run: AcceptRun,
  prepared: PreparedTransformation,
  cpu: Map<StepKind, number>,
): TransformResult[] | Promise<TransformResult[]> {
  const source = run.options.source ?? API_SOURCE;
  // One meta for the request's items: functions see it frozen (the sandbox), and no step changes it.
  const meta = { product_id: run.auth.productId, key_id: run.auth.keyId, route: run.options.endpoint };
  // One context for the request's items (what differs per item is only its message id).
  const context: RunContext = {
    secret: prepared.secret,
    hashCache: prepared.hashCache,
    meta,
    enrichers: prepared.enrichers,
    functions: prepared.functions,
    cpu,
    // The draft is replaced by the result: its objects (parsed from this request's body) may be changed in place.
    owned: true,
  };
  const messageIds = run.items.map(messageIdOf);
  const documents = run.items.map((item) => documentOf(item.draft, source));
  if (prepared.functions.every((fn) => fn === undefined))
    return applyStepsToEach(documents, prepared.steps, context, messageIds);
  return applyStepsToBatch(documents, prepared.steps, context, messageIds);
}

/** The items' results taken into the run: kept items get their transformed draft, the others their outcome. */
function takeResults(
  run: AcceptRun,
  transformations: TransformationService,
  prepared: PreparedTransformation,
  results: TransformResult[],
  cpu: Map<StepKind, number>,
): void {
  const recordAs = (run.recordAs ??= new Map());
  const limit = run.options.maxEventBytes;
  const kept: AcceptItem[] = [];
  results.forEach((result, i) => {
    const item = run.items[i]!;
    recordAs.set(item.index, result.document);
    let draft: EventDraft | undefined;
    if (result.outcome === 'kept') {
      draft = draftOf(item.draft, result.document);
      if (limit !== undefined) checkStoredSize(result, draft, limit, prepared.steps);
    }
    for (const warning of result.warnings)
      (run.warnings ??= []).push({
        index: item.index,
        code: 'transformation_error',
        detail: transformationRefusal(warning).message,
      });
    if (result.outcome === 'dropped') run.outcomes[item.index] = { status: 'dropped', step: result.droppedBy! };
    else if (result.outcome === 'error')
      run.outcomes[item.index] = { status: 'rejected', error: transformationRefusal(result.error!) };
    else {
      item.draft = draft!;
      kept.push(item);
    }
  });
  run.items = kept;
  // Counted whether or not the write succeeds: the steps ran either way.
  transformations.metrics.count(run.auth.productId, results, cpu);
}

/** Runs the steps on the run's items: at once without function steps, after the sandbox answered with them. */
function transform(
  run: AcceptRun,
  transformations: TransformationService,
  prepared: PreparedTransformation | undefined,
): void | Promise<void> {
  if (prepared === undefined || prepared.steps.length === 0) return;
  const cpu = new Map<StepKind, number>();
  const pending = runItems(run, prepared, cpu);
  if (pending instanceof Promise)
    return pending.then((results) => takeResults(run, transformations, prepared, results, cpu));
  takeResults(run, transformations, prepared, pending, cpu);
}

export function transformationStage(transformations: TransformationService): Stage {
  return function transformation(run) {
    if (run.items.length === 0) return;
    // Cached per instance like tracking plans: answered at once, but for the first request of a product here.
    const prepared = transformations.preparedFor(run.auth.productId);
    if (prepared instanceof Promise) return prepared.then((loaded) => transform(run, transformations, loaded));
    return transform(run, transformations, prepared);
  };
}
