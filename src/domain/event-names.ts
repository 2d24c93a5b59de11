// Event name rules (contract §4 "Name rules"). Pure functions, no I/O.
import type { FieldError } from './errors.js';

export const NAME_PATTERN = /^[a-z][a-z0-9_]*$/;
export const NAME_PATTERN_SOURCE = '^[a-z][a-z0-9_]*$';
export const NAME_MAX_LENGTH = 64;

export const V1_EVENT_TYPES = [
  'user_signed_up',
  'user_active',
  'session_start',
  'session_end',
  'user_deleted',
] as const;
export type V1EventType = (typeof V1_EVENT_TYPES)[number];

/** How the client spelled the event name. `legacy` is the deprecated flat v2 form. */
export type NameFormat = 'preferred' | 'unified' | 'legacy' | 'v1' | 'segment';

export interface SplitName {
  eventType: string;
  action: string;
  canonicalName: string;
  nameFormat: NameFormat;
}

export interface NameInput {
  event?: string | undefined;
  event_type?: string | undefined;
  action?: string | undefined;
}

export type NameResult = { ok: true; name: SplitName } | { ok: false; errors: FieldError[] };

function checkPart(value: string, pointer: string, what: string): FieldError | undefined {
  if (value.length === 0) return { pointer, message: `${what} is empty` };
  if (value.length > NAME_MAX_LENGTH) {
    return { pointer, message: `${what} "${value}" is longer than ${NAME_MAX_LENGTH} characters` };
  }
  if (!NAME_PATTERN.test(value)) {
    return {
      pointer,
      message: `${what} "${value}" must match ${NAME_PATTERN_SOURCE} (lower-case letters, digits and underscores, starting with a letter)`,
    };
  }
  return undefined;
}

/** Index of the leftmost `.`, `:` or `_`, or -1. */
function firstSeparator(value: string): number {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 46 /* . */ || c === 58 /* : */ || c === 95 /* _ */) return i;
  }
  return -1;
}

/**
 * Decides the name format of a v2 event and splits it.
 * `base` is the JSON pointer of the event object ('' for a single request, '/events/3' in a batch).
 */
export function splitV2Name(input: NameInput, base = ''): NameResult {
  const { event, event_type: eventType, action } = input;
  if (event !== undefined && (eventType !== undefined || action !== undefined)) {
    const other = eventType !== undefined ? 'event_type' : 'action';
    return {
      ok: false,
      errors: [
        {
          pointer: `${base}/event`,
          message: `send either "event" or "event_type"/"action", not both ("${other}" was also sent)`,
        },
      ],
    };
  }
  if (event !== undefined) {
    const at = firstSeparator(event);
    if (at < 0) {
      return {
        ok: false,
        errors: [
          {
            pointer: `${base}/event`,
            message: `"${event}" has no separator: use "<event_type>.<action>" (dot, colon or underscore), for example "project.created"`,
          },
        ],
      };
    }
    const head = event.slice(0, at);
    const tail = event.slice(at + 1);
    const errors = [
      checkPart(head, `${base}/event`, 'event type part'),
      checkPart(tail, `${base}/event`, 'action part'),
    ].filter((e): e is FieldError => e !== undefined);
    if (errors.length > 0) return { ok: false, errors };
    return {
      ok: true,
      name: { eventType: head, action: tail, canonicalName: `${head}_${tail}`, nameFormat: 'unified' },
    };
  }
  if (eventType === undefined) {
    if (action !== undefined) {
      return {
        ok: false,
        errors: [{ pointer: `${base}/event_type`, message: '"action" was sent without "event_type"' }],
      };
    }
    return {
      ok: false,
      errors: [{ pointer: `${base}/event_type`, message: 'one of "event" or "event_type" is required' }],
    };
  }
  if (action !== undefined) {
    const errors = [
      checkPart(eventType, `${base}/event_type`, 'event_type'),
      checkPart(action, `${base}/action`, 'action'),
    ].filter((e): e is FieldError => e !== undefined);
    if (errors.length > 0) return { ok: false, errors };
    return { ok: true, name: { eventType, action, canonicalName: `${eventType}_${action}`, nameFormat: 'preferred' } };
  }
  // Legacy flat: the whole name in event_type.
  const whole = checkPart(eventType, `${base}/event_type`, 'event_type');
  if (whole) return { ok: false, errors: [whole] };
  const at = eventType.indexOf('_');
  if (at < 0) {
    return {
      ok: false,
      errors: [
        {
          pointer: `${base}/action`,
          message: `"action" is required with event_type "${eventType}" (a flat legacy name must contain "_", for example "user_signed_up")`,
        },
      ],
    };
  }
  const head = eventType.slice(0, at);
  const tail = eventType.slice(at + 1);
  const actionError = checkPart(tail, `${base}/event_type`, 'action part of the legacy name');
  if (actionError) return { ok: false, errors: [actionError] };
  return { ok: true, name: { eventType: head, action: tail, canonicalName: eventType, nameFormat: 'legacy' } };
}

export function splitV1Name(eventType: string, base = ''): NameResult {
  if (!(V1_EVENT_TYPES as readonly string[]).includes(eventType)) {
    return {
      ok: false,
      errors: [
        {
          pointer: `${base}/event_type`,
          message: `"${eventType}" is not a v1 event type; allowed: ${V1_EVENT_TYPES.join(', ')} (use /api/v2/events for custom events)`,
        },
      ],
    };
  }
  const at = eventType.indexOf('_');
  return {
    ok: true,
    name: {
      eventType: eventType.slice(0, at),
      action: eventType.slice(at + 1),
      canonicalName: eventType,
      nameFormat: 'v1',
    },
  };
}

/** The preferred-format spelling of a legacy name, for the 410 answer when legacy input is switched off. */
export function preferredFormOf(name: SplitName): string {
  return JSON.stringify({ event_type: name.eventType, action: name.action });
}
