// Admin reads of events (events-out §3): filters → one storage page, cursors, the user filter through
// identity. Shared by the admin API, the live stream, the export and the CLI.
import { decodeCursor, encodeCursor } from '../domain/event-cursor.js';
import { AppError, validationError, type FieldError } from '../domain/errors.js';
import { NAME_MAX_LENGTH, NAME_PATTERN } from '../domain/event-names.js';
import { parseRfc3339 } from '../domain/timestamps.js';
import type { EventFilter, EventRecord, Storage } from '../storage/types.js';
import { exportPages } from './event-export.js';

export const EVENTS_DEFAULT_LIMIT = 100;
export const EVENTS_MAX_LIMIT = 1000;
export const SUBJECT_TYPES = ['user', 'account', 'subscription'] as const;

/** The filter parameters shared by the list, the stream and the export, as received (strings). */
export interface EventFilterParams {
  canonical_name?: string | undefined;
  event_type?: string | undefined;
  action?: string | undefined;
  source?: string | undefined;
  key_id?: string | undefined;
  subject_type?: string | undefined;
  subject_id?: string | undefined;
  user?: string | undefined;
  received_from?: string | undefined;
  received_to?: string | undefined;
}

export interface EventListParams extends EventFilterParams {
  order?: 'asc' | 'desc' | undefined;
  limit?: number | undefined;
  cursor?: string | undefined;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** NUL and lone surrogates are refused in every query value (clarifications §13), with a pointer. */
export function rejectUnsafeStrings(params: Record<string, unknown>, errors: FieldError[]): void {
  for (const [name, value] of Object.entries(params)) {
    if (typeof value !== 'string') continue;
    if (value.includes('\u0000'))
      errors.push({ pointer: `/${name}`, message: 'must not contain the NUL character (U+0000)' });
    else if (LONE_SURROGATE.test(value))
      errors.push({ pointer: `/${name}`, message: 'must not contain a lone surrogate (invalid UTF-16)' });
  }
}

function checkName(value: string, pointer: string, errors: FieldError[], maxLength = NAME_MAX_LENGTH): void {
  if (value.length > maxLength || !NAME_PATTERN.test(value)) {
    errors.push({ pointer, message: `must be a name like ${NAME_PATTERN.source} of at most ${maxLength} characters` });
  }
}

function timestamp(value: string | undefined, pointer: string, errors: FieldError[]): string | undefined {
  if (value === undefined) return undefined;
  const parsed = parseRfc3339(value);
  if (parsed === undefined) {
    errors.push({ pointer, message: 'must be an RFC 3339 timestamp with an offset, for example 2026-03-01T12:00:00Z' });
    return undefined;
  }
  return parsed;
}

export function createEventReadService(storage: Storage) {
  /** Every external id of the user `externalId` resolves to (merged ids and linked anonymous ids included). */
  async function externalIdsOfUser(productId: string, externalId: string): Promise<string[]> {
    const resolved = await storage.identity.getUser(productId, externalId);
    if (resolved === undefined) return [externalId];
    return [...new Set([resolved.user.externalId, ...resolved.user.aliases, externalId])];
  }

  /** Validates the filters and resolves `user` to the external ids of that user. Throws a 400 listing every problem. */
  async function resolveFilter(
    productId: string,
    params: EventFilterParams,
    errors: FieldError[] = [],
  ): Promise<EventFilter> {
    rejectUnsafeStrings(params as Record<string, unknown>, errors);
    const filter: EventFilter = {};
    if (params.canonical_name !== undefined) {
      const names = params.canonical_name.split(',').map((name) => name.trim());
      names.forEach((name) => checkName(name, '/canonical_name', errors, 2 * NAME_MAX_LENGTH + 1));
      if (names.length > 50) errors.push({ pointer: '/canonical_name', message: 'at most 50 names' });
      filter.canonicalNames = [...new Set(names)];
    }
    if (params.event_type !== undefined) {
      checkName(params.event_type, '/event_type', errors);
      filter.eventType = params.event_type;
    }
    if (params.action !== undefined) {
      checkName(params.action, '/action', errors);
      filter.action = params.action;
    }
    if (params.source !== undefined) filter.source = params.source;
    if (params.key_id !== undefined) filter.keyId = params.key_id;
    if ((params.subject_type === undefined) !== (params.subject_id === undefined)) {
      errors.push({
        pointer: params.subject_type === undefined ? '/subject_type' : '/subject_id',
        message: 'subject_type and subject_id go together',
      });
    }
    if (params.subject_type !== undefined && !(SUBJECT_TYPES as readonly string[]).includes(params.subject_type)) {
      errors.push({ pointer: '/subject_type', message: `must be one of ${SUBJECT_TYPES.join(', ')}` });
    }
    if (params.user !== undefined && params.subject_type !== undefined) {
      errors.push({ pointer: '/user', message: 'use either user or subject_type + subject_id' });
    }
    const from = timestamp(params.received_from, '/received_from', errors);
    const to = timestamp(params.received_to, '/received_to', errors);
    if (from !== undefined) filter.receivedFrom = from;
    if (to !== undefined) filter.receivedTo = to;
    if (errors.length > 0) throw validationError(errors);
    if (params.subject_type !== undefined && params.subject_id !== undefined) {
      filter.subjectType = params.subject_type;
      filter.subjectIds = [params.subject_id];
    }
    if (params.user !== undefined) {
      filter.subjectType = 'user';
      filter.subjectIds = await externalIdsOfUser(productId, params.user);
    }
    return filter;
  }

  function positionOf(cursor: string, pointer: string): string {
    const position = decodeCursor(cursor);
    if (position === undefined || !storage.events.isPosition(position)) {
      throw validationError([
        { pointer, message: 'is not a cursor Inlet returned (use meta.next_cursor or a stream event id as given)' },
      ]);
    }
    return position;
  }

  return {
    resolveFilter,
    positionOf,
    async list(
      productId: string,
      params: EventListParams,
    ): Promise<{ events: EventRecord[]; nextCursor: string | null }> {
      const { order, limit, cursor, ...filterParams } = params;
      const errors: FieldError[] = [];
      if (limit !== undefined && (!Number.isInteger(limit) || limit < 1 || limit > EVENTS_MAX_LIMIT)) {
        errors.push({ pointer: '/limit', message: `must be a whole number from 1 to ${EVENTS_MAX_LIMIT}` });
      }
      if (cursor !== undefined) rejectUnsafeStrings({ cursor }, errors);
      const filter = await resolveFilter(productId, filterParams, errors);
      const after = cursor === undefined ? undefined : positionOf(cursor, '/cursor');
      const page = await storage.events.page({
        productId,
        filter,
        order: order ?? 'desc',
        limit: limit ?? EVENTS_DEFAULT_LIMIT,
        ...(after === undefined ? {} : { after }),
      });
      return { events: page.events, nextCursor: page.next === null ? null : encodeCursor(page.next) };
    },
    /** Every event of the filter up to the product's end now, oldest first, page by page (the export). */
    exportPages(
      productId: string,
      filter: EventFilter,
      onProgress?: (events: number) => void,
    ): AsyncGenerator<EventRecord[]> {
      return exportPages(storage, productId, filter, onProgress);
    },
    async get(productId: string, uuid: string): Promise<EventRecord> {
      const event = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(uuid)
        ? await storage.events.get(productId, uuid.toLowerCase())
        : undefined;
      if (event === undefined)
        throw new AppError('not_found', `No event with uuid "${uuid}" in product "${productId}".`);
      return event;
    },
  };
}

export type EventReadService = ReturnType<typeof createEventReadService>;
