// The identity pipeline: every identify and alias, from the native routes or as the side effect of a Segment
// item, goes through `apply`, whose stages run in the order of the accept pipeline (transformations.md §1):
//
//   browser key: identifiers → suppression → transformation → browser key: merges → tracking plan → change → catalogue
//
// The identifier half of the browser-key rule looks only at what is asked, so it answers before anything of the
// person is read; suppression looks at the ids as received, before any step can change them; the merge half reads
// the identity state, so it waits until suppression has spoken. A stage refuses by throwing, may change the
// operation (the transformation), or end the call without a change (a step that drops the identify).
import { AppError } from '../domain/errors.js';
import type { IdentityOperation } from '../domain/identity.js';
import { checkTraits } from '../domain/tracking-plan.js';
import type { StepFailure } from '../domain/transform-engine.js';
import { identifiersAfter } from '../domain/transform-stored.js';
import type { UserRecord } from '../storage/types.js';
import type { CatalogService } from './catalog-service.js';
import type { IdentityChanges } from './identity-changes.js';
import { transformationRefusal } from './ingest/transformation.js';
import type { AuthContext } from './key-service.js';
import type { RejectionEntry, RejectionService } from './rejection-service.js';
import { planRefusal, type TrackingPlanService } from './tracking-plan-service.js';
import type { TransformationService } from './transformations/service.js';

/** Where an operation comes from: what is recorded with a refusal, and which stages ran already. */
export interface IdentityEntry {
  /** The route, as recorded with refusals and violations. */
  route: string;
  receivedAt: string;
  /** The request as received, recorded with a refusal of the tracking plan. */
  item?: unknown;
  /**
   * Set for the side effects of a Segment item, which is an event too: the accept pipeline runs suppression,
   * the plan and the catalogue on it, so they are not run again here. `before`: checked before the item is
   * stored (a refusal rejects the item); `stored`: applied after (a refusal is a warning, the event stays).
   */
  segmentItem?: 'before' | 'stored';
}

export interface IdentityResult {
  /** An identify that created its user (201); an alias answers 200 either way. */
  created: boolean;
  user: UserRecord;
}

/** An identify a step of the product's transformation dropped (transformations.md §5): nothing changed. */
export interface IdentityDropped {
  dropped: true;
  step: number;
}

type AliasOperation = Extract<IdentityOperation, { kind: 'alias' }>;

/** Erasure's suppression check of the ids (governance.md §3): 409 subject_suppressed, recorded without the item. */
export interface SuppressionRefusal {
  refuseSuppressed(auth: AuthContext, ids: string[], route: string): Promise<void>;
}

export interface IdentityPipelineDependencies {
  changes: IdentityChanges;
  suppressions: SuppressionRefusal;
  plans: Pick<TrackingPlanService, 'planFor' | 'record'>;
  catalog: Pick<CatalogService, 'observeTraits'>;
  rejections: Pick<RejectionService, 'record'>;
  /** The product's transformation; absent, identify traits are taken as sent. */
  transformations?: Pick<TransformationService, 'applyToIdentify'>;
}

/** One identify or alias on its way through the stages. */
interface IdentityCall {
  readonly auth: AuthContext;
  readonly entry: IdentityEntry;
  /** A stage that changes the operation (the transformation, the browser-key rule) replaces it. */
  op: IdentityOperation;
  /**
   * What a refusal records: the request as received, or once the transformation ran, the request as its steps
   * left it, so that a later refusal (the tracking plan) never records a value a step masked.
   */
  item: unknown;
  /** Set when a step of the product's transformation dropped the identify: the stages after it do not run. */
  droppedBy?: number;
}

interface Stage {
  name: string;
  /** The accept pipeline runs this stage on a Segment item (its ids, its traits as the event's properties). */
  inAccept?: boolean;
  run(call: IdentityCall): void | Promise<void>;
}

/**
 * Clarifications §19, the browser-key rule's first half: a browser key never creates or moves identifiers.
 * Identifiers a native request asks for are refused (403 naming the field); those a Segment identify's traits
 * imply (`traits.email`) are not derived, so the e-mail stays a trait.
 */
function browserKeyIdentifiers(call: IdentityCall): void {
  const { auth, op } = call;
  if (auth.kind !== 'browser' || op.kind !== 'identify') return;
  if (op.identifiers !== undefined && Object.keys(op.identifiers).length > 0) {
    throw new AppError(
      'forbidden',
      'A browser key cannot set identifiers ("identifiers"): send them from your server with an events key; traits are fine.',
      { errors: [{ pointer: '/identifiers', message: 'not allowed with a browser key' }] },
    );
  }
  if (op.impliedIdentifiers === undefined) return;
  const { impliedIdentifiers: _notDerived, ...withoutImplied } = op;
  call.op = withoutImplied;
}

