// Stage: the entry point's own rules (`AcceptOptions.admit`), after the product's transformation and before the
// tracking plan. The Segment routes' browser-key rule on identify and alias items (clarifications §18) reads the
// identity state, so, as in the identity pipeline, it sees an item only once suppression has spoken on the ids as
// received and the steps have run (transformations.md §1); a refusal is then recorded as the steps left the item.
import type { AppError } from '../../domain/errors.js';
import { refuseWhere, type Stage } from './types.js';

export function entryRulesStage(): Stage {
  return async function entryRules(run) {
    const { admit } = run.options;
    if (admit === undefined || run.items.length === 0) return;
    const refusals = new Map<number, AppError>();
    // One item at a time, in request order, as the entry point would ask them.
    for (const item of run.items) {
      const refusal = await admit(item.index, item.draft);
      if (refusal !== undefined) refusals.set(item.index, refusal);
    }
    if (refusals.size > 0) refuseWhere(run, (item) => refusals.get(item.index));
  };
}
