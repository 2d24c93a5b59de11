// Identifiers: UUIDv7 for events (time-ordered, RFC 9562), prefixed random ids for everything else.
import { randomBytes, randomFillSync } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` characters drawn uniformly from base62 (rejection sampling: no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const bytes = randomBytes(length * 2);
    for (const byte of bytes) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export function prefixedId(prefix: string): string {
  return `${prefix}_${randomBase62(20)}`;
}

let lastMillis = 0;
let sequence = 0;
const pool = Buffer.alloc(16 * 256);
let poolOffset = pool.length;
/** Each byte's two hex digits. */
const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));
/** The id's first two groups, the same for every id of one millisecond: made once per millisecond. */
let prefixMillis = -1;
let prefix = '';

/**
 * UUIDv7 with a 12-bit counter in rand_a (RFC 9562 §6.2, method 1), so ids made in the same
 * millisecond by this process still sort in creation order. The hex digits come from a table and the
 * millisecond's part is made once: the ingest path makes one id per event.
 */
export function uuidv7(now = Date.now()): string {
  if (now > lastMillis) {
    lastMillis = now;
    sequence = 0;
  } else {
    sequence++;
    if (sequence > 0xfff) {
      lastMillis++;
      sequence = 0;
    }
  }
  if (poolOffset + 10 > pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const r = poolOffset;
  poolOffset += 10;
  if (prefixMillis !== lastMillis) {
    prefixMillis = lastMillis;
    const hex = lastMillis.toString(16).padStart(12, '0');
    prefix = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-`;
  }
  return (
    prefix +
    HEX[0x70 | (sequence >> 8)]! +
    HEX[sequence & 0xff]! +
    '-' +
    HEX[(pool[r]! & 0x3f) | 0x80]! +
    HEX[pool[r + 1]!]! +
    '-' +
    HEX[pool[r + 2]!]! +
    HEX[pool[r + 3]!]! +
    HEX[pool[r + 4]!]! +
    HEX[pool[r + 5]!]! +
    HEX[pool[r + 6]!]! +
    HEX[pool[r + 7]!]!
  );
}
