// API key format (contract §1): `inlet_ev_` / `inlet_rp_` / `inlet_pk_` + 43 base62 characters (≈256 random bits).
// Only the SHA-256 of the whole key and a short display prefix are ever stored.
import { createHash, timingSafeEqual } from 'node:crypto';
import { validationError, type FieldError } from './errors.js';
import { randomBase62 } from './ids.js';
import { parseRfc3339 } from './timestamps.js';

/** events: secret, writes events and identities; reports: reads traffic reports; browser: publishable, ingest only, from its allowed origins. */
export const KEY_KINDS = ['events', 'reports', 'browser'] as const;
export type KeyKind = (typeof KEY_KINDS)[number];

export const KEY_PREFIXES: Record<KeyKind, string> = {
  events: 'inlet_ev_',
  reports: 'inlet_rp_',
  browser: 'inlet_pk_',
};
const SECRET_LENGTH = 43;
const KEY_SHAPE = /^inlet_(ev|rp|pk)_[0-9A-Za-z]{32,128}$/;

/**
 * Allowed origins of a browser key (segment-compat "Keys"): exact `scheme://host[:port]`, or
 * `https://*.example.com` (one label). Returns the normalised list, or field errors.
 */
export function validateAllowedOrigins(
  value: unknown,
  pointer = '/allowed_origins',
): { ok: true; origins: string[] } | { ok: false; errors: FieldError[] } {
  if (!Array.isArray(value) || value.length === 0)
    return {
      ok: false,
      errors: [
        {
          pointer,
          message: 'a browser key needs a non-empty list of allowed origins, such as ["https://app.example.com"]',
        },
      ],
    };
  const errors: FieldError[] = [];
  const origins: string[] = [];
  value.forEach((raw, i) => {
    const at = `${pointer}/${i}`;
    if (typeof raw !== 'string' || raw.trim() === '')
      return errors.push({ pointer: at, message: 'must be an origin such as https://app.example.com' });
    const text = raw.trim();
    if (text === '*' || text === 'null')
      return errors.push({ pointer: at, message: `"${text}" would allow any page: list the origins of your app` });
    const match = /^(https?):\/\/(\*\.)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/.exec(text);
    if (match === null)
      return errors.push({
        pointer: at,
        message: `"${text}" is not an origin: scheme://host[:port], no path (https://*.example.com for one label of subdomains)`,
      });
    if (match[2] !== undefined && match[3]!.split('.').length < 2)
      return errors.push({ pointer: at, message: `"${text}": a wildcard needs a domain of at least two labels` });
    origins.push(text.toLowerCase());
  });
  return errors.length > 0 ? { ok: false, errors } : { ok: true, origins: [...new Set(origins)] };
}

/** Whether a request's `Origin` is one of a browser key's allowed origins. */
export function originAllowed(origin: string, allowed: readonly string[]): boolean {
  const sent = origin.toLowerCase();
  for (const entry of allowed) {
    if (entry === sent) return true;
    const star = entry.indexOf('://*.');
    if (star < 0) continue;
    const scheme = entry.slice(0, star + 3);
    const suffix = entry.slice(star + 4); // ".example.com[:port]"
    if (!sent.startsWith(scheme) || !sent.endsWith(suffix)) continue;
    const label = sent.slice(scheme.length, sent.length - suffix.length);
    if (/^[a-z0-9-]+$/.test(label)) return true;
  }
  return false;
}

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
  if (parsed === undefined)
    throw validationError([{ pointer, message: 'must be an RFC 3339 timestamp with an offset' }]);
  if (Date.parse(parsed) <= Date.now()) throw validationError([{ pointer, message: 'must be in the future' }]);
  return parsed;
}

/**
 * The credential of an `Authorization: Bearer <token>` header (scheme case-insensitive, one token,
 * trailing spaces allowed), or undefined for any other header. One reading for API keys and the
 * admin token alike.
 */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  return /^Bearer[ ]+(\S+)\s*$/i.exec(header)?.[1];
}
