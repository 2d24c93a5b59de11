// What the admin lists paged newest first by a uuidv7 id share (rejections, tracking plan violations):
// `limit` (1–500, default 50), `cursor` (the last id of the previous page, base64url: opaque to clients)
// and `received_from`/`received_to` (RFC 3339), read one way with the same messages, and the page cut
// from the `limit + 1` rows asked of storage.
import { Type } from '@sinclair/typebox';
import { validationError } from '../../domain/errors.js';
import { parseRfc3339 } from '../../domain/timestamps.js';

export const PAGE_DEFAULT_LIMIT = 50;
export const PAGE_MAX_LIMIT = 500;

/** The query-string schemas of those parameters (each list places them among its own filters). */
export const idPageParameters = {
  limit: Type.Optional(Type.String({ description: `1–${PAGE_MAX_LIMIT}, default ${PAGE_DEFAULT_LIMIT}` })),
  cursor: Type.Optional(Type.String({ description: 'meta.next_cursor of the previous page' })),
  received_from: Type.Optional(Type.String({ description: 'RFC 3339, inclusive' })),
  received_to: Type.Optional(Type.String({ description: 'RFC 3339, exclusive' })),
};

/** `limit` as a number, or 400 pointing at it. */
export function pageLimit(value: string | undefined): number {
  const limit = value === undefined ? PAGE_DEFAULT_LIMIT : Number(value);
  if (!Number.isInteger(limit) || limit < 1 || limit > PAGE_MAX_LIMIT) {
    throw validationError([
      { pointer: '/limit', message: `query parameter limit must be a whole number from 1 to ${PAGE_MAX_LIMIT}` },
    ]);
  }
  return limit;
}

function queryTime(value: string | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  const parsed = parseRfc3339(value);
  if (parsed === undefined)
    throw validationError([{ pointer: `/${name}`, message: `query parameter ${name} must be an RFC 3339 timestamp` }]);
  return parsed;
}

export interface IdPageQuery {
  limit: number;
  beforeId: string | undefined;
  receivedFrom: string | undefined;
  receivedTo: string | undefined;
}

/** The shared parameters, checked in this order: limit, cursor, received_from, received_to (first error wins). */
export function idPageQuery(query: {
  limit?: string;
  cursor?: string;
  received_from?: string;
  received_to?: string;
}): IdPageQuery {
  const limit = pageLimit(query.limit);
  let beforeId: string | undefined;
  if (query.cursor !== undefined) {
    beforeId = Buffer.from(query.cursor, 'base64url').toString('utf8');
    if (!/^[0-9a-f-]{36}$/.test(beforeId))
      throw validationError([{ pointer: '/cursor', message: 'query parameter cursor is not one this API gave out' }]);
  }
  return {
    limit,
    beforeId,
    receivedFrom: queryTime(query.received_from, 'received_from'),
    receivedTo: queryTime(query.received_to, 'received_to'),
  };
}

/** The page of `rows` (read with limit + 1) and the cursor of the next one, null on the last page. */
export function idPage<T extends { id: string }>(rows: T[], limit: number): { page: T[]; nextCursor: string | null } {
  const page = rows.slice(0, limit);
  return { page, nextCursor: rows.length > limit ? Buffer.from(page.at(-1)!.id).toString('base64url') : null };
}
