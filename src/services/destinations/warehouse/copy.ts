// A COPY's rows in PostgreSQL's binary format (warehouses.md §1), written into one buffer: each value as the
// server keeps it (a uuid's 16 bytes, a time's microseconds, a text's bytes), with no escaping, no tab-joined
// lines and no text of times and numbers to make. The server no longer splits lines nor parses uuids and times,
// but (15 at least) keeps up to 1,000 rows of a binary COPY before writing them, where a text COPY's 64 kB of
// lines flushes sooner, and those rows' slots cost it about what the parsing saved; split COPYs cost the
// client more than they saved the server. Times are converted exactly as the server's text input would read
// them: RFC 3339, fractions past the microsecond rounded half to even.
import { daysInMonth, isCivilDateTime, twoDigits } from '../../../domain/timestamps.js';
const EMPTY = Buffer.alloc(0);
/** The format's signature, its flags (none) and its header extension's length (none). */
const HEADER = Buffer.from([0x50, 0x47, 0x43, 0x4f, 0x50, 0x59, 0x0a, 0xff, 0x0d, 0x0a, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]);
const TWO_32 = 4_294_967_296;
/** Texts up to this long are written byte by byte when ASCII (see `utf8`). */
const SHORT = 128;

/**
 * Buffers of COPYs that finished, for the next ones (loads of several destinations may run at once: each takes
 * its own). A COPY of a big load is megabytes; made afresh each time, that memory counts against V8's external
 * memory and brings on full collections, and its pages are faulted in again.
 */
const spares: Buffer[] = [];
const SPARES_KEPT = 2;
const SPARE_BYTES = 16 * 1024 * 1024;

const HEX = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) {
  HEX['0123456789abcdef'.charCodeAt(i)] = i;
  HEX['0123456789ABCDEF'.charCodeAt(i)] = i;
}

/** Where each byte's two hex digits start in a uuid's canonical text. */
const UUID_PAIRS = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/** Days from 1970-01-01 to a date of the proleptic Gregorian calendar (any year). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const dayOfYear = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  return (
    era * 146_097 + yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear - 719_468
  );
}

/** Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01. */
const PG_EPOCH_DAYS = daysFromCivil(2000, 1, 1);

const TIME = /^([+-]\d{6}|\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):?(\d{2}))$/;

/** rint: to the nearest integer, a half to the even one (as the server rounds a fraction of a second). */
function rint(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** A time: whole seconds and microseconds since PostgreSQL's epoch (2000-01-01 UTC). */
export interface Instant {
  seconds: number;
  micros: number;
}

/**
 * An RFC 3339 time (or an ISO time of `toISOString`, extended years too) as seconds and microseconds since
 * 2000-01-01 UTC; undefined when it is not one, or names no real date or time (February 30th, hour 24).
 */
export function parseTime(text: string): Instant | undefined {
  const m = TIME.exec(text);
  if (m === null) return undefined;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4]);
  const minute = Number(m[5]);
  const second = Number(m[6]);
  if (!isCivilDateTime(year, month, day, hour, minute, second)) return undefined;
  let offset = 0;
  if (m[8] !== undefined) {
    const hours = Number(m[9]);
    const minutes = Number(m[10]);
    if (hours > 15 || minutes > 59) return undefined; // the server's limit on an offset
    offset = (m[8] === '-' ? -1 : 1) * (hours * 3600 + minutes * 60);
  }
  const micros = m[7] === undefined ? 0 : rint(Number(`0${m[7]}`) * 1e6);
  const seconds = (daysFromCivil(year, month, day) - PG_EPOCH_DAYS) * 86_400 + hour * 3600 + minute * 60 + second;
  return { seconds: seconds - offset, micros };
}

/** The last date isoParts met (`year * 10000 + month * 100 + day`) and its days since 2000-01-01. */
let lastDate = -1;
let lastDays = 0;
/** The milliseconds of the time isoParts last read. */
let isoMillis = 0;

/**
 * `YYYY-MM-DDTHH:MM:SS.mmmZ` (the text of toISOString, as times are read) read from its digits: its seconds
 * since 2000-01-01 UTC (its milliseconds in `isoMillis`), or undefined when it is not of that form or names no
 * real date or time. Far cheaper than the regular expression of parseTime.
 */