/**
 * Clarifications §18, the browser-key rule's second half: through a browser key, two users that were each
 * identified are never merged. A merge asked before anything is stored is refused (`identified_merge_forbidden`);
 * the link of a Segment item already stored is left undone with the warning `identity_conflict`.
 */
function browserKeyMerges(changes: Pick<IdentityChanges, 'mergesTwoIdentified'>): Stage['run'] {
  return async ({ auth, op, entry }) => {
    if (auth.kind !== 'browser' || op.kind !== 'alias') return;
    if (!(await changes.mergesTwoIdentified(auth.productId, op.from, op.to))) return;
    throw entry.segmentItem === 'stored'
      ? new AppError(
          'identity_conflict',
          `"${op.from}" and "${op.to}" are two identified users; a browser key does not merge them.`,
        )
      : new AppError(
          'identified_merge_forbidden',
          `"${op.from}" and "${op.to}" are two identified users: a browser key may not merge them (do it from your server with an events key).`,
        );
  };
}

/**
 * Erasure (governance.md §3): a suppressed id is refused before anything of it is kept, on the ids as received,
 * so that no step of the product's transformation (a mask or a drop of the subject) can let an erased person in.
 */
function suppression(suppressions: SuppressionRefusal): Stage['run'] {
  return async ({ auth, op, entry }) => {
    await suppressions.refuseSuppressed(auth, op.kind === 'identify' ? [op.externalId] : [op.from, op.to], entry.route);
  };
}

/**
 * A native identify request as the steps left it: its external id, traits and identifiers replaced by theirs (its
 * identifiers are not part of the document steps see: those holding a trait's value follow it, identifiersAfter).
 */
function requestAfter(item: unknown, op: Extract<IdentityOperation, { kind: 'identify' }>): unknown {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return item;
  const { traits: _asReceived, identifiers: _sent, ...rest } = item as Record<string, unknown>;
  return {
    ...rest,
    external_id: op.externalId,
    ...(op.identifiers === undefined ? {} : { identifiers: op.identifiers }),
    ...(op.traits === undefined ? {} : { traits: op.traits }),
  };
}

/**
 * The product's transformation on an identify's traits and subject (transformations.md §1, §5): after suppression,
 * before the merge rule and the plan, so that the plan, the store and the catalogue all see the transformed traits.
 * Like every entry point's, a failing step refuses the identify with `transformation_error` and a skipped one is a
 * warning, both recorded in the rejections list as the steps left the request (masks applied), never as received.
 * Marked inAccept: accept transforms a Segment item, whose identify then takes its traits from the stored event.
 */
function transformation(
  transformations: NonNullable<IdentityPipelineDependencies['transformations']>,
  rejections: IdentityPipelineDependencies['rejections'],
): Stage['run'] {
  return async (call) => {
    const { auth, op, entry } = call;
    if (op.kind !== 'identify') return;
    const result = await transformations.applyToIdentify(auth.productId, auth.keyId, {
      externalId: op.externalId,
      traits: op.traits ?? {},
      receivedAt: entry.receivedAt,
      route: entry.route,
    });
    if (result === undefined) return;
    const traits = result.document.traits ?? {};
    // An identifier that holds a trait's value follows what the steps did to it (a masked e-mail address is not
    // kept as the `email` identifier), as a destination's identity messages do.
    const identifiers =
      op.identifiers === undefined ? undefined : identifiersAfter(op.identifiers, op.traits ?? {}, traits);
    const transformed = {
      ...op,
      identifiers,
      externalId: result.document.subject_id,
      // An identify sent without traits stays one (its user's traits untouched) unless a step gave it some.
      traits: op.traits === undefined && Object.keys(traits).length === 0 ? undefined : traits,
    };
    call.op = transformed;
    call.item = requestAfter(entry.item, transformed);
    const recorded = (failure: StepFailure, severity: RejectionEntry['severity']): RejectionEntry => ({
      index: 0,
      messageId: null,
      code: 'transformation_error',
      detail: transformationRefusal(failure).message,
      severity,
      item: call.item,
    });
    const entries = result.warnings.map((warning) => recorded(warning, 'warning'));
    if (result.outcome === 'error') entries.push(recorded(result.error!, 'rejected'));
    if (entries.length > 0) rejections.record(auth, entry.route, entries, entry.receivedAt);
    if (result.outcome === 'error') throw transformationRefusal(result.error!);
    if (result.outcome === 'dropped') call.droppedBy = result.droppedBy!;
  };
}

