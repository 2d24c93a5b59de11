// The items of a test run (transformations.md §6), translated as their route would translate them: a native v2
// event (checked field by field here, as the route's schema does) or a Segment item. A problem in any item is a
// 400 pointing into `items`.
import { validationError, type FieldError } from '../../domain/errors.js';
import { draftV2, SUBJECT_TYPES, type V2EventInput } from '../../domain/events.js';
import { SEGMENT_SOURCE, translateSegmentItem } from '../../domain/segment.js';
import type { TestItem } from './service.js';

const V2_STRINGS = ['event', 'event_type', 'action', 'subject_type', 'subject_id', 'occurred_at', 'external_id'];
const V2_OBJECTS = ['properties', 'metadata', 'context'];

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
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

export function translateTestItems(items: unknown[], route: 'v2' | 'segment', keyId: string): TestItem[] {
  const receivedAt = new Date().toISOString();
  const errors: FieldError[] = [];
  const out: TestItem[] = [];
  items.forEach((item, index) => {
    const base = `/items/${index}`;
    if (route === 'segment') {
      const translated = translateSegmentItem(item, { call: undefined, base, receivedAt, keyId });
      if (translated.ok) out.push({ draft: translated.draft, source: SEGMENT_SOURCE });
      else errors.push(...(translated.error.errors ?? [{ pointer: base, message: translated.error.message }]));
      return;
    }
    if (!v2Shape(item, base, errors)) return;
    const draft = draftV2(item, receivedAt, base);
    if (draft.ok) out.push({ draft: draft.draft, source: 'api' });
    else errors.push(...draft.errors);
  });
  if (errors.length > 0) throw validationError(errors);
  return out;
}
