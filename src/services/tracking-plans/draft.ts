// A draft plan (mode off) drawn from the catalogue (governance.md §2): the observed types, `required` for
// properties present in every event.
import { SEGMENT_SOURCE } from '../../domain/segment.js';
import { draftPlan, type TrackingPlan } from '../../domain/tracking-plan.js';
import type { Storage } from '../../storage/types.js';
import type { CatalogService } from '../catalog-service.js';

const PAGE = 500;

export async function draftFromCatalogue(
  governance: Storage['governance'],
  catalog: Pick<CatalogService, 'flush'>,
  productId: string,
): Promise<TrackingPlan> {
  await catalog.flush();
  const names: Array<{
    canonicalName: string;
    count: number;
    properties: Array<{ path: string; types: Record<string, number> }>;
  }> = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await governance.listCatalogEvents(productId, { sort: 'name', offset, limit: PAGE });
    for (const event of page) {
      // Segment identify items are stored as `user_identified` events but checked against `traits`: their
      // trait paths are in the traits catalogue, an event schema for them would check nothing.
      if (event.canonicalName === 'user_identified' && event.sources.every((source) => source === SEGMENT_SOURCE))
        continue;
      const properties = await governance.listCatalogProperties(productId, 'event', event.canonicalName);
      names.push({
        canonicalName: event.canonicalName,
        count: event.count,
        properties: properties.map((p) => ({ path: p.path, types: p.types as Record<string, number> })),
      });
    }
    if (page.length < PAGE) break;
  }
  const traits = await governance.listCatalogProperties(productId, 'trait', '');
  return draftPlan(
    names,
    traits.map((p) => ({ path: p.path, types: p.types as Record<string, number> })),
  );
}