/**
 * The tracking plan's `traits` schema (governance.md §2): a violation is recorded in warn; in enforce the
 * request is refused with 400 tracking_plan_violation (pointers `/traits/...`) and recorded as a rejection.
 */
function trackingPlan(
  plans: IdentityPipelineDependencies['plans'],
  rejections: IdentityPipelineDependencies['rejections'],
): Stage['run'] {
  return async ({ auth, op, entry, item }) => {
    if (op.kind !== 'identify' || op.traits === undefined) return;
    const plan = await plans.planFor(auth.productId);
    if (plan === undefined || plan.mode === 'off') return;
    const finding = checkTraits(plan, op.traits);
    if (finding === undefined) return;
    const errors = finding.errors.map((e) => ({ pointer: `/traits${e.pointer}`, message: e.message }));
    const violation = {
      canonicalName: 'user_identified',
      code: finding.code,
      severity: finding.severity,
      planVersion: plan.version,
      messageId: null,
      subjectId: op.externalId,
      errors,
    };
    plans.record(auth, entry.route, [violation], entry.receivedAt, plan);
    if (finding.severity !== 'rejected') return;
    const refusal = planRefusal(finding.code, 'user_identified', errors, true);
    rejections.record(
      auth,
      entry.route,
      [
        {
          index: 0,
          messageId: null,
          code: refusal.code,
          detail: refusal.message,
          severity: 'rejected',
          item,
        },
      ],
      entry.receivedAt,
    );
    throw refusal;
  };
}

/** The identity change itself: the store's transaction, and the identified flag. */
async function change(changes: IdentityChanges, productId: string, op: IdentityOperation): Promise<IdentityResult> {
  if (op.kind === 'alias')
    return {
      created: false,
      user: await changes.alias(productId, { from_external_id: op.from, to_external_id: op.to }),
    };
  const identifiers =
    op.identifiers === undefined && op.impliedIdentifiers === undefined
      ? undefined
      : { ...op.impliedIdentifiers, ...op.identifiers };
  return changes.identify(
    productId,
    { external_id: op.externalId, identifiers, traits: op.traits },
    { identifies: op.identifiesUser !== false },
  );
}

export function createIdentityPipeline(dependencies: IdentityPipelineDependencies) {
  const { changes, catalog, transformations } = dependencies;
  /** The stages before the change, in their order. */
  const stages: Stage[] = [
    { name: 'browser key: identifiers', run: browserKeyIdentifiers },
    { name: 'suppression', inAccept: true, run: suppression(dependencies.suppressions) },
    ...(transformations === undefined
      ? []
      : [{ name: 'transformation', inAccept: true, run: transformation(transformations, dependencies.rejections) }]),
    { name: 'browser key: merges', run: browserKeyMerges(changes) },
    { name: 'tracking plan', inAccept: true, run: trackingPlan(dependencies.plans, dependencies.rejections) },
  ];

  async function guard(auth: AuthContext, op: IdentityOperation, entry: IdentityEntry): Promise<IdentityCall> {
    const call: IdentityCall = { auth, entry, op, item: entry.item };
    for (const stage of stages) {
      if (stage.inAccept === true && entry.segmentItem !== undefined) continue;
      await stage.run(call);
      if (call.droppedBy !== undefined) break;
    }
    return call;
  }

  /** Runs every stage in order; a refusal is thrown (an AppError with its code). An alias is never dropped. */
  async function apply(auth: AuthContext, op: AliasOperation, entry: IdentityEntry): Promise<IdentityResult>;
  async function apply(
    auth: AuthContext,
    op: IdentityOperation,
    entry: IdentityEntry,
  ): Promise<IdentityResult | IdentityDropped>;
  async function apply(
    auth: AuthContext,
    op: IdentityOperation,
    entry: IdentityEntry,
  ): Promise<IdentityResult | IdentityDropped> {
    const call = await guard(auth, op, entry);
    if (call.droppedBy !== undefined) return { dropped: true, step: call.droppedBy };
    const admitted = call.op;
    const result = await change(changes, auth.productId, admitted);
    if (admitted.kind === 'identify' && entry.segmentItem === undefined)
      catalog.observeTraits(auth.productId, admitted.traits, entry.receivedAt);
    return result;
  }

  return {
    apply,

    /** The refusal of the stages before the change, if any, without changing anything (a Segment item before it is stored). */
    async admit(auth: AuthContext, op: IdentityOperation, entry: IdentityEntry): Promise<AppError | undefined> {
      try {
        await guard(auth, op, entry);
        return undefined;
      } catch (error) {
        if (error instanceof AppError) return error;
        throw error;
      }
    },
  };
}

export type IdentityPipeline = ReturnType<typeof createIdentityPipeline>;
