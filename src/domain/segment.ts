// The Segment spec (track, identify, alias, page, screen, group) translated into Inlet's model
// (segment-compat.md "Mapping to Inlet's model"). Pure: no I/O, no clock (the receive time is passed in).
import { createHash } from 'node:crypto';
import { AppError, type ErrorCode, type FieldError } from './errors.js';
import { NAME_MAX_LENGTH, type SplitName } from './event-names.js';
import type { EventDraft } from './events.js';
import type { IdentityOperation } from './identity.js';
import { rejectUnstorable } from './json-values.js';

export const SEGMENT_CALLS = ['track', 'identify', 'alias', 'page', 'screen', 'group'] as const;
export type SegmentCall = (typeof SEGMENT_CALLS)[number];

/** Events of every Segment route share this source, so a retry by any SDK deduplicates (contract §4). */
export const SEGMENT_SOURCE = 'segment';

/** Segment's own limits (clarifications §24), separate from the native batch route's. */
export const SEGMENT_LIMITS = {
  itemBytes: 32 * 1024,
  singleBodyBytes: 500 * 1024,
  batchBodyBytes: 5 * 1024 * 1024,
  batchItems: 2500,
} as const;

const MESSAGE_ID_MAX = 255;
const YEAR_MS = 366 * 24 * 3600 * 1000;
const EARLIEST = Date.parse('2000-01-01T00:00:00.000Z');

/**
 * `Order Completed` → `order_completed`; `orderCompleted` → `order_completed`; `2fa enabled` →
 * `e_2fa_enabled` (clarifications §15). The camelCase split comes before lower-casing, only where a
 * lower-case letter or digit meets an upper-case one.
 */
export function normaliseTrackName(name: string): string {
  const known = normalisedNames.get(name);
  if (known !== undefined) return known;
  const normalised = normaliseUncached(name);
  // A product sends a few hundred distinct names; the bound only stops a flood of random ones.
  if (normalisedNames.size >= 10_000) normalisedNames.clear();
  normalisedNames.set(name, normalised);
  return normalised;
}

/** Names seen recently → their normalised form: four regular expressions once per name, not once per event. */
const normalisedNames = new Map<string, string>();

function normaliseUncached(name: string): string {
  const snake = name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '');
  return /^[0-9]/.test(snake) ? `e_${snake}` : snake;
}

/** Splits a normalised name at the first `_` followed by a letter; with none, the action is `tracked`. */
export function splitTrackName(normalised: string): { eventType: string; action: string } {
  const match = /_(?=[a-z])/.exec(normalised);
  if (match === null) return { eventType: normalised, action: 'tracked' };
  return { eventType: normalised.slice(0, match.index), action: normalised.slice(match.index + 1) };
}

/** A Segment id (userId, anonymousId, groupId, previousId): strings and numbers, `""` counts as absent. */
export function segmentId(value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value !== 'string') return undefined;
  return value === '' ? undefined : value;
}

/** The last texts parsed as times: a batch's `sentAt` and its receive time are the same for every item. */
const parsedTimes = new Map<string, number | undefined>();

function parseTime(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value !== 'string') return undefined;
  if (parsedTimes.has(value)) return parsedTimes.get(value);
  const ms = value.trim() === '' ? Number.NaN : Date.parse(value);
  const result = Number.isNaN(ms) ? undefined : ms;
  if (parsedTimes.size >= 64) parsedTimes.clear();
  parsedTimes.set(value, result);
  return result;
}

/**
 * Segment's clock-skew correction: `received_at − (sentAt − originalTimestamp)`; without `sentAt` the
 * timestamp as sent; without a timestamp the receive time. Undefined for a timestamp that cannot be
 * read or a result before 2000 or more than a year ahead.
 */
