// Stage, after the write: the catalogue counts the events stored (duplicates are not new) and the traits of
// the identify items stored, in memory, flushed in the background (governance.md §1).
import type { EventRecord } from '../../storage/types.js';
import type { CatalogService } from '../catalog-service.js';
import type { Stage } from './types.js';

export function catalogueStage(catalog: CatalogService): Stage {
  return function catalogue(run) {
    if (run.items.length === 0) return;
    const { auth, options } = run;
    const created: EventRecord[] = [];
    for (const item of run.items) {
      const outcome = run.outcomes[item.index]!;
      if (outcome.status !== 'created') continue;
      created.push(outcome.event);
      if (item.draft.received?.identify === true)
        catalog.observeTraits(auth.productId, item.draft.properties, options.receivedAt);
    }
    catalog.observeEvents(auth.productId, created);
  };
}
