// The admin input of a destination (events-out §6): its shape, and the parsers of the fields every type
// shares (name, filter, batch). Each type parses its own fields in its module (webhook.ts, nats.ts).
// Problems are collected as field errors, so that one answer names every one of them.
import type { FieldError } from '../../domain/errors.js';
import type { DestinationBatch, DestinationFilter, MessageType } from '../../storage/types.js';
import type { BatchBounds } from './kind.js';
import { MESSAGE_TYPES } from './messages.js';

export interface DestinationInput {
  type?: unknown;
  name?: unknown;
  filter?: unknown;
  batch?: unknown;
  start?: unknown;
  url?: unknown;
  servers?: unknown;
  subject?: unknown;
  credentials?: unknown;
  schema?: unknown;
  path?: unknown;
  partition?: unknown;
  status?: unknown;
  /** `{ "steps": [..] }`: the destination's own transformation (transformation.ts); null in an edit removes it. */
  transformation?: unknown;
}

export function stringList(
  value: unknown,
  pointer: string,
  errors: FieldError[],
  allowed?: readonly string[],
): string[] | undefined {
  if (value === undefined) return undefined;
  if (
    !Array.isArray(value) ||
    value.length === 0 ||
    value.length > 100 ||
    !value.every((v) => typeof v === 'string' && v.length > 0 && v.length <= 200)
  ) {
    errors.push({ pointer, message: 'must be a non-empty list of up to 100 non-empty strings' });
    return undefined;
  }
  if (allowed !== undefined) {
    const bad = value.find((v) => !allowed.includes(v as string));
    if (bad !== undefined) errors.push({ pointer, message: `"${bad as string}" is not one of ${allowed.join(', ')}` });
  }
  return [...new Set(value as string[])];
}

export function parseFilter(value: unknown, errors: FieldError[]): DestinationFilter | undefined {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/filter', message: 'must be an object' });
    return undefined;
  }
  const raw = value as Record<string, unknown>;
  for (const key of Object.keys(raw)) {
    if (!['types', 'canonical_names', 'sources'].includes(key))
      errors.push({ pointer: `/filter/${key}`, message: 'is not a filter (types, canonical_names, sources)' });
  }
  const filter: DestinationFilter = {};
  const types = stringList(raw.types, '/filter/types', errors, MESSAGE_TYPES);
  if (types !== undefined) filter.types = types as MessageType[];
  const names = stringList(raw.canonical_names, '/filter/canonical_names', errors);
  if (names !== undefined) filter.canonicalNames = names;
  const sources = stringList(raw.sources, '/filter/sources', errors);
  if (sources !== undefined) filter.sources = sources;
  return filter;
}

/** events-out §6: webhooks and NATS. */
export const DEFAULT_BATCH: BatchBounds = {
  defaultMessages: 1,
  maxMessages: 1000,
  defaultWaitMs: 0,
  maxWaitMs: 60_000,
};

export function parseBatch(
  value: unknown,
  errors: FieldError[],
  bounds: BatchBounds = DEFAULT_BATCH,
): DestinationBatch | undefined {
  if (value === undefined || value === null)
    return { maxMessages: bounds.defaultMessages, maxWaitMs: bounds.defaultWaitMs };
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/batch', message: 'must be an object' });
    return undefined;
  }
  const raw = value as Record<string, unknown>;
  for (const key of Object.keys(raw)) {
    if (!['max_messages', 'max_wait_ms'].includes(key))
      errors.push({ pointer: `/batch/${key}`, message: 'is not a batch setting (max_messages, max_wait_ms)' });
  }
  const max = raw.max_messages ?? bounds.defaultMessages;
  const wait = raw.max_wait_ms ?? bounds.defaultWaitMs;
  if (!Number.isInteger(max) || (max as number) < 1 || (max as number) > bounds.maxMessages)
    errors.push({ pointer: '/batch/max_messages', message: `must be a whole number from 1 to ${bounds.maxMessages}` });
  if (!Number.isInteger(wait) || (wait as number) < 0 || (wait as number) > bounds.maxWaitMs)
    errors.push({
      pointer: '/batch/max_wait_ms',
      message: `must be a whole number of milliseconds from 0 to ${bounds.maxWaitMs}`,
    });
  return { maxMessages: max as number, maxWaitMs: wait as number };
}

export function parseName(value: unknown, errors: FieldError[]): string | undefined {
  if (typeof value !== 'string' || value.trim() === '' || value.length > 200) {
    errors.push({ pointer: '/name', message: 'must be a non-empty string of at most 200 characters' });
    return undefined;
  }
  return value.trim();
}