function isoParts(text: string): number | undefined {
  if (
    text.charCodeAt(4) !== 45 ||
    text.charCodeAt(7) !== 45 ||
    text.charCodeAt(10) !== 84 ||
    text.charCodeAt(13) !== 58 ||
    text.charCodeAt(16) !== 58 ||
    text.charCodeAt(19) !== 46 ||
    text.charCodeAt(23) !== 90
  )
    return undefined;
  // twoDigits gives NaN for a character that is not a digit, which every comparison below refuses.
  const year = twoDigits(text, 0) * 100 + twoDigits(text, 2);
  const month = twoDigits(text, 5);
  const day = twoDigits(text, 8);
  const hour = twoDigits(text, 11);
  const minute = twoDigits(text, 14);
  const second = twoDigits(text, 17);
  const last = text.charCodeAt(22) - 48;
  const millis = last >= 0 && last <= 9 ? twoDigits(text, 20) * 10 + last : NaN;
  if (!(year >= 0 && hour <= 23 && minute <= 59 && second <= 59 && millis >= 0)) return undefined;
  const date = year * 10_000 + month * 100 + day;
  if (date !== lastDate) {
    if (!(month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month))) return undefined;
    lastDays = daysFromCivil(year, month, day) - PG_EPOCH_DAYS;
    lastDate = date;
  }
  isoMillis = millis;
  return lastDays * 86_400 + hour * 3600 + minute * 60 + second;
}

/** The rows of one COPY in the binary format, written into one buffer. */
export class CopyRows {
  private bytes = spares.pop() ?? EMPTY;
  private length = 0;
  private rowCount = 0;

  /** `rows`: how many rows are coming (the first row sizes the buffer for as many). */
  constructor(private readonly rows: number) {}

  /** Room for `bytes` more. */
  private room(bytes: number): void {
    if (this.length + bytes <= this.bytes.length) return;
    const size = this.length <= HEADER.length ? Math.ceil((bytes + 64) * this.rows * 1.25) : this.bytes.length * 2;
    const grown = Buffer.allocUnsafe(Math.max(size, this.length + bytes + HEADER.length));
    this.bytes.copy(grown, 0, 0, this.length);
    this.bytes = grown;
  }

  /** Starts a row of `fields` fields (the header first, before the first row). */
  row(fields: number): void {
    if (this.length === 0) {
      this.room(HEADER.length + 2);
      this.length = HEADER.copy(this.bytes, 0);
    } else this.room(2);
    this.length = this.bytes.writeInt16BE(fields, this.length);
    this.rowCount++;
  }

  nul(): void {
    this.room(4);
    this.int32(this.length, -1);
    this.length += 4;
  }

  /** A field's length, at `at`. */
  private int32(at: number, value: number): void {
    const bytes = this.bytes;
    bytes[at] = value >>> 24;
    bytes[at + 1] = (value >>> 16) & 0xff;
    bytes[at + 2] = (value >>> 8) & 0xff;
    bytes[at + 3] = value & 0xff;
  }

  /**
   * Writes `value` as UTF-8 at `at` (room made for it), giving the bytes written: a short ASCII text byte by byte
   * (a call into Buffer.write per field cost more than the whole field), anything else by Buffer.write.
   */
  private utf8(value: string, at: number): number {
    const n = value.length;
    if (n > SHORT) return this.bytes.write(value, at, 'utf8');
    const bytes = this.bytes;
    for (let i = 0; i < n; i++) {
      const c = value.charCodeAt(i);
      if (c >= 0x80) return i + this.bytes.write(value.slice(i), at + i, 'utf8');
      bytes[at + i] = c;
    }
    return n;
  }

  /** A text (or varchar) value: its UTF-8 bytes. */
  text(value: string): void {
    this.room(4 + value.length * 3); // at most 3 bytes per UTF-16 unit
    const at = this.length + 4;
    const written = this.utf8(value, at);
    this.int32(this.length, written);
    this.length = at + written;
  }

  textOrNull(value: string | null | undefined): void {
    if (value == null) this.nul();
    else this.text(value);
  }

  /** A jsonb value from its JSON text: the format's version (1), then the text. */
  jsonb(json: string): void {
    this.room(5 + json.length * 3);
    const at = this.length + 5;
    const written = this.utf8(json, at);
    this.int32(this.length, written + 1);
    this.bytes[at - 1] = 1;
    this.length = at + written;
  }

  jsonbOrNull(json: string | null | undefined): void {
    if (json == null) this.nul();
    else this.jsonb(json);
  }