export function segmentOccurredAt(timestamp: unknown, sentAt: unknown, receivedAt: string): string | undefined {
  const received = parseTime(receivedAt)!;
  const hasTimestamp = timestamp !== undefined && timestamp !== null;
  const at = hasTimestamp ? parseTime(timestamp) : received;
  if (at === undefined) return undefined;
  const sent = hasTimestamp && sentAt !== undefined && sentAt !== null ? parseTime(sentAt) : undefined;
  const result = sent === undefined ? at : received - (sent - at);
  if (result < EARLIEST || result > received + YEAR_MS) return undefined;
  return new Date(result).toISOString();
}

/** JSON with object keys sorted: the same item always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value)
    .sort()
    .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
    .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
  return `{${entries.join(',')}}`;
}

/** The id of an item sent without `messageId`: derived from the key and its content, so a raw retry is still idempotent. */
export function derivedMessageId(keyId: string, item: unknown): string {
  return `inlet-${createHash('sha256').update(keyId).update('\u0000').update(canonicalJson(item)).digest('hex').slice(0, 40)}`;
}

/**
 * What one pass over a Segment body's text tells before it is parsed (`scanSegmentBody`).
 * - `tooDeep`: arrays and objects nest deeper than the limit given (the request is refused).
 * - `plain`: every value in it is storable as sent, so the per-value walk (`rejectUnstorable`) can be
 *   skipped: no `\u` escape anywhere (the only way JSON decoded from UTF-8 can hold U+0000 or a lone
 *   surrogate), no number with an exponent or over 300 characters (the only ways to reach ±Infinity),
 *   and no nesting deeper than PLAIN_DEPTH (far inside the 64 levels a value may have).
 * - `compact`: no whitespace outside strings (what every SDK sends: `JSON.stringify`'s output).
 * - `items`: the `[start, end)` offsets of each object in the top-level `batch` array (the last `batch`
 *   key, as JSON.parse keeps the last), or undefined when there is none.
 * - `fields`: beside each item, the offsets of its `properties` and `context` when they are objects (the
 *   last of each key, again as JSON.parse keeps).
 */
export interface SegmentBodyScan {
  tooDeep: boolean;
  plain: boolean;
  compact: boolean;
  items: Array<[number, number]> | undefined;
  fields: SegmentItemFields[] | undefined;
}

export type SegmentItemFields = Partial<Record<'properties' | 'context', [number, number]>>;

/** Nesting a `plain` body may have: an item sits at level 3 of a batch, its properties at 4. */
const PLAIN_DEPTH = 32;
const PLAIN_NUMBER_MAX = 300;

function isNumberChar(c: number): boolean {
  // 0-9 . + - e E
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x2b || c === 0x2d || c === 0x65 || c === 0x45;
}

/**
 * One pass over the text of a body, strings skipped with `indexOf` (most of a Segment body is strings).
 * It runs before JSON.parse, so it must terminate on any text; what it says about text that is not JSON
 * does not matter (the parser refuses it next), except `tooDeep`, which is what the character-by-character
 * scan (`jsonNestsDeeperThan`) would say.
 */
