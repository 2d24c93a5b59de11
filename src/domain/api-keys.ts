// API key format (contract §1): `inlet_ev_` / `inlet_rp_` + 43 base62 characters (≈256 random bits).
// Only the SHA-256 of the whole key and a short display prefix are ever stored.
import { createHash, timingSafeEqual } from 'node:crypto';
import { validationError } from './errors.js';
import { randomBase62 } from './ids.js';
import { parseRfc3339 } from './timestamps.js';

export type KeyKind = 'events' | 'reports';

export const KEY_PREFIXES: Record<KeyKind, string> = { events: 'inlet_ev_', reports: 'inlet_rp_' };
const SECRET_LENGTH = 43;
const KEY_SHAPE = /^inlet_(ev|rp)_[0-9A-Za-z]{32,128}$/;

export interface GeneratedKey {
  key: string;
  hash: string;
  prefix: string;
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function generateKey(kind: KeyKind): GeneratedKey {
  const key = KEY_PREFIXES[kind] + randomBase62(SECRET_LENGTH);
  return { key, hash: hashKey(key), prefix: key.slice(0, KEY_PREFIXES[kind].length + 6) };
}

/** Cheap shape check before any lookup: anything else is certainly not one of our keys. */
export function looksLikeKey(value: string): boolean {
  return KEY_SHAPE.test(value);
}

/** Constant-time equality of two hex digests or secrets. */
export function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  if (left.length !== right.length) {
    // Compare against itself so the time taken does not depend on where the inputs differ.
    timingSafeEqual(left, left);
    return false;
  }
  return timingSafeEqual(left, right);
}

/** Validates an optional key expiry: RFC 3339, in the future. Returns the UTC form. */
export function parseExpiry(value: string | null | undefined, pointer = '/expires_at'): string | null {
  if (value === undefined || value === null) return null;
  const parsed = parseRfc3339(value);
  if (parsed === undefined) throw validationError([{ pointer, message: 'must be an RFC 3339 timestamp with an offset' }]);
  if (Date.parse(parsed) <= Date.now()) throw validationError([{ pointer, message: 'must be in the future' }]);
  return parsed;
}
