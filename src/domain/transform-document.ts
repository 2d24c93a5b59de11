// An event draft as the document steps see (transformations.md §2), and the draft a transformed document
// becomes. The idempotency key, product and receive time are not in the document: no step can change them.
import { splitV2Name, type SplitName } from './event-names.js';
import type { EventDraft } from './events.js';
import { segmentId } from './segment.js';
import { jsonWithShared } from './shared-json.js';
import { failLastChange, type TransformResult } from './transform-engine.js';
import type { Step, TransformDocument } from './transform-types.js';

const SEGMENT_TYPES: ReadonlySet<string> = new Set(['track', 'page', 'screen', 'identify', 'group', 'alias']);

/** What a document is made from: an item's draft at ingest, or a stored event for a destination's own steps. */
export interface DocumentParts {
  canonicalName: string;
  eventType: string;
  action: string;
  subjectType: string;
  subjectId: string;
  occurredAt: string;
  source: string;
  properties: Record<string, unknown>;
  context: Record<string, unknown> | null | undefined;
  /** A Segment item's call is its `original.type`; anything else is a native `event`. */
  original: Record<string, unknown> | null | undefined;
}

/** The call a Segment item was (kept in its `original.type`), or `event` for a native event. */
function typeOf(original: Record<string, unknown> | null | undefined): TransformDocument['type'] {
  const type = original?.type;
  return typeof type === 'string' && SEGMENT_TYPES.has(type) ? (type as TransformDocument['type']) : 'event';
}

/** The document steps see (transformations.md §2): identify and group items have traits, the others properties. */
export function documentFrom(parts: DocumentParts): TransformDocument {
  return makeDocument(
    parts.original,
    parts.canonicalName,
    parts.eventType,
    parts.action,
    parts.subjectType,
    parts.subjectId,
    parts.occurredAt,
    parts.properties,
    parts.context,
    parts.source,
  );
}

/** documentFrom of an item's draft, without the parts object in between (one fewer object per event). */
export function documentOf(draft: EventDraft, source: string): TransformDocument {
  const { name } = draft;
  return makeDocument(
    draft.original,
    name.canonicalName,
    name.eventType,
    name.action,
    draft.subjectType,
    draft.subjectId,
    draft.occurredAt,
    draft.properties,
    draft.context,
    source,
  );
}

function makeDocument(
  original: DocumentParts['original'],
  event: string,
  eventType: string,
  action: string,
  subjectType: string,
  subjectId: string,
  occurredAt: string,
  properties: Record<string, unknown>,
  partsContext: DocumentParts['context'],
  source: string,
): TransformDocument {
  const type = typeOf(original);
  const context = partsContext ?? {};
  // Two literals rather than a spread of the traits (a spread costs more than the rest); keys in the same order.
  if (type === 'identify' || type === 'group')
    return {
      type,
      event,
      event_type: eventType,
      action,
      subject_type: subjectType,
      subject_id: subjectId,
      occurred_at: occurredAt,
      properties: {},
      traits: properties,
      context,
      source,
    };
  return {
    type,
    event,
    event_type: eventType,
    action,
    subject_type: subjectType,
    subject_id: subjectId,
    occurred_at: occurredAt,
    properties,
    context,
    source,
  };
}

/** The field of a Segment item that named its subject: `groupId` for a group, else `userId`, else `anonymousId`. */
function subjectField(original: Record<string, unknown>): string | undefined {
  if (original.type === 'group') return 'groupId';
  if (segmentId(original.userId) !== undefined) return 'userId';
  return segmentId(original.anonymousId) !== undefined ? 'anonymousId' : undefined;
}

/**
 * A Segment item's `original` with its subject as the steps left it: when they changed `subject_id` (a masked
 * one, say), the field that carried it takes the new value, so the id as received is not kept beside its hash.
 */
export function originalAfter(
  original: Record<string, unknown> | null | undefined,
  before: string,
  after: string,
): Record<string, unknown> | null | undefined {
  if (original == null || before === after) return original;
  const field = subjectField(original);
  if (field === undefined || segmentId(original[field]) !== before) return original;
  return { ...original, [field]: after };
}