export function scanSegmentBody(text: string, maxDepth: number): SegmentBodyScan {
  let plain = !text.includes('\\u');
  let depth = 0;
  let deepest = 0;
  let key: string | undefined; // the last string seen at depth 1, and whether a ':' followed it
  let pendingKey: string | undefined;
  let inBatch = false;
  let batchSeen = false;
  let items: Array<[number, number]> = [];
  let itemStart = -1;
  let compact = true;
  // Inside a batch item (depth 3): the field a string may name, the field the last ':' named, the object value being read.
  let fields: SegmentItemFields[] = [];
  let itemFields: SegmentItemFields = {};
  let pendingField: 'properties' | 'context' | undefined;
  let field: 'properties' | 'context' | undefined;
  let fieldStart = -1;
  const length = text.length;
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Find the closing quote: one not preceded by an odd run of backslashes.
      let end = text.indexOf('"', i + 1);
      while (end !== -1) {
        let backslashes = 0;
        for (let j = end - 1; j > i && text.charCodeAt(j) === 0x5c; j--) backslashes++;
        if (backslashes % 2 === 0) break;
        end = text.indexOf('"', end + 1);
      }
      if (end === -1) break; // an unterminated string: not JSON, the parser says so
      if (depth === 1) pendingKey = text.slice(i + 1, end);
      else if (depth === 3 && inBatch) {
        const size = end - i - 1;
        pendingField =
          size === 10 && text.startsWith('properties', i + 1)
            ? 'properties'
            : size === 7 && text.startsWith('context', i + 1)
              ? 'context'
              : undefined;
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      if (depth === 1 && c === 0x5b) {
        inBatch = key === 'batch';
        if (inBatch) {
          items = [];
          fields = [];
          batchSeen = true;
        }
      } else if (depth === 2 && inBatch && c === 0x7b) {
        itemStart = i;
        itemFields = {};
      } else if (depth === 3 && inBatch && c === 0x7b && field !== undefined) fieldStart = i;
      if (++depth > deepest) {
        deepest = depth;
        if (depth > maxDepth)
          return { tooDeep: true, plain: false, compact: false, items: undefined, fields: undefined };
      }
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
      if (depth === 2 && inBatch && c === 0x7d && itemStart >= 0) {
        items.push([itemStart, i + 1]);
        fields.push(itemFields);
        itemStart = -1;
      } else if (depth === 3 && inBatch && c === 0x7d && fieldStart >= 0) {
        itemFields[field!] = [fieldStart, i + 1];
        fieldStart = -1;
      } else if (depth === 1) inBatch = false;
    } else if (c === 0x3a) {
      if (depth === 1) key = pendingKey;
      else if (depth === 3 && inBatch) {
        field = pendingField;
        // A repeated key: the last one's value is the one JSON.parse keeps.
        if (field !== undefined) delete itemFields[field];
      }
    } else if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
      compact = false;
    } else if (plain && (c === 0x2d || (c >= 0x30 && c <= 0x39))) {
      let end = i + 1;
      while (end < length && isNumberChar(text.charCodeAt(end))) end++;
      for (let j = i; j < end; j++) {
        const d = text.charCodeAt(j);
        if (d === 0x65 || d === 0x45) plain = false;
      }
      if (end - i > PLAIN_NUMBER_MAX) plain = false;
      i = end - 1;
    }
  }
  return {
    tooDeep: false,
    plain: plain && deepest <= PLAIN_DEPTH,
    compact,
    items: batchSeen ? items : undefined,
    fields: batchSeen ? fields : undefined,
  };
}

/**
 * The JSON text of a batch item's `properties` and `context` as sent, to be stored as it is instead of
 * serialising the parsed value again: only from a plain, compact body, where that text is JSON of the
 * very value JSON.parse made (it can differ from JSON.stringify's only in `\/` escapes, trailing zeros
 * of a fraction, the order of integer-like keys, or a key given twice: the same value, read alike).
 */
export function sentFieldsJson(text: string, scan: SegmentBodyScan, index: number): SentJson | undefined {
  if (!scan.plain || !scan.compact) return undefined;
  const spans = scan.fields?.[index];
  if (spans === undefined) return undefined;
  const sent: SentJson = {};
  if (spans.properties !== undefined) sent.properties = text.slice(spans.properties[0], spans.properties[1]);
  if (spans.context !== undefined) sent.context = text.slice(spans.context[0], spans.context[1]);
  return sent;
}

/** An item's `properties` and `context` as the JSON text they arrived in (`sentFieldsJson`). */
export interface SentJson {
  properties?: string;
  context?: string;
}

/**
 * An upper bound on the bytes of `JSON.stringify(item)` for a batch item of a `plain` body, from its text
 * as sent: without `\u` escapes and exponents, re-serialising a value never makes it longer (it only drops
 * whitespace, `\/` escapes, repeated keys and trailing zeros). Three bytes a UTF-16 unit at most.
 */
