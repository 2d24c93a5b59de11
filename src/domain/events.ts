// Turns a schema-valid event request into a normalised event draft (contract §4), or field errors.
// Pure: no I/O, no clock of its own (the receive time is passed in).
import type { FieldError } from './errors.js';
import { splitV1Name, splitV2Name, type NameResult, type SplitName } from './event-names.js';
import { rejectUnstorable } from './json-values.js';
import { parseRfc3339 } from './timestamps.js';

export const SUBJECT_TYPES = ['user', 'account', 'subscription'] as const;

export interface V1EventInput {
  event_type: string;
  subject_type: string;
  subject_id: string;
  occurred_at: string;
  metadata?: Record<string, unknown>;
  external_id?: string;
}

export interface V2EventInput {
  event?: string;
  event_type?: string;
  action?: string;
  subject_type: string;
  subject_id: string;
  occurred_at?: string;
  properties?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  /** Clarifications §32: what the sender knows of the client, stored and read like a Segment item's context. */
  context?: Record<string, unknown>;
  external_id?: string;
}

export interface EventDraft {
  name: SplitName;
  subjectType: string;
  subjectId: string;
  occurredAt: string;
  externalId: string | null;
  properties: Record<string, unknown>;
  /**
   * `properties` as JSON text, once made: by the batch route when it had to measure an event near the size
   * limit, or by a route that received it so. The row makes it otherwise, from `properties` as the stages left
   * them (a transformation changes them): one serialisation per stored event.
   */
  propertiesJson: string | undefined;
  /**
   * The ids of a person the item names (Segment: userId, anonymousId, previousId), checked against
   * erasure's suppressions; absent for native events, whose person is a `user` subject.
   */
  personIds?: string[];
  /** What a Segment item carried beside its properties (segment-compat "Mapping"); absent for native events. */
  context?: Record<string, unknown> | null;
  /** `context` as the JSON text it arrived in, when that is what is stored (not serialised again). */
  contextJson?: string;
  original?: Record<string, unknown> | null;
  /**
   * Where `properties` sat in the request (tracking-plan errors point there): the item's pointer in its
   * body ('' for a single-event route, `/events/3` in a batch) and its field. `identify` marks a Segment
   * identify, whose properties are traits and are checked against the plan's `traits`. `moved`: properties
   * that came from elsewhere in the item (a Segment page's top-level `name`), by key → pointer in the item.
   */
  received?: {
    base: string;
    field: 'properties' | 'metadata' | 'traits';
    identify?: boolean;
    moved?: Record<string, string>;
  };
}

export type DraftResult = { ok: true; draft: EventDraft } | { ok: false; errors: FieldError[] };

function occurredAt(value: string | undefined, receivedAt: string, base: string, errors: FieldError[]): string {
  if (value === undefined) return receivedAt;
  const parsed = parseRfc3339(value);
  if (parsed === undefined) {
    errors.push({
      pointer: `${base}/occurred_at`,
      message: `"${value}" is not a valid RFC 3339 timestamp with an offset (for example 2026-03-01T12:00:00Z or 2026-03-01T13:00:00+01:00)`,
    });
    return receivedAt;
  }
  return parsed;
}

/** The rules both versions share, applied after the name was split. */
function completeDraft(
  name: NameResult,
  input: {
    subject_type: string;
    subject_id: string;
    occurred_at?: string | undefined;
    external_id?: string | undefined;
  },
  properties: Array<[field: 'properties' | 'metadata', value: Record<string, unknown> | undefined]>,
  earlierErrors: FieldError[],
  receivedAt: string,
  base: string,
  storableChecked: boolean,
): DraftResult {
  const errors: FieldError[] = name.ok ? [] : [...name.errors];
  errors.push(...earlierErrors);
  const at = occurredAt(input.occurred_at, receivedAt, base, errors);
  if (!storableChecked) {
    rejectUnstorable(input.subject_id, `${base}/subject_id`, errors);
    rejectUnstorable(input.external_id, `${base}/external_id`, errors);
    for (const [field, value] of properties) rejectUnstorable(value, `${base}/${field}`, errors);
  }
  if (!name.ok || errors.length > 0) return { ok: false, errors };
  const sentField = properties.find(([, value]) => value !== undefined);
  const sent = sentField?.[1] ?? {};
  return {
    ok: true,
    draft: {
      name: name.name,
      subjectType: input.subject_type,
      subjectId: input.subject_id,
      occurredAt: at,
      externalId: input.external_id ?? null,
      properties: sent,
      propertiesJson: undefined,
      received: { base, field: sentField?.[0] ?? properties[0]![0] },
    },
  };
}

/**
 * Bytes of `JSON.stringify(input)` for a schema-valid v2 event, computed from its already
 * serialised properties instead of serialising the whole event a second time. Every other field
 * of a valid event is a short string.
 */
export function eventJsonBytes(input: V2EventInput, propertiesJson: string): number {
  const fields = Object.entries(input);
  let bytes = 2 + Math.max(0, fields.length - 1); // braces and commas
  for (const [key, value] of fields) {
    bytes += key.length + 3; // "key":
    bytes +=
      key === 'properties' || key === 'metadata'
        ? Buffer.byteLength(propertiesJson)
        : Buffer.byteLength(JSON.stringify(value));
  }
  return bytes;
}

export function draftV1(input: V1EventInput, receivedAt: string, base = ''): DraftResult {
  return completeDraft(
    splitV1Name(input.event_type, base),
    input,
    [['metadata', input.metadata]],
    [],
    receivedAt,
    base,
    false,
  );
}

/**
 * `storableChecked`: the caller has already applied `rejectUnstorable` to the whole of `input` and found
 * nothing (the batch route's schema check does), so the walk over its values is not repeated.
 */
export function draftV2(input: V2EventInput, receivedAt: string, base = '', storableChecked = false): DraftResult {
  const conflict: FieldError[] =
    input.properties !== undefined && input.metadata !== undefined
      ? [{ pointer: `${base}/metadata`, message: '"metadata" is an alias of "properties": send one of them, not both' }]
      : [];
  if (input.context !== undefined && !storableChecked) rejectUnstorable(input.context, `${base}/context`, conflict);
  const result = completeDraft(
    splitV2Name(input, base),
    input,
    [
      ['properties', input.properties],
      ['metadata', input.metadata],
    ],
    conflict,
    receivedAt,
    base,
    storableChecked,
  );
  if (result.ok && input.context !== undefined) result.draft.context = input.context;
  return result;
}
