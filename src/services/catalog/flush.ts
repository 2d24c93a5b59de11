// A flush of the catalogue's counts: small upserts that add to the stored rows, so several instances sharing
// a PostgreSQL database add up. The bounds are decided here against what is stored, so they hold across
// instances (up to what two instances flush at the same moment).
import type { CatalogEventDelta, CatalogPropertyDelta, CatalogScope, Storage } from '../../storage/types.js';
import type { PathTypes, ProductAggregate } from './counts.js';

/** The rows of one name's (or the traits') paths, new paths only while there is `room`; the rest counted as dropped. */
function propertyDeltas(
  scope: CatalogScope,
  canonicalName: string,
  paths: PathTypes,
  known: Set<string> | undefined,
  room: number,
): { rows: CatalogPropertyDelta[]; dropped: number } {
  const rows: CatalogPropertyDelta[] = [];
  let dropped = 0;
  let left = room;
  for (const [path, types] of paths) {
    const isNew = known === undefined || !known.has(path);
    if (isNew && left <= 0) {
      for (const c of types.values()) dropped += c.count;
      continue;
    }
    if (isNew) left--;
    for (const [jsonType, c] of types)
      rows.push({ scope, canonicalName, path, jsonType, count: c.count, firstSeen: c.first, lastSeen: c.last });
  }
  return { rows, dropped };
}

/** Writes one product's counts: the names and paths that fit under the bounds, the rest as overflow. */
export async function writeProduct(
  governance: Storage['governance'],
  limits: { maxEvents: number; maxProperties: number },
  productId: string,
  product: ProductAggregate,
): Promise<void> {
  const names = [...product.names.keys()];
  const state = names.length === 0 ? undefined : await governance.catalogState(productId, 'event', names);
  const events: CatalogEventDelta[] = [];
  const properties: CatalogPropertyDelta[] = [];
  const overflow = { ...product.overflow };
  let roomForNames = limits.maxEvents - (state?.totalNames ?? 0);
  // New names get the room left in order of how often they were seen in this flush.
  const ordered = [...product.names.entries()].sort((a, b) => b[1].count - a[1].count);
  for (const [name, agg] of ordered) {
    if (!state!.knownNames.has(name)) {
      if (roomForNames <= 0) {
        overflow.event += agg.count;
        continue;
      }
      roomForNames--;
    }
    const known = state!.paths.get(name);
    const { rows, dropped } = propertyDeltas(
      'event',
      name,
      agg.paths,
      known,
      limits.maxProperties - (known?.size ?? 0),
    );
    properties.push(...rows);
    events.push({
      canonicalName: name,
      eventType: agg.eventType,
      action: agg.action,
      count: agg.count,
      firstSeen: agg.first,
      lastSeen: agg.last,
      sources: [...agg.sources],
      keyIds: [...agg.keyIds],
      propertiesOverflow: agg.propertiesOverflow + dropped,
    });
  }
  if (product.traits.size > 0) {
    const traitState = await governance.catalogState(productId, 'trait', ['']);
    const known = traitState.paths.get('');
    const { rows, dropped } = propertyDeltas(
      'trait',
      '',
      product.traits,
      known,
      limits.maxProperties - (known?.size ?? 0),
    );
    properties.push(...rows);
    overflow.trait += dropped;
  }
  await governance.writeCatalog({ productId, events, properties, overflow });
}
