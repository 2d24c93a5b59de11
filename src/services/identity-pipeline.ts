// The identity pipeline: every identify and alias, from the native routes or as the side effect of a Segment
// item, goes through `apply`, whose stages run in the order of the accept pipeline (transformations.md §1):
//
//   browser key: identifiers → suppression → (transformation) → browser key: merges → tracking plan → change → catalogue
//
// The identifier half of the browser-key rule looks only at what is asked, so it answers before anything of the
// person is read; the merge half reads the identity state, so it waits until suppression has spoken. A stage
// refuses by throwing; a stage that changes the operation (a transformation) returns the changed one.
import { AppError } from '../domain/errors.js';
import type { IdentityOperation } from '../domain/identity.js';
import { checkTraits } from '../domain/tracking-plan.js';
import type { UserRecord } from '../storage/types.js';
import type { CatalogService } from './catalog-service.js';
import type { IdentityChanges } from './identity-changes.js';
import type { AuthContext } from './key-service.js';
import type { RejectionService } from './rejection-service.js';
import { planRefusal, type TrackingPlanService } from './tracking-plan-service.js';

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
}

interface Stage {
  name: string;
  /** The accept pipeline runs this stage on a Segment item (its ids, its traits as the event's properties). */
  inAccept?: boolean;
  run(auth: AuthContext, op: IdentityOperation, entry: IdentityEntry): IdentityOperation | Promise<IdentityOperation>;
}

/**
 * Clarifications §19, the browser-key rule's first half: a browser key never creates or moves identifiers.
 * Identifiers a native request asks for are refused (403 naming the field); those a Segment identify's traits
 * imply (`traits.email`) are not derived, so the e-mail stays a trait.
 */
function browserKeyIdentifiers(auth: AuthContext, op: IdentityOperation): IdentityOperation {
  if (auth.kind !== 'browser' || op.kind !== 'identify') return op;
  if (op.identifiers !== undefined && Object.keys(op.identifiers).length > 0) {
    throw new AppError(
      'forbidden',
      'A browser key cannot set identifiers ("identifiers"): send them from your server with an events key; traits are fine.',
      { errors: [{ pointer: '/identifiers', message: 'not allowed with a browser key' }] },
    );
  }
  if (op.impliedIdentifiers === undefined) return op;
  const { impliedIdentifiers: _notDerived, ...withoutImplied } = op;
  return withoutImplied;
}

/**
 * Clarifications §18, the browser-key rule's second half: through a browser key, two users that were each
 * identified are never merged. A merge asked before anything is stored is refused (`identified_merge_forbidden`);
 * the link of a Segment item already stored is left undone with the warning `identity_conflict`.
 */
function browserKeyMerges(changes: Pick<IdentityChanges, 'mergesTwoIdentified'>): Stage['run'] {
  return async (auth, op, entry) => {
    if (auth.kind !== 'browser' || op.kind !== 'alias') return op;
    if (!(await changes.mergesTwoIdentified(auth.productId, op.from, op.to))) return op;
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

/** Erasure (governance.md §3): a suppressed id is refused before anything of it is kept. */
function suppression(suppressions: SuppressionRefusal): Stage['run'] {
  return async (auth, op, entry) => {
    await suppressions.refuseSuppressed(auth, op.kind === 'identify' ? [op.externalId] : [op.from, op.to], entry.route);
    return op;
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
  return async (auth, op, entry) => {
    if (op.kind !== 'identify' || op.traits === undefined) return op;
    const plan = await plans.planFor(auth.productId);
    if (plan === undefined || plan.mode === 'off') return op;
    const finding = checkTraits(plan, op.traits);
    if (finding === undefined) return op;
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
    if (finding.severity !== 'rejected') return op;
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
          item: entry.item,
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
  const { changes, catalog } = dependencies;
  /** The stages before the change, in their order. */
  const stages: Stage[] = [
    { name: 'browser key: identifiers', run: browserKeyIdentifiers },
    { name: 'suppression', inAccept: true, run: suppression(dependencies.suppressions) },
    // The product's transformation (transformations.md §1) goes here: after suppression, on the ids as received,
    // and before the plan, so that the plan, the store and the catalogue all see the transformed traits. Marked
    // inAccept: accept transforms a Segment item, whose identify must then take its traits from the stored draft.
    { name: 'browser key: merges', run: browserKeyMerges(changes) },
    { name: 'tracking plan', inAccept: true, run: trackingPlan(dependencies.plans, dependencies.rejections) },
  ];

  async function guard(auth: AuthContext, op: IdentityOperation, entry: IdentityEntry): Promise<IdentityOperation> {
    let current = op;
    for (const stage of stages) {
      if (stage.inAccept === true && entry.segmentItem !== undefined) continue;
      current = await stage.run(auth, current, entry);
    }
    return current;
  }

  return {
    /** Runs every stage in order; a refusal is thrown (an AppError with its code). */
    async apply(auth: AuthContext, op: IdentityOperation, entry: IdentityEntry): Promise<IdentityResult> {
      const admitted = await guard(auth, op, entry);
      const result = await change(changes, auth.productId, admitted);
      if (admitted.kind === 'identify' && entry.segmentItem === undefined)
        catalog.observeTraits(auth.productId, admitted.traits, entry.receivedAt);
      return result;
    },

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
