// Stage: the product's tracking plan (governance.md §2). Every finding is recorded once the write succeeded;
// in enforce, an error refuses its item.
import type { AppError } from '../../domain/errors.js';
import type { EventDraft } from '../../domain/events.js';
import { checkEvent, checkTraits, type CompiledPlan } from '../../domain/tracking-plan.js';
import { planRefusal, type TrackingPlanService, type ViolationEntry } from '../tracking-plan-service.js';
import { refuseWhere, type AcceptRun, type AfterWrite, type Stage } from './types.js';

/**
 * Checks one draft against the plan: undefined when it may be stored without a word; otherwise the
 * violation to record and, in enforce, the refusal. Pointers: into the request body for the answer,
 * into the item as received for the record.
 */
function planCheck(plan: CompiledPlan, draft: EventDraft): { entry: ViolationEntry; refusal?: AppError } | undefined {
  const received = draft.received ?? { base: '', field: 'properties' as const };
  const finding =
    received.identify === true
      ? checkTraits(plan, draft.properties)
      : checkEvent(plan, draft.name.canonicalName, draft.properties);
  if (finding === undefined) return undefined;
  const field = finding.code === 'unplanned_event' ? '' : `/${received.field}`;
  // A pointer into the item: under its properties field, or where a moved property came from.
  const inItem = (pointer: string): string => {
    if (received.moved !== undefined && pointer !== '') {
      const cut = pointer.indexOf('/', 1);
      const from =
        received.moved[(cut < 0 ? pointer.slice(1) : pointer.slice(1, cut)).replace(/~1/g, '/').replace(/~0/g, '~')];
      if (from !== undefined) return `${from}${cut < 0 ? '' : pointer.slice(cut)}`;
    }
    return `${field}${pointer}`;
  };
  const errors = finding.errors.map((e) => ({ pointer: inItem(e.pointer), message: e.message }));
  const entry: ViolationEntry = {
    canonicalName: draft.name.canonicalName,
    code: finding.code,
    severity: finding.severity,
    planVersion: plan.version,
    messageId: draft.externalId,
    subjectId: draft.subjectId,
    errors,
  };
  if (finding.severity === 'warning') return { entry };
  const answered = errors.map((e) => ({ pointer: `${received.base}${e.pointer}`, message: e.message }));
  return { entry, refusal: planRefusal(finding.code, draft.name.canonicalName, answered, received.identify === true) };
}

export function trackingPlanStage(plans: TrackingPlanService): Stage {
  const check = (run: AcceptRun, plan: CompiledPlan | undefined): AfterWrite | undefined => {
    if (plan === undefined || plan.mode === 'off') return undefined;
    const violations: ViolationEntry[] = [];
    refuseWhere(run, (item) => {
      const found = planCheck(plan, item.draft);
      if (found === undefined) return undefined;
      violations.push(found.entry);
      return found.refusal;
    });
    if (violations.length === 0) return undefined;
    const { auth, options } = run;
    return () => plans.record(auth, options.record?.route ?? options.endpoint, violations, options.receivedAt, plan);
  };
  return function trackingPlan(run) {
    // Cached per instance: answered at once, but for the first request of a product on this instance.
    const plan = plans.planFor(run.auth.productId);
    return plan instanceof Promise ? plan.then((loaded) => check(run, loaded)) : check(run, plan);
  };
}