export function itemBytesBound(text: string, [start, end]: [number, number], limit: number): number {
  const units = end - start;
  return units * 3 <= limit ? units * 3 : Buffer.byteLength(text.slice(start, end));
}

export interface SegmentItemOptions {
  /** The call implied by the route (`/v1/track`), or undefined for a batch, where each item says its `type`. */
  call: SegmentCall | undefined;
  /** JSON pointer of the item ('' for a single-event route, `/batch/3` in a batch). */
  base: string;
  receivedAt: string;
  keyId: string;
  /** Sent with a browser key: `context.ip` is filled in from `clientIp`. */
  browser?: boolean;
  clientIp?: string;
  batch?: { sentAt?: unknown; context?: unknown; integrations?: unknown };
  /** Every value the item and the batch carry is known storable (`SegmentBodyScan.plain`): skip the walk. */
  storable?: boolean;
  /** The item's `properties` and `context` as the JSON text they arrived in, stored as such when unchanged. */
  sentJson?: SentJson;
}

export type SegmentTranslation =
  | { ok: true; call: SegmentCall; draft: EventDraft; identity: IdentityOperation[]; messageId: string }
  | { ok: false; error: AppError; messageId: string | undefined };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function refuse(
  code: ErrorCode,
  detail: string,
  messageId: string | undefined,
  errors?: FieldError[],
): Extract<SegmentTranslation, { ok: false }> {
  return { ok: false, error: new AppError(code, detail, errors === undefined ? {} : { errors }), messageId };
}

function optionalObject(
  item: Record<string, unknown>,
  field: string,
  base: string,
  errors: FieldError[],
): Record<string, unknown> | undefined {
  const value = item[field];
  if (value === undefined || value === null) return undefined;
  if (!isObject(value)) {
    errors.push({ pointer: `${base}/${field}`, message: 'must be an object' });
    return undefined;
  }
  return value;
}

const MAPPED_FIELDS = new Set(['properties', 'traits', 'context']);

type Refusal = Extract<SegmentTranslation, { ok: false }>;

function isRefusal(value: object): value is Refusal {
  return 'ok' in value && value.ok === false;
}

/** `messageId` as sent (trimmed, at most 255 characters), or one derived from the key and the item. */
function messageIdOf(raw: Record<string, unknown>, base: string, keyId: string): { messageId: string } | Refusal {
  const sent =
    typeof raw.messageId === 'number'
      ? String(raw.messageId)
      : typeof raw.messageId === 'string'
        ? raw.messageId.trim()
        : undefined;
  if (sent !== undefined && sent.length > MESSAGE_ID_MAX) {
    return refuse(
      'validation_error',
      `messageId is longer than ${MESSAGE_ID_MAX} characters`,
      sent.slice(0, MESSAGE_ID_MAX),
      [{ pointer: `${base}/messageId`, message: `must be at most ${MESSAGE_ID_MAX} characters` }],
    );
  }
  return { messageId: sent === undefined || sent === '' ? derivedMessageId(keyId, raw) : sent };
}

/** The objects an item carries: its own `properties`, `traits` and `context`, and the context stored (the batch's under the item's). */
interface ItemFields {
  properties: Record<string, unknown> | undefined;
  traits: Record<string, unknown> | undefined;
  itemContext: Record<string, unknown> | undefined;
  context: Record<string, unknown> | undefined;
}

function fieldsOf(raw: Record<string, unknown>, options: SegmentItemOptions, messageId: string): ItemFields | Refusal {
  const { base } = options;
  const errors: FieldError[] = [];
  const properties = optionalObject(raw, 'properties', base, errors);
  const traits = optionalObject(raw, 'traits', base, errors);
  const itemContext = optionalObject(raw, 'context', base, errors);
  const batchContext = isObject(options.batch?.context) ? options.batch.context : undefined;
  let context = batchContext === undefined ? itemContext : { ...batchContext, ...itemContext };
  if (options.browser === true && options.clientIp !== undefined && context?.ip === undefined)
    context = { ...context, ip: options.clientIp };
  if (errors.length > 0)
    return refuse('validation_error', `${errors[0]!.pointer}: ${errors[0]!.message}`, messageId, errors);
  return { properties, traits, itemContext, context };
}

