// The fields of a document a step may change besides its objects (transformations.md §3): each checked
// again like input before it is written, so a step never leaves an event that could not have been sent.
import { SUBJECT_TYPES } from './events.js';
import { splitV2Name } from './event-names.js';
import { rejectUnstorable } from './json-values.js';
import { parseRfc3339 } from './timestamps.js';
import type { FieldError } from './errors.js';
import type { TransformDocument } from './transform-types.js';

const SUBJECT_ID_MAX = 255;

/** Writes `value` to a top-level field, normalised (names split, times in UTC); throws why it cannot. */
export function setTopLevel(document: TransformDocument, field: string, value: unknown): void {
  switch (field) {
    case 'event': {
      if (typeof value !== 'string') throw new Error('event must be a string');
      const split = splitV2Name({ event: value });
      if (!split.ok) throw new Error(`event: ${split.errors[0]!.message}`);
      document.event = split.name.canonicalName;
      document.event_type = split.name.eventType;
      document.action = split.name.action;
      return;
    }
    case 'subject_type':
      if (!(SUBJECT_TYPES as readonly unknown[]).includes(value))
        throw new Error(`subject_type must be one of ${SUBJECT_TYPES.join(', ')}`);
      document.subject_type = value as string;
      return;
    case 'subject_id': {
      if (typeof value !== 'string' || value.length === 0 || value.length > SUBJECT_ID_MAX)
        throw new Error(`subject_id must be a string of 1 to ${SUBJECT_ID_MAX} characters`);
      const errors: FieldError[] = [];
      rejectUnstorable(value, 'subject_id', errors);
      if (errors.length > 0) throw new Error(`subject_id ${errors[0]!.message}`);
      document.subject_id = value;
      return;
    }
    case 'occurred_at': {
      const parsed = typeof value === 'string' ? parseRfc3339(value) : undefined;
      if (parsed === undefined) throw new Error('occurred_at must be an RFC 3339 timestamp with an offset');
      document.occurred_at = parsed;
      return;
    }
    default:
      throw new Error(`${field} may not be changed`);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Returned events whose values the sandbox has found storable already (storableJson of their text). */
const storableReturns = new WeakSet<object>();

/** Marks an event parsed from text that storableJson accepted: adoptReturned does not walk its values again. */
export function markStorable(returned: object): void {
  storableReturns.add(returned);
}

/**
 * The document a function returned, checked like input and taken field by field into a new document:
 * `type` and `source` stay what they were; anything else at the top level is ignored.
 */
export function adoptReturned(before: TransformDocument, returned: unknown): TransformDocument {
  if (!isObject(returned)) throw new Error('transform must return the event object, or null to drop it');
  const next: TransformDocument = { ...before };
  if (returned.event !== before.event) setTopLevel(next, 'event', returned.event);
  for (const field of ['subject_type', 'subject_id', 'occurred_at'] as const)
    if (returned[field] !== before[field]) setTopLevel(next, field, returned[field]);
  for (const field of ['properties', 'context'] as const) {
    const value = returned[field] ?? {};
    if (!isObject(value)) throw new Error(`${field} must be an object`);
    next[field] = value;
  }
  if (before.traits !== undefined) {
    const traits = returned.traits ?? {};
    if (!isObject(traits)) throw new Error('traits must be an object');
    next.traits = traits;
  } else if (returned.traits != null)
    // Only identify and group items have traits (transformations.md §2), as for a declarative step's write.
    throw new Error(`traits: only identify and group items have traits; this ${before.type} item has none`);
  if (storableReturns.has(returned)) return next;
  const errors: FieldError[] = [];
  rejectUnstorable(next.properties, 'properties', errors);
  rejectUnstorable(next.context, 'context', errors);
  if (next.traits !== undefined) rejectUnstorable(next.traits, 'traits', errors);
  if (errors.length > 0) throw new Error(`${errors[0]!.pointer}: ${errors[0]!.message}`);
  return next;
}
