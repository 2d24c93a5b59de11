// HMAC-SHA256 (RFC 2104, FIPS 180-4) of short texts under one key, for `mask` `hash` (transformations.md §3).
// Node's createHmac costs a key schedule, a native object and its wrapper on every value; here the key's inner
// and outer states are computed once, and a value of a few dozen bytes costs two compressions. The result is the
// same as createHmac('sha256', key).update(text, 'utf8').digest('hex'), which the unit tests check.

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

const INITIAL = new Int32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);

/** The message schedule, shared: the compression runs to its end before anything else uses it. */
const W = new Int32Array(64);

/** One SHA-256 compression of the 64 bytes at `offset` of `block` into `state`. */
function compress(state: Int32Array, block: Uint8Array, offset: number): void {
  for (let i = 0; i < 16; i++) {
    const j = offset + i * 4;
    W[i] = (block[j]! << 24) | (block[j + 1]! << 16) | (block[j + 2]! << 8) | block[j + 3]!;
  }
  for (let i = 16; i < 64; i++) {
    const w15 = W[i - 15]!;
    const w2 = W[i - 2]!;
    const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
    const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
    W[i] = (W[i - 16]! + s0 + W[i - 7]! + s1) | 0;
  }
  let a = state[0]!;
  let b = state[1]!;
  let c = state[2]!;
  let d = state[3]!;
  let e = state[4]!;
  let f = state[5]!;
  let g = state[6]!;
  let h = state[7]!;
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i]! + W[i]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  state[0] = (state[0]! + a) | 0;
  state[1] = (state[1]! + b) | 0;
  state[2] = (state[2]! + c) | 0;
  state[3] = (state[3]! + d) | 0;
  state[4] = (state[4]! + e) | 0;
  state[5] = (state[5]! + f) | 0;
  state[6] = (state[6]! + g) | 0;
  state[7] = (state[7]! + h) | 0;
}

/** Pads the `length` bytes of a message already in `buffer` (after `prefix` bytes hashed before) and returns the blocks' bytes. */
function pad(buffer: Uint8Array, length: number, prefix: number): number {
  const total = (((length + 8) >> 6) + 1) << 6;
  buffer[length] = 0x80;
  buffer.fill(0, length + 1, total - 4);
  const bits = (length + prefix) * 8;
  buffer[total - 4] = bits >>> 24;
  buffer[total - 3] = (bits >>> 16) & 0xff;
  buffer[total - 2] = (bits >>> 8) & 0xff;
  buffer[total - 1] = bits & 0xff;
  return total;
}

/** The two hex digits of each byte, as character codes. */
const HEX = new Uint8Array(512);
for (let i = 0; i < 256; i++) {
  const digits = i.toString(16).padStart(2, '0');
  HEX[2 * i] = digits.charCodeAt(0);
  HEX[2 * i + 1] = digits.charCodeAt(1);
}
/** The digest's hex digits, made into a string at once (one flat string, no concatenations). */
const hexDigits = Buffer.alloc(64);
const encoder = new TextEncoder();
/** Messages up to this many bytes go through the scratch buffer; longer ones get their own. */
const SCRATCH_BYTES = 4096;
const scratch = new Uint8Array(SCRATCH_BYTES + 72);
/** The scratch buffer after a leading quote (a view made once: encodeInto writes from a view's start). */
const afterQuote = scratch.subarray(1);
const QUOTE = 0x22;
const outer = new Uint8Array(64);
const inner = new Int32Array(8);
const result = new Int32Array(8);

/** A key's HMAC-SHA256: the states after its inner and outer pads, so each message starts from them. */
export class HmacSha256 {
  private readonly innerState = new Int32Array(8);
  private readonly outerState = new Int32Array(8);

  constructor(key: Uint8Array) {
    const block = new Uint8Array(64);
    if (key.length > 64) block.set(sha256(key));
    else block.set(key);
    const padded = new Uint8Array(64);
    for (let i = 0; i < 64; i++) padded[i] = block[i]! ^ 0x36;
    this.innerState.set(INITIAL);
    compress(this.innerState, padded, 0);
    for (let i = 0; i < 64; i++) padded[i] = block[i]! ^ 0x5c;
    this.outerState.set(INITIAL);
    compress(this.outerState, padded, 0);
  }

  /**
   * Lowercase hex HMAC of the text's UTF-8 bytes; `quoted`: of the text between double quotes (a string's JSON text
   * when it needs no escape), without making that text.
   */
  hex(text: string, quoted = false): string {
    // UTF-8 takes at most 3 bytes per UTF-16 unit: a text that fits so is encoded into the scratch buffer.
    let buffer = scratch;
    let length: number;
    if (quoted && text.length * 3 + 2 <= SCRATCH_BYTES) {
      scratch[0] = QUOTE;
      length = encoder.encodeInto(text, afterQuote).written + 2;
      scratch[length - 1] = QUOTE;
    } else if (quoted) return this.hex(`"${text}"`);
    else if (text.length * 3 <= SCRATCH_BYTES) length = encoder.encodeInto(text, scratch).written;
    else {
      const bytes = encoder.encode(text);
      length = bytes.length;
      buffer = new Uint8Array(length + 72);
      buffer.set(bytes);
    }
    inner.set(this.innerState);
    const total = pad(buffer, length, 64);
    for (let offset = 0; offset < total; offset += 64) compress(inner, buffer, offset);
    for (let i = 0; i < 8; i++) {
      const word = inner[i]!;
      outer[i * 4] = word >>> 24;
      outer[i * 4 + 1] = (word >>> 16) & 0xff;
      outer[i * 4 + 2] = (word >>> 8) & 0xff;
      outer[i * 4 + 3] = word & 0xff;
    }
    pad(outer, 32, 64);
    result.set(this.outerState);
    compress(result, outer, 0);
    for (let i = 0; i < 32; i++) {
      const byte = (result[i >> 2]! >>> (24 - 8 * (i & 3))) & 0xff;
      hexDigits[2 * i] = HEX[2 * byte]!;
      hexDigits[2 * i + 1] = HEX[2 * byte + 1]!;
    }
    return hexDigits.toString('latin1', 0, 64);
  }
}

/** SHA-256 of some bytes (a key longer than a block is hashed first). */
function sha256(bytes: Uint8Array): Uint8Array {
  const buffer = new Uint8Array(bytes.length + 72);
  buffer.set(bytes);
  const state = new Int32Array(INITIAL);
  const total = pad(buffer, bytes.length, 0);
  for (let offset = 0; offset < total; offset += 64) compress(state, buffer, offset);
  const out = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    out[i * 4] = state[i]! >>> 24;
    out[i * 4 + 1] = (state[i]! >>> 16) & 0xff;
    out[i * 4 + 2] = (state[i]! >>> 8) & 0xff;
    out[i * 4 + 3] = state[i]! & 0xff;
  }
  return out;
}