/** What one call becomes: the event's name, subject and properties, and its identity side effects. */
interface CallMapping {
  name: SplitName;
  subjectType: string;
  subjectId: string;
  properties: Record<string, unknown>;
  identity: IdentityOperation[];
  /** Properties filled from elsewhere in the item: tracking-plan errors point where the sender put them. */
  moved: Record<string, string>;
}

/** What the per-call mappings read of an item. */
interface CallInput {
  raw: Record<string, unknown>;
  base: string;
  messageId: string;
  fields: ItemFields;
  userId: string | undefined;
  /** userId, else anonymousId; undefined only for an alias. */
  subject: string | undefined;
}

function segmentName(eventType: string, action: string): SplitName {
  return { eventType, action, canonicalName: `${eventType}_${action}`, nameFormat: 'segment' };
}

function mapTrack({ raw, base, messageId, fields, subject }: CallInput): CallMapping | Refusal {
  const event = typeof raw.event === 'string' ? raw.event : typeof raw.event === 'number' ? String(raw.event) : '';
  const normalised = normaliseTrackName(event);
  if (normalised === '')
    return refuse(
      'invalid_event_name',
      `The event name ${JSON.stringify(raw.event ?? null)} has no letter or digit to name it by.`,
      messageId,
      [{ pointer: `${base}/event`, message: 'empty after normalisation' }],
    );
  const split = splitTrackName(normalised);
  if (split.eventType.length > NAME_MAX_LENGTH || split.action.length > NAME_MAX_LENGTH) {
    return refuse(
      'invalid_event_name',
      `The event name normalises to "${normalised}", whose parts may be at most ${NAME_MAX_LENGTH} characters each.`,
      messageId,
      [{ pointer: `${base}/event`, message: 'too long' }],
    );
  }
  return {
    name: { ...split, canonicalName: normalised, nameFormat: 'segment' },
    subjectType: 'user',
    subjectId: subject ?? '',
    properties: fields.properties ?? {},
    identity: [],
    moved: {},
  };
}

/** `page` and `screen`: `name` and `category` join the properties. */
function mapView(call: 'page' | 'screen', { raw, fields, subject }: CallInput): CallMapping {
  const properties = { ...(fields.properties ?? {}) };
  const moved: Record<string, string> = {};
  if (raw.name !== undefined) {
    properties.name = raw.name;
    moved.name = '/name';
  }
  if (raw.category !== undefined) {
    properties.category = raw.category;
    moved.category = '/category';
  }
  return {
    name: segmentName(call, 'viewed'),
    subjectType: 'user',
    subjectId: subject ?? '',
    properties,
    identity: [],
    moved,
  };
}

/** `group`: an event of the account, its traits as properties with the calling user's id. */
function mapGroup({ raw, base, messageId, fields, userId, subject }: CallInput): CallMapping | Refusal {
  const groupId = segmentId(raw.groupId);
  if (groupId === undefined)
    return refuse('validation_error', 'A group call needs a groupId.', messageId, [
      { pointer: `${base}/groupId`, message: 'is required' },
    ]);
  return {
    name: segmentName('group', 'identified'),
    subjectType: 'account',
    subjectId: groupId,
    properties: { ...(fields.traits ?? {}), user_id: subject },
    identity: [],
    moved: { user_id: userId === undefined ? '/anonymousId' : '/userId' },
  };
}

