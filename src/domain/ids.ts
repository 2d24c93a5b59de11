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

/**
 * UUIDv7 with a 12-bit counter in rand_a (RFC 9562 §6.2, method 1), so ids made in the same
 * millisecond by this process still sort in creation order.
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
  const rand = pool.subarray(poolOffset, poolOffset + 10);
  poolOffset += 10;
  const ms = lastMillis;
  const hex = ms.toString(16).padStart(12, '0');
  const randA = (0x7000 | sequence).toString(16);
  const variant = ((rand[0]! & 0x3f) | 0x80).toString(16).padStart(2, '0');
  const tail = rand.subarray(1, 8).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${randA}-${variant}${tail.slice(0, 2)}-${tail.slice(2, 14)}`;
}
