// An event draft as the document steps see (transformations.md §2), and the draft a transformed document
// becomes. The idempotency key, product and receive time are not in the document: no step can change them.
import { splitV2Name, type SplitName } from './event-names.js';
import type { EventDraft } from './events.js';
import type { TransformDocument } from './transform-types.js';

const SEGMENT_TYPES: ReadonlySet<string> = new Set(['track', 'page', 'screen', 'identify', 'group', 'alias']);

/** The call a Segment item was (kept in its `original.type`), or `event` for a native event. */
function typeOf(draft: EventDraft): TransformDocument['type'] {
  const type = draft.original?.type;
  return typeof type === 'string' && SEGMENT_TYPES.has(type) ? (type as TransformDocument['type']) : 'event';
}

export function documentOf(draft: EventDraft, source: string): TransformDocument {
  const type = typeOf(draft);
  const hasTraits = type === 'identify' || type === 'group';
  return {
    type,
    event: draft.name.canonicalName,
    event_type: draft.name.eventType,
    action: draft.name.action,
    subject_type: draft.subjectType,
    subject_id: draft.subjectId,
    occurred_at: draft.occurredAt,
    properties: hasTraits ? {} : draft.properties,
    ...(hasTraits ? { traits: draft.properties } : {}),
    context: draft.context ?? {},
    source,
  };
}

/** The draft of a transformed document: the name split again when it changed, objects serialised again. */
export function draftOf(draft: EventDraft, document: TransformDocument): EventDraft {
  let name: SplitName = draft.name;
  if (document.event !== draft.name.canonicalName) {
    const split = splitV2Name({ event: `${document.event_type}.${document.action}` });
    // The engine only writes names it split itself; an unsplittable one keeps the original name.
    if (split.ok) name = split.name;
  }
  const properties = document.traits ?? document.properties;
  const context = Object.keys(document.context).length === 0 && draft.context == null ? null : document.context;
  // The context's text, if the draft had one, is of the context before the steps: made again when written. Left
  // out by value rather than with `delete`, which would make the draft a slow dictionary for the rest of its way.
  return {
    ...draft,
    name,
    subjectType: document.subject_type,
    subjectId: document.subject_id,
    occurredAt: document.occurred_at,
    properties,
    propertiesJson: JSON.stringify(properties),
    context,
    contextJson: undefined,
  };
}