function mapIdentify({ fields, userId, subject }: CallInput): CallMapping {
  // RudderStack's browser SDK sends an identify's traits only in context.traits (Segment's at the top
  // level): both count, the top-level ones winning.
  const { traits, itemContext } = fields;
  const contextTraits = isObject(itemContext?.traits) ? itemContext.traits : undefined;
  const userTraits = contextTraits === undefined ? (traits ?? {}) : { ...contextTraits, ...traits };
  // `traits.email` of a user is their e-mail identifier too (the identity pipeline keeps a browser key's a trait).
  const email = typeof userTraits.email === 'string' && userId !== undefined ? userTraits.email : undefined;
  const subjectId = subject ?? '';
  return {
    name: segmentName('user', 'identified'),
    subjectType: 'user',
    subjectId,
    properties: userTraits,
    identity: [
      {
        kind: 'identify',
        externalId: subjectId,
        traits: userTraits,
        impliedIdentifiers: email === undefined ? undefined : { email },
        identifiesUser: userId !== undefined,
      },
    ],
    moved: {},
  };
}

function mapAlias({ raw, base, messageId, fields, userId }: CallInput): CallMapping | Refusal {
  const previousId = segmentId(raw.previousId);
  if (userId === undefined || previousId === undefined) {
    return refuse('missing_identity', 'An alias call needs both previousId and userId.', messageId, [
      { pointer: `${base}/${userId === undefined ? 'userId' : 'previousId'}`, message: 'is required' },
    ]);
  }
  return {
    name: segmentName('user', 'aliased'),
    subjectType: 'user',
    subjectId: userId,
    properties: { ...(fields.properties ?? {}), previous_id: previousId },
    identity: previousId === userId ? [] : [{ kind: 'alias', from: previousId, to: userId }],
    moved: { previous_id: '/previousId' },
  };
}

function mapCall(call: SegmentCall, input: CallInput): CallMapping | Refusal {
  switch (call) {
    case 'track':
      return mapTrack(input);
    case 'page':
    case 'screen':
      return mapView(call, input);
    case 'group':
      return mapGroup(input);
    case 'identify':
      return mapIdentify(input);
    case 'alias':
      return mapAlias(input);
  }
}

/** Everything the item carries besides the mapped fields, with the batch's `integrations` under the item's. */
function originalOf(
  raw: Record<string, unknown>,
  call: SegmentCall,
  batch: SegmentItemOptions['batch'],
): Record<string, unknown> {
  const original: Record<string, unknown> = {};
  for (const field in raw) if (!MAPPED_FIELDS.has(field)) original[field] = raw[field];
  if (original.integrations === undefined && batch?.integrations !== undefined)
    original.integrations = batch.integrations;
  else if (isObject(original.integrations) && isObject(batch?.integrations))
    original.integrations = { ...batch.integrations, ...original.integrations };
  if (original.type === undefined) original.type = call;
  return original;
}

/**
 * The walk of every value, unless the body's text already showed them all storable. `context.ip` filled in
 * from the request is not from the body: checked on its own.
 */
function unstorableValues(
  call: SegmentCall,
  messageId: string,
  mapping: CallMapping,
  context: Record<string, unknown> | undefined,
  original: Record<string, unknown>,
  options: SegmentItemOptions,
): FieldError[] {
  const { base } = options;
  const unstorable: FieldError[] = [];
  if (options.storable !== true) {
    rejectUnstorable(mapping.subjectId, `${base}/userId`, unstorable);
    rejectUnstorable(messageId, `${base}/messageId`, unstorable);
    rejectUnstorable(
      mapping.properties,
      `${base}/${call === 'identify' || call === 'group' ? 'traits' : 'properties'}`,
      unstorable,
    );
    rejectUnstorable(context, `${base}/context`, unstorable);
    rejectUnstorable(original, base, unstorable);
  } else if (options.browser === true && options.clientIp !== undefined)
    rejectUnstorable(options.clientIp, `${base}/context/ip`, unstorable);
  return unstorable;
}

/**
 * One Segment item → an event draft plus its identity side effects (performed through the identity pipeline once
 * the item is stored), or the per-item rejection.
 */