/**
 * What a document's item stores as its properties: its traits for an identify or group item, else its properties.
 * By the item's type, never by which object is there, so that traits can never take the place of an event's
 * properties (the engine refuses to give other items traits).
 */
export function storedProperties(document: TransformDocument): Record<string, unknown> {
  if (document.type === 'identify' || document.type === 'group') return document.traits ?? {};
  return document.properties;
}

/** The draft of a transformed document: the name split again when it changed; the row serialises its objects. */
export function draftOf(draft: EventDraft, document: TransformDocument): EventDraft {
  let name: SplitName = draft.name;
  if (document.event !== draft.name.canonicalName) {
    const split = splitV2Name({ event: `${document.event_type}.${document.action}` });
    // The engine only writes names it split itself; an unsplittable one keeps the original name.
    if (split.ok) name = split.name;
  }
  const properties = storedProperties(document);
  const context = Object.keys(document.context).length === 0 && draft.context == null ? null : document.context;
  // The texts, if the draft had them, are of the objects before the steps: the row makes them again. Left out by
  // value rather than with `delete`, which would make the draft a slow dictionary for the rest of its way.
  // Every field written out rather than spread: a spread of the draft cost more than serialising its properties.
  const next: AllFields<EventDraft> = {
    name,
    subjectType: document.subject_type,
    subjectId: document.subject_id,
    occurredAt: document.occurred_at,
    externalId: draft.externalId,
    properties,
    propertiesJson: undefined,
    personIds: draft.personIds,
    context,
    // With the shared answers of enrichment steps (a user agent's) spliced in as text; else made by the row.
    contextJson: context === null ? undefined : jsonWithShared(context),
    original: originalAfter(draft.original, draft.subjectId, document.subject_id),
    received: draft.received,
  };
  return next;
}

/**
 * A transformed item is checked again like input, its size included (transformations.md §1): a `set` or a function
 * can grow it past the limit its entry point holds items to. The properties (or traits) and context of an item a
 * step changed are serialised here, into its draft (the row keeps the texts), and together may hold at most `limit`
 * bytes of JSON; a result over it fails at the last step that changed it. An item no step changed came within it.
 */
export function checkStoredSize(
  result: TransformResult,
  draft: EventDraft,
  limit: number,
  steps: readonly Step[],
): void {
  if (!result.outcomes.includes('changed')) return;
  const propertiesJson = JSON.stringify(draft.properties);
  draft.propertiesJson = propertiesJson;
  let contextJson = '';
  if (draft.context != null) contextJson = draft.contextJson ??= JSON.stringify(draft.context);
  failOverSize(result, steps, propertiesJson, contextJson, limit);
}

/** The same check of a result with no draft behind it: a test item's (transformations.md §6), a native identify's. */
export function checkDocumentSize(result: TransformResult, limit: number, steps: readonly Step[]): void {
  if (!result.outcomes.includes('changed')) return;
  const { context } = result.document;
  const contextJson = Object.keys(context).length === 0 ? '' : JSON.stringify(context);
  failOverSize(result, steps, JSON.stringify(storedProperties(result.document)), contextJson, limit);
}

function failOverSize(
  result: TransformResult,
  steps: readonly Step[],
  propertiesJson: string,
  contextJson: string,
  limit: number,
): void {
  // A UTF-16 unit is at most 3 bytes of UTF-8: nearly every event is settled without counting its bytes.
  if ((propertiesJson.length + contextJson.length) * 3 <= limit) return;
  const bytes = Buffer.byteLength(propertiesJson) + Buffer.byteLength(contextJson);
  if (bytes <= limit) return;
  const { type } = result.document;
  const [what, holder] =
    type === 'identify' || type === 'group'
      ? [contextJson === '' ? 'the traits' : 'the traits and context', `an ${type}`]
      : ["the event's properties and context", 'an event'];
  failLastChange(result, steps, `it left ${bytes} bytes of JSON in ${what}; ${holder} may hold at most ${limit}`);
}

/** Each field of T, the optional ones too (then possibly undefined): a field added to the draft must be copied here. */
type AllFields<T> = { [K in keyof Required<T>]: T[K] };
