// The items of a test run (transformations.md §6), translated as their route would translate them: a native v2
// event (checked field by field here, as the route's schema does) or a Segment item; or, for `stored`, events as
// the admin reads answer them, taken in their stored form (the console's preview on the last events: a Segment
// event keeps its type, traits and source, and its id samples as it did at ingest). A problem in any item is a 400
// pointing into `items`.
import { validationError, type FieldError } from '../../domain/errors.js';
import { draftV2, SUBJECT_TYPES, type EventDraft, type V2EventInput } from '../../domain/events.js';
import { SEGMENT_SOURCE, translateSegmentItem } from '../../domain/segment.js';
import { documentFrom, documentOf } from '../../domain/transform-document.js';
import type { TestItem } from './service.js';

/** Where test items come from: what a client would send to a route, or stored events as read. */
export type TestRoute = 'v2' | 'segment' | 'stored';

const V2_STRINGS = ['event', 'event_type', 'action', 'subject_type', 'subject_id', 'occurred_at', 'external_id'];
const V2_OBJECTS = ['properties', 'metadata', 'context'];

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A translated item's document, and its idempotency key when it has one (else a fresh id stands in). */
function draftItem(draft: EventDraft, source: string): TestItem {
  const document = documentOf(draft, source);
  return draft.externalId === null ? { document } : { document, messageId: draft.externalId };
}

function v2Shape(item: unknown, base: string, errors: FieldError[]): item is V2EventInput {
  if (!isObject(item)) {
    errors.push({ pointer: base, message: 'must be an object' });
    return false;
  }
  const before = errors.length;
  for (const [key, value] of Object.entries(item)) {
    if (V2_STRINGS.includes(key)) {
      if (typeof value !== 'string' || value.length === 0 || value.length > 255)
        errors.push({ pointer: `${base}/${key}`, message: 'must be a string of 1 to 255 characters' });
    } else if (V2_OBJECTS.includes(key)) {
      if (!isObject(value)) errors.push({ pointer: `${base}/${key}`, message: 'must be an object' });
    } else errors.push({ pointer: `${base}/${key}`, message: 'is not a field of a v2 event' });
  }
  if (!(SUBJECT_TYPES as readonly unknown[]).includes(item.subject_type))
    errors.push({ pointer: `${base}/subject_type`, message: `must be one of ${SUBJECT_TYPES.join(', ')}` });
  if (item.subject_id === undefined) errors.push({ pointer: `${base}/subject_id`, message: 'is required' });
  return errors.length === before;
}

const STORED_STRINGS = [
  'canonical_name',
  'event_type',
  'action',
  'subject_type',
  'subject_id',
  'occurred_at',
  'source',
];

/**
 * A stored event as `GET …/events` answers it, as the document its stored form makes (what a destination's steps
 * see too). Its other fields (`received_at`, `key_id`) are not part of the document; its id is the message id.
 */
function storedItem(item: unknown, base: string, errors: FieldError[]): TestItem | undefined {
  if (!isObject(item)) {
    errors.push({ pointer: base, message: 'must be an object (an event as the admin reads answer it)' });
    return undefined;
  }
  const before = errors.length;
  for (const key of STORED_STRINGS)
    if (typeof item[key] !== 'string' || item[key] === '')
      errors.push({ pointer: `${base}/${key}`, message: 'must be a non-empty string' });
  if (!isObject(item.properties)) errors.push({ pointer: `${base}/properties`, message: 'must be an object' });
  for (const key of ['context', 'original'])
    if (item[key] != null && !isObject(item[key]))
      errors.push({ pointer: `${base}/${key}`, message: 'must be an object when present' });
  for (const key of ['external_id', 'uuid'])
    if (item[key] != null && typeof item[key] !== 'string')
      errors.push({ pointer: `${base}/${key}`, message: 'must be a string when present' });
  if (errors.length !== before) return undefined;
  const text = (key: string) => item[key] as string;
  const object = (key: string) => (item[key] ?? null) as Record<string, unknown> | null;
  const document = documentFrom({
    canonicalName: text('canonical_name'),
    eventType: text('event_type'),
    action: text('action'),
    subjectType: text('subject_type'),
    subjectId: text('subject_id'),
    occurredAt: text('occurred_at'),
    source: text('source'),
    properties: item.properties as Record<string, unknown>,
    context: object('context'),
    original: object('original'),
  });
  const messageId = (item.external_id ?? item.uuid) as string | null | undefined;
  return messageId == null ? { document } : { document, messageId };
}

export function translateTestItems(items: unknown[], route: TestRoute, keyId: string): TestItem[] {
  const receivedAt = new Date().toISOString();
  const errors: FieldError[] = [];
  const out: TestItem[] = [];
  items.forEach((item, index) => {
    const base = `/items/${index}`;
    if (route === 'stored') {
      const stored = storedItem(item, base, errors);
      if (stored !== undefined) out.push(stored);
      return;
    }
    if (route === 'segment') {
      const translated = translateSegmentItem(item, { call: undefined, base, receivedAt, keyId });
      if (translated.ok) out.push(draftItem(translated.draft, SEGMENT_SOURCE));
      else errors.push(...(translated.error.errors ?? [{ pointer: base, message: translated.error.message }]));
      return;
    }
    if (!v2Shape(item, base, errors)) return;
    const draft = draftV2(item, receivedAt, base);
    if (draft.ok) out.push(draftItem(draft.draft, 'api'));
    else errors.push(...draft.errors);
  });
  if (errors.length > 0) throw validationError(errors);
  return out;
}