export function translateSegmentItem(raw: unknown, options: SegmentItemOptions): SegmentTranslation {
  const { base, receivedAt } = options;
  if (!isObject(raw))
    return refuse('validation_error', `${base || 'body'}: an item must be a JSON object`, undefined, [
      { pointer: base, message: 'must be an object' },
    ]);
  const id = messageIdOf(raw, base, options.keyId);
  if (isRefusal(id)) return id;
  const { messageId } = id;

  const type = options.call ?? raw.type;
  if (typeof type !== 'string' || !(SEGMENT_CALLS as readonly string[]).includes(type)) {
    return refuse('validation_error', `type must be one of ${SEGMENT_CALLS.join(', ')}`, messageId, [
      { pointer: `${base}/type`, message: `must be one of ${SEGMENT_CALLS.join(', ')}` },
    ]);
  }
  const call = type as SegmentCall;

  const fields = fieldsOf(raw, options, messageId);
  if (isRefusal(fields)) return fields;

  const userId = segmentId(raw.userId);
  const anonymousId = segmentId(raw.anonymousId);
  const subject = userId ?? anonymousId;
  if (subject === undefined && call !== 'alias') {
    return refuse('missing_identity', 'The item has neither userId nor anonymousId.', messageId, [
      { pointer: `${base}/userId`, message: 'userId or anonymousId is required' },
    ]);
  }

  const timestamp = raw.originalTimestamp ?? raw.timestamp;
  const occurredAt = segmentOccurredAt(timestamp, raw.sentAt ?? options.batch?.sentAt, receivedAt);
  if (occurredAt === undefined) {
    return refuse(
      'invalid_timestamp',
      `The timestamp ${JSON.stringify(timestamp)} is not a readable date between 2000 and a year from now (after clock-skew correction).`,
      messageId,
      [
        {
          pointer: `${base}/${raw.originalTimestamp !== undefined ? 'originalTimestamp' : 'timestamp'}`,
          message: 'not a readable date in range',
        },
      ],
    );
  }

  const mapping = mapCall(call, { raw, base, messageId, fields, userId, subject });
  if (isRefusal(mapping)) return mapping;
  // Any call carrying both ids links them (Segment and RudderStack alike).
  if (userId !== undefined && anonymousId !== undefined && anonymousId !== userId)
    mapping.identity.push({ kind: 'alias', from: anonymousId, to: userId });

  const original = originalOf(raw, call, options.batch);
  const { context } = fields;
  const unstorable = unstorableValues(call, messageId, mapping, context, original, options);
  if (unstorable.length > 0)
    return refuse('validation_error', `${unstorable[0]!.pointer}: ${unstorable[0]!.message}`, messageId, unstorable);

  // Stored as sent when the stored value is the one that arrived (a track's properties, an item's own context).
  const sent = options.sentJson;
  const propertiesJson =
    sent?.properties !== undefined && mapping.properties === fields.properties
      ? sent.properties
      : JSON.stringify(mapping.properties);
  const contextJson =
    sent?.context !== undefined && context !== undefined && context === fields.itemContext ? sent.context : undefined;
  return {
    ok: true,
    call,
    messageId,
    identity: mapping.identity,
    draft: {
      name: mapping.name,
      subjectType: mapping.subjectType,
      subjectId: mapping.subjectId,
      personIds: [userId, anonymousId, segmentId(raw.previousId)].filter((id): id is string => id !== undefined),
      occurredAt,
      externalId: messageId,
      properties: mapping.properties,
      propertiesJson,
      context: context ?? null,
      ...(contextJson === undefined ? {} : { contextJson }),
      original,
      received: {
        base,
        field: call === 'identify' || call === 'group' ? 'traits' : 'properties',
        ...(call === 'identify' ? { identify: true } : {}),
        ...(Object.keys(mapping.moved).length === 0 ? {} : { moved: mapping.moved }),
      },
    },
  };
}
