// Stage: erasure's suppression (governance.md §3). An item naming an erased person is refused before the
// transformation, the plan and the legacy count: nothing of it is kept.
import { AppError } from '../../domain/errors.js';
import type { EventDraft } from '../../domain/events.js';
import { SUPPRESSED_DETAIL } from '../erasure/suppression.js';
import { refuseWhere, type Stage } from './types.js';

/** The suppression check of erasure (governance.md §3), given by the erasure service. */
export interface SuppressionCheck {
  suppressionCheck(productId: string): Promise<((ids: Iterable<string>) => boolean) | undefined>;
  countSuppressed(n: number): void;
}

/** The ids of a person an item names: a Segment item's userId, anonymousId, previousId; a native event's user subject. */
function personIdsOf(draft: EventDraft): string[] {
  return draft.personIds ?? (draft.subjectType === 'user' ? [draft.subjectId] : []);
}

export function suppressionStage(suppressions: SuppressionCheck): Stage {
  return async function suppression(run) {
    // Undefined unless the product has suppressed ids (then one HMAC per id an item names).
    const suppressed = await suppressions.suppressionCheck(run.auth.productId);
    if (suppressed === undefined) return;
    const before = run.items.length;
    refuseWhere(run, (item) =>
      suppressed(personIdsOf(item.draft)) ? new AppError('subject_suppressed', SUPPRESSED_DETAIL) : undefined,
    );
    const count = before - run.items.length;
    if (count > 0) return () => suppressions.countSuppressed(count);
  };
}