  /** A uuid from its text: 32 hex digits, hyphens skipped (the canonical 8-4-4-4-12 form read at fixed places). */
  uuid(value: string): void {
    this.room(20);
    const bytes = this.bytes;
    let at = this.length + 4;
    const end = at + 16;
    if (
      value.length === 36 &&
      value.charCodeAt(8) === 45 &&
      value.charCodeAt(13) === 45 &&
      value.charCodeAt(18) === 45 &&
      value.charCodeAt(23) === 45
    ) {
      let k = 0;
      for (; k < 16; k++) {
        const i = UUID_PAIRS[k]!;
        const c1 = value.charCodeAt(i);
        const c2 = value.charCodeAt(i + 1);
        const high = HEX[c1 & 0x7f]!;
        const low = HEX[c2 & 0x7f]!;
        if (((c1 | c2) & ~0x7f) !== 0 || (high | low) < 0) break;
        bytes[at + k] = high * 16 + low;
      }
      if (k === 16) {
        bytes.writeInt32BE(16, this.length);
        this.length = end;
        return;
      }
    }
    let high = -1;
    for (let i = 0; i < value.length; i++) {
      const c = value.charCodeAt(i);
      if (c === 45) continue;
      const v = c < 128 ? HEX[c]! : -1;
      if (v < 0 || at === end) throw new Error(`invalid input syntax for type uuid: "${value}"`);
      if (high < 0) high = v;
      else {
        bytes[at++] = high * 16 + v;
        high = -1;
      }
    }
    if (at !== end) throw new Error(`invalid input syntax for type uuid: "${value}"`);
    bytes.writeInt32BE(16, this.length);
    this.length = end;
  }

  /** A 64-bit integer (a whole number: beyond 2^53 it is the double's exact value, as its text would give). */
  int8(value: number): void {
    this.room(12);
    this.length = this.bytes.writeInt32BE(8, this.length);
    this.writeInt64(value === 0 ? 0 : value);
  }

  private writeInt64(value: number): void {
    if (Number.isSafeInteger(value)) {
      const high = Math.floor(value / TWO_32);
      this.int32(this.length, high);
      this.int32(this.length + 4, value - high * TWO_32);
      this.length += 8;
    } else this.length = this.bytes.writeBigInt64BE(BigInt(value), this.length);
  }

  float8(value: number): void {
    this.room(12);
    this.length = this.bytes.writeInt32BE(8, this.length);
    this.length = this.bytes.writeDoubleBE(value === 0 ? 0 : value, this.length);
  }

  bool(value: boolean): void {
    this.room(5);
    this.length = this.bytes.writeInt32BE(1, this.length);
    this.bytes[this.length++] = value ? 1 : 0;
  }

  /** A timestamptz from its text (RFC 3339; ISO text as toISOString makes it, read first without a parse). */
  time(text: string): void {
    let seconds: number;
    let micros: number;
    const fast = text.length === 24 ? isoParts(text) : undefined;
    if (fast !== undefined) {
      seconds = fast;
      micros = isoMillis * 1000;
    } else {
      const parsed = parseTime(text);
      if (parsed === undefined) throw new Error(`invalid input syntax for type timestamp with time zone: "${text}"`);
      ({ seconds, micros } = parsed);
    }
    this.room(12);
    this.int32(this.length, 8);
    this.length += 4;
    // Exact as a double up to 2^53 µs (~285 years either side of 2000).
    if (Math.abs(seconds) < 9e9) this.writeInt64(seconds * 1e6 + micros);
    else this.length = this.bytes.writeBigInt64BE(BigInt(seconds) * 1_000_000n + BigInt(micros), this.length);
  }

  timeOrNull(text: string | null | undefined): void {
    if (text == null) this.nul();
    else this.time(text);
  }

  /** Writes the bytes `start` to `end` of other rows (fields already encoded: not encoded again). */
  copy(from: CopyRows, start: number, end: number): void {
    this.room(end - start);
    this.length += from.bytes.copy(this.bytes, this.length, start, end);
  }

  /** Bytes written so far (where the next write starts). */
  get size(): number {
    return this.length;
  }

  get empty(): boolean {
    return this.rowCount === 0;
  }

  /** The whole COPY: the rows and the trailer. */
  finish(): Buffer {
    this.room(2);
    return this.bytes.subarray(0, this.bytes.writeInt16BE(-1, this.length));
  }

  /**
   * Gives the buffer back for another COPY: only once this one completed, when the server has read every byte
   * (a COPY that failed may still be writing it to the socket, so its buffer is dropped), and no other rows
   * copy from it any more.
   */
  done(): void {
    if (this.bytes.length <= SPARE_BYTES && spares.length < SPARES_KEPT) spares.push(this.bytes);
    this.bytes = EMPTY;
    this.length = 0;
    this.rowCount = 0;
  }
}
