// Idempotency keys of SQLite events, kept off the write path's random B-tree inserts (issue 11; docs/design.md,
// "Idempotency keys on SQLite"), and by the same machinery the events' subjects (kind `subjects`, migration 802:
// `event_subjects`, `event_subjects_recent`, `event_subjects_gone`, `subjects_merged_through`; every event has
// one; reads and erasures by subject look positions up with subjectPositions; docs/design.md, "Subjects on
// SQLite"). What follows says "key" for both.
//
// The promise (interface.md): an event with an external_id is stored once per product and source, forever (as
// long as the event itself is kept). A UNIQUE index on (product_id, source, external_id) kept it, at a price
// that grows with the table: the ids SDKs send are random uuids, so every insert lands on a different leaf of a
// ~1 GB index at 10 M events, and every commit wrote (and the checkpoint copied) a 4 KiB page per event:
// 56 of the 96 µs per event of the write path at 10 M events (bench/runs/2026-11-write-path.md, "Write path at 10 M events").
//
// Instead, a key is a 53-bit hash of (product_id, source, external_id) under a per-database random seed, and
// lives in one of three places:
// - the *tail*: an in-memory map hash → positions of the events stored since the last merge;
// - the *merging* maps: the previous tail (one generation, or several if it filled while a merge ran), while it is
//   being merged;
// - on disk, in two levels of (h, position) WITHOUT ROWID tables of ~21 bytes an entry, written only by merges:
//   `event_keys_recent`, which each merge writes the tail's keys into, sorted by hash and range by range (each of
//   its leaves written about once per merge for the whole tail instead of once per event), and `event_keys`, the
//   big level, which the recent one moves into, in hash order, once it holds about sqrt(2 × big × tail) entries
//   (moveThreshold), a slice of the hash range after each merge (moveSlices): a merge straight into the big table
//   rewrote nearly all of it each time (at 10 M events, ~50,000 pages per merge), while now each leaf of the big
//   table is written once per several merges and a merge rewrites only the small level (docs/design.md,
//   "Levels").
// Every event with an external_id looks in all four places (two map lookups and a B-tree probe per level, no
// write); each
// position found is read back and its (product_id, source, external_id) compared, so a hash collision costs a
// row read, never a lost or a false duplicate. `event_keys_state.merged_through` says which events are in the
// tables: the tail is rebuilt from the rows after it when the process starts, so a crash loses nothing (the
// events themselves are the durable record; merges need no fsync of their own). A move takes a range of the
// recent level out and puts it into the big one in the same transaction, so an entry is in one level at a time.
//
// Deleted events (erasure, retention) leave with their keys, in sorted passes: a trigger notes each deleted row's
// position and hash in `event_keys_gone` (appended: no random page per deleted row; the writer stores each row's
// hashes in it, `key_hash` and `subject_hash`, and rows from before migration 804 have theirs in
// `event_keys_by_position`), and a *sweep* takes the notes of merged positions (up to `merged_through`; later
// ones wait, since their keys may still be merged) and deletes those keys from both levels bucket by bucket of
// the hash range, like a merge. A sweep follows every
// merge, and runs on its own when many deletions wait (SWEEP_MIN, looked at every SWEEP_CHECK_MS). Until then a
// key whose row is gone is harmless: its position is read back, finds no row and matches nothing.
//
// One process writes events to a SQLite file (docs/scaling-out.md), and the tail lives in it; a write transaction
// first takes in the keys of rows another connection stored (catchUp), so a second writer cannot double an id. The
// hash is not cryptographic; the random seed keeps anyone without the database from choosing ids that collide,
// and a collision only costs a row read.
import { performance } from 'node:perf_hooks';
import type BetterSqlite3 from 'better-sqlite3';
import { SQLITE_EXTERNAL_ID_TEXT, SQLITE_PRODUCT_TEXT, SQLITE_SOURCE_TEXT } from '../event-columns.js';
import type { EventKeyStats } from '../types.js';
import { withoutCommitSync } from './wal-sync.js';

/** Keys per tail before it is merged into `event_keys`: more means fewer passes over the table, more memory
 *  (~28 bytes a key in memory). At 10 M events a merge writes each of ~45,000 leaves once per 250,000 events. */
export const TAIL_KEYS = 250_000;

/** Every hash is below this (keyHash's 53 bits): the range that merges cut into buckets and moves into slices. */
export const HASH_RANGE = 2 ** 53;

/** cyrb53 (a public-domain 53-bit string hash): two 32-bit multiply-xorshift lanes over UTF-16 code units. */
export function keyHash(seed: number, productId: string, source: string, externalId: string): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  const add = (text: string) => {
    for (let i = 0; i < text.length; i++) {
      const ch = text.charCodeAt(i);
      h1 = Math.imul(h1 ^ ch, 2654435761);
      h2 = Math.imul(h2 ^ ch, 1597334677);
    }
  };
  add(productId);
  h1 = Math.imul(h1, 2654435761);
  h2 = Math.imul(h2 ^ 1, 1597334677);
  add(source);
  h1 = Math.imul(h1, 2654435761);
  h2 = Math.imul(h2 ^ 2, 1597334677);
  add(externalId);
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/** Registers `inlet_event_key(seed, product_id, source, external_id)` on a connection: the migration that
 *  introduced event_keys computes the keys of the events stored before it with it. */
export function registerEventKeyFunction(raw: BetterSqlite3.Database): void {
  raw.function(
    'inlet_event_key',
    { deterministic: true, varargs: false },
    (seed: unknown, productId: unknown, source: unknown, externalId: unknown) =>
      externalId === null ? null : keyHash(Number(seed), String(productId), String(source), String(externalId)),
  );
}

/**
 * The keys and subjects of every event after `merged_through` (`subjects_merged_through`), written sorted into the
 * big level, and both moved to the last event: for bulk loads that bypass the writer (the bench's prefill). Rows
 * that carry their hashes (`key_hash`, `subject_hash`, as the writer stores them) go straight in; rows without
 * them go through the by-position table first, where a delete's trigger finds their hash. Not while a server
 * writes the file.
 */
export function mergeAllEventKeys(raw: BetterSqlite3.Database): void {
  registerEventKeyFunction(raw);
  const merge = raw.transaction(() => {
    const seed = raw.prepare('SELECT seed FROM event_keys_state WHERE id = 1').pluck().get() as number;
    for (const t of Object.values(KINDS)) {
      const merged = raw.prepare(`SELECT ${t.merged} FROM event_keys_state WHERE id = 1`).pluck().get() as number;
      raw
        .prepare(
          `INSERT OR IGNORE INTO ${t.byPosition} (position, h) SELECT position, inlet_event_key(?, ${t.hashed.join(', ')}) FROM events WHERE position > ? AND ${t.rowHash} IS NULL AND ${t.where} ORDER BY position`,
        )
        .run(seed, merged);
      raw
        .prepare(
          `INSERT OR IGNORE INTO ${t.table} (h, position)
             SELECT h, position FROM (SELECT h, position FROM ${t.byPosition} WHERE position > @merged
                                      UNION ALL SELECT ${t.rowHash}, position FROM events WHERE position > @merged AND ${t.rowHash} IS NOT NULL)
             ORDER BY h, position`,
        )
        .run({ merged });
      raw
        .prepare(
          `UPDATE event_keys_state SET ${t.merged} = (SELECT coalesce(max(position), 0) FROM events) WHERE id = 1`,
        )
        .run();
    }
  });
  // IMMEDIATE: a deferred transaction that reads first cannot take the write lock once another connection has
  // committed (SQLITE_BUSY at once, whatever the busy timeout); this one waits for the lock instead.
  merge.immediate();
}

/** (h, position) pairs interleaved in `log`, the first `count` of them: what hashBuckets sorts. */
interface PairLog {
  readonly log: Float64Array;
  readonly count: number;
}

/**
 * Keys of one generation (a part of the tail, or of the tail being merged), with no object per key: the
 * (h, position) pairs in position order (the log, what a merge writes), and an open-addressing table on a typed
 * array from each distinct h to its newest pair (the table keeps no h of its own: a slot's h is its newest pair's,
 * in the log), each pair linked to the previous one with the same h. A subject's events all share one h
 * (thousands, for a busy subject), so a lookup or an insert never walks more than the distinct hashes that share
 * its slot, and a lookup walks only its own pairs. ~28 bytes a key (250,000 keys are ~7 MB). Positions start at 1,
 * and chain links at 1 (0: none).
 *
 * It holds at most `capacity` pairs (a tail's worth), its arrays grown by doubling up to the size that many need. A
 * tail that fills while a merge runs goes on in a new generation instead of doubling its arrays past that: a tail
 * that grew during a long move ended in arrays sized for up to four times that (docs/design.md, "the tail in
 * generations of a tail's size").
 */
class Generation implements PairLog {
  count = 0;
  private distinct = 0;
  /** Per slot: 1 + the log index of the newest pair with that h (0: an empty slot). */
  private heads = new Int32Array(1024);
  /** Per pair: 1 + the log index of the previous pair with the same h (0: none). */
  private prev = new Int32Array(512);
  log = new Float64Array(1024);

  constructor(
    public through: number,
    readonly capacity: number,
  ) {}

  get full(): boolean {
    return this.count >= this.capacity;
  }

  /** Adds a pair; the generation must not be full. */
  add(h: number, position: number): void {
    if ((this.distinct + 1) * 2 > this.heads.length) this.grow();
    if (this.count + 1 > this.prev.length) {
      const pairs = Math.min(this.prev.length * 2, this.capacity);
      const log = new Float64Array(2 * pairs);
      log.set(this.log);
      this.log = log;
      const prev = new Int32Array(pairs);
      prev.set(this.prev);
      this.prev = prev;
    }
    const slot = this.slotOf(h);
    if (this.heads[slot] === 0) this.distinct++;
    this.prev[this.count] = this.heads[slot]!;
    this.heads[slot] = this.count + 1;
    this.log[2 * this.count] = h;
    this.log[2 * this.count + 1] = position;
    this.count++;
    if (position > this.through) this.through = position;
  }

  /** The positions under `h`, newest first, pushed onto `into` (each position is in a generation once). */
  positionsOf(h: number, into: number[]): void {
    for (let entry = this.heads[this.slotOf(h)]!; entry !== 0; entry = this.prev[entry - 1]!)
      into.push(this.log[2 * (entry - 1) + 1]!);
  }

  /** The slot of `h`, or the empty slot where it would go. */
  private slotOf(h: number): number {
    const mask = this.heads.length - 1;
    let slot = (h % 4294967296) & mask;
    for (let head = this.heads[slot]!; head !== 0 && this.log[2 * (head - 1)] !== h; head = this.heads[slot]!)
      slot = (slot + 1) & mask;
    return slot;
  }

  private grow(): void {
    const heads = this.heads;
    this.heads = new Int32Array(heads.length * 2);
    for (const head of heads) if (head !== 0) this.heads[this.slotOf(this.log[2 * (head - 1)]!)] = head;
  }
}

/** Bits per key and probes of a key filter: 10 and 7 make ~1 % of new keys probe event_keys anyway. */
const FILTER_BITS_PER_KEY = 10;
const FILTER_PROBES = 7;
/** Hashes a filter's build reads from event_keys per turn of the connection's lock. */
const FILTER_SCAN_CHUNK = 10_000;

/**
 * A Bloom filter of 53-bit key hashes (~1.25 bytes a key): "certainly not in event_keys" for a key never stored,
 * so the writer skips the table's B-tree probe (a random leaf of a ~250 MB table at 10 M events: 9 µs of the
 * write path's ~40 per event, bench/runs/2026-11-write-path.md). It grows by adding a part a quarter of its size when the newest is
 * full; a lookup asks every part. Deleted keys stay in it (a false positive costs only the probe it saved).
 */
class HashFilter {
  private parts: Array<{ bits: Int32Array; size: number; capacity: number; count: number }> = [];

  constructor(expected: number) {
    this.addPart(Math.max(expected, 65_536));
  }

  add(h: number): void {
    let part = this.parts[this.parts.length - 1]!;
    if (part.count >= part.capacity) {
      // A quarter of what the filter holds (at least 1 M keys): a table that grows past its build's size adds
      // 1.25 bytes a key as it goes, not a part as large as the whole filter again.
      this.addPart(Math.max(1_000_000, Math.ceil(this.parts.reduce((sum, p) => sum + p.capacity, 0) / 4)));
      part = this.parts[this.parts.length - 1]!;
    }
    part.count++;
    const a = (h % 4294967296) | 0;
    const b = HashFilter.step(h, a);
    for (let i = 0; i < FILTER_PROBES; i++) {
      const bit = ((a + Math.imul(i, b)) >>> 0) % part.size;
      part.bits[bit >>> 5]! |= 1 << (bit & 31);
    }
  }

  has(h: number): boolean {
    const a = (h % 4294967296) | 0;
    const b = HashFilter.step(h, a);
    for (const part of this.parts) {
      let all = true;
      for (let i = 0; i < FILTER_PROBES && all; i++) {
        const bit = ((a + Math.imul(i, b)) >>> 0) % part.size;
        all = (part.bits[bit >>> 5]! & (1 << (bit & 31))) !== 0;
      }
      if (all) return true;
    }
    return false;
  }

  get bytes(): number {
    return this.parts.reduce((sum, part) => sum + part.bits.byteLength, 0);
  }

  /** The second probe stride (odd), from the hash's high 21 bits mixed with its low 32 (double hashing). */
  private static step(h: number, low: number): number {
    return Math.imul(Math.floor(h / 4294967296) ^ (low >>> 15), 0x9e3779b1) | 1;
  }

  /** A part of exactly `capacity` × FILTER_BITS_PER_KEY bits (a probe is taken modulo the size, not masked: a
   *  power of two would round 11 M keys up from 14 to 34 MB), at most 2^32 bits. */
  private addPart(capacity: number): void {
    const words = Math.min(2 ** 27, Math.ceil((capacity * FILTER_BITS_PER_KEY) / 32));
    this.parts.push({ bits: new Int32Array(words), size: words * 32, capacity, count: 0 });
  }
}

/**
 * What an index holds. `keys`: the idempotency key (product_id, source, external_id) of each event that has an
 * external_id. `subjects`: (product_id, subject_id) of every event, what reads and erasures by subject look up
 * instead of an index on events (migration 802; docs/design.md, "Subjects on SQLite"). The same machinery, each
 * with its own tables, tail and merges.
 */
export type HashIndexKind = 'keys' | 'subjects';

interface KindTables {
  /** The big level. */
  table: string;
  /** The recent level, which merges write into and which moves into the big one (migration 803). */
  recent: string;
  /** Hashes by position of the rows stored before migration 804 (or by bulk loads), which carry none. */
  byPosition: string;
  /** The column of events with the row's hash (migration 804). */
  rowHash: string;
  gone: string;
  /** The column of event_keys_state that says how far this index is merged. */
  merged: string;
  /** The three strings its hash covers, as SQL over events (a subject's middle one is empty: subjectHash). */
  hashed: readonly [string, string, string];
  /** Which events have an entry. */
  where: string;
}

const KINDS: Record<HashIndexKind, KindTables> = {
  keys: {
    table: 'event_keys',
    recent: 'event_keys_recent',
    byPosition: 'event_keys_by_position',
    rowHash: 'key_hash',
    gone: 'event_keys_gone',
    merged: 'merged_through',
    hashed: [SQLITE_PRODUCT_TEXT, SQLITE_SOURCE_TEXT, SQLITE_EXTERNAL_ID_TEXT],
    where: 'external_id IS NOT NULL',
  },
  subjects: {
    table: 'event_subjects',
    recent: 'event_subjects_recent',
    byPosition: 'event_subjects_by_position',
    rowHash: 'subject_hash',
    gone: 'event_subjects_gone',
    merged: 'subjects_merged_through',
    hashed: [SQLITE_PRODUCT_TEXT, "''", 'subject_id'],
    where: '1',
  },
};

/** The hash of a subject: (product_id, subject_id), whatever its subject_type, so that a read by subject id
 *  without a type finds it too (the rows read back are compared on every column asked for). */
export function subjectHash(
  hash: (seed: number, a: string, b: string, c: string) => number,
  seed: number,
  productId: string,
  subjectId: string,
): number {
  return hash(seed, productId, '', subjectId);
}

/** Exclusive bounds and an order for subjectPositions; no limit: every position. */
export interface PositionRange {
  after?: number;
  before?: number;
  order: 'asc' | 'desc';
  limit?: number;
}

export interface EventKeysOptions {
  /** What the index holds (default `keys`). */
  kind?: HashIndexKind;
  /** Keys per tail before a merge (default TAIL_KEYS). */
  tailKeys?: number;
  /** Kind `keys`: keep a Bloom filter of every key, so that a new key skips the table's probe (default true). */
  filter?: boolean;
  /** Runs `work` where no other statement of the connection is in a transaction (Kysely's connection lock). */
  exclusive: <T>(work: () => T) => Promise<T>;
  /** The connection's synchronous setting, restored after each merge transaction (which runs with NORMAL). */
  synchronous: 'FULL' | 'NORMAL';
  /** A merge that failed (it is tried again with the next full tail; its keys stay in memory meanwhile). */
  onMergeError?: (error: unknown) => void;
  /**
   * Awaited before each merge or sweep transaction (the checkpoint thread's roomInWal): like erasure and retention
   * batches, they wait while the WAL is due to start over, so their pages do not end up copied on the event loop.
   */
  roomInWal?: (maxMs: number) => Promise<void>;
  /** Deleted rows' keys that start a sweep on their own (default SWEEP_MIN). */
  sweepMin?: number;
  /** Test hook: the hash (to force collisions). */
  hash?: (seed: number, productId: string, source: string, externalId: string) => number;
}

/** Rows a merge writes in one transaction: a few milliseconds of the event loop each. */
const MERGE_CHUNK = 2048;

/** Lets requests run between two chunks of background work (merges, sweeps, the filter's build). */
const pause = () => new Promise<void>((resolve) => setImmediate(resolve));
/**
 * Deleted rows' keys waiting for a sweep that start one without a merge, and how often that is looked at. A sweep
 * pays when it deletes several keys per leaf of event_keys (~45,000 leaves at 10 M events): one of 10,000 keys
 * there wrote as many pages as the trigger it replaces, in bursts. Until then the keys cost ~33 bytes each.
 */
export const SWEEP_MIN = 100_000;
const SWEEP_CHECK_MS = 30_000;
/** The longest a merge or sweep transaction waits for room in the WAL (as a background delete batch does). */
const ROOM_WAIT_MS = 1_000;
/** Deleted rows' keys one sweep takes (~16 bytes each in memory); more wait for the next one. */
const SWEEP_MAX = 1_000_000;

/**
 * The entries of the recent level at which it moves into the big one: sqrt(2 × big × tail), at least a tail. Each
 * merge rewrites the recent level (on average half this size) and each move the big table once, so per merge the
 * pages written are about threshold / 2 + big × tail / threshold, least at this threshold: at 10 M entries and
 * tails of 250,000, a move every ~9 merges, ~2.2 M entries rewritten per merge instead of 10 M.
 */
export function moveThreshold(bigEntries: number, tailKeys: number): number {
  return Math.max(tailKeys, Math.ceil(Math.sqrt(2 * Math.max(0, bigEntries) * tailKeys)));
}

/** The most slices of the hash range a move is spread over, one slice after each merge. */
const MOVE_SLICES_MAX = 8;

/**
 * The slices a move that starts at `threshold` entries takes, one after each merge: about a tail's entries each
 * (at 10 M entries and tails of 250,000, 8 slices of ~280,000), so that each merge moves about what it added
 * instead of every ~9th merge moving ~2.2 M entries at once (seconds of the event loop in one burst, per index).
 */
export function moveSlices(threshold: number, tailKeys: number): number {
  return Math.max(1, Math.min(MOVE_SLICES_MAX, Math.floor(threshold / tailKeys)));
}

/** The first hash of slice `slice` (0-based) of `slices`, and for `slices` itself HASH_RANGE, above every hash. */
export function sliceStart(slice: number, slices: number): number {
  return slice >= slices ? HASH_RANGE : Math.floor((HASH_RANGE / slices) * slice);
}

/**
 * The (h, position) pairs of `logs`, bucket by bucket of the hash range, each bucket sorted by hash and position
 * and interleaved in the array yielded (valid until the next bucket is asked for): what a merge inserts and a
 * sweep deletes, so that each leaf of event_keys is written about once.
 */
function* hashBuckets(logs: readonly PairLog[]): Generator<Float64Array> {
  // Which bucket each pair falls in, then per bucket the pairs' indexes across the logs (a counting sort).
  const offsets = [0];
  for (const { count } of logs) offsets.push(offsets[offsets.length - 1]! + count);
  const count = offsets[logs.length]!;
  const buckets = Math.max(1, Math.ceil(count / MERGE_CHUNK));
  const width = HASH_RANGE / buckets;
  const bucketOf = (h: number) => Math.min(buckets - 1, Math.floor(h / width));
  const starts = new Uint32Array(buckets + 1);
  for (const { log, count } of logs) for (let pair = 0; pair < count; pair++) starts[bucketOf(log[2 * pair]!) + 1]!++;
  let largest = 0;
  for (let b = 0; b < buckets; b++) {
    largest = Math.max(largest, starts[b + 1]!);
    starts[b + 1]! += starts[b]!;
  }
  const order = new Uint32Array(count);
  const next = starts.slice(0, buckets);
  logs.forEach(({ log, count }, l) => {
    for (let pair = 0; pair < count; pair++) order[next[bucketOf(log[2 * pair]!)]!++] = offsets[l]! + pair;
  });
  const pairs = new Float64Array(2 * largest);
  const sorted = new Float64Array(2 * largest);
  for (let b = 0; b < buckets; b++) {
    // A bucket's pairs, in the order of their indexes across the logs (the counting sort kept it): the log of
    // each is found by walking forward.
    const size = starts[b + 1]! - starts[b]!;
    for (let i = 0, l = 0; i < size; i++) {
      const index = order[starts[b]! + i]!;
      while (index >= offsets[l + 1]!) l++;
      const log = logs[l]!.log;
      const pair = index - offsets[l]!;
      pairs[2 * i] = log[2 * pair]!;
      pairs[2 * i + 1] = log[2 * pair + 1]!;
    }
    const byKey = Array.from({ length: size }, (_, i) => i).sort(
      (x, y) => pairs[2 * x]! - pairs[2 * y]! || pairs[2 * x + 1]! - pairs[2 * y + 1]!,
    );
    for (let i = 0; i < size; i++) {
      sorted[2 * i] = pairs[2 * byKey[i]!]!;
      sorted[2 * i + 1] = pairs[2 * byKey[i]! + 1]!;
    }
    yield sorted.subarray(0, 2 * size);
  }
}

export class EventKeys {
  private loaded = false;
  private seed = 0;
  /** The highest event position whose key this process has accounted for (its own rows and others'). */
  private seen = 0;
  /** The highest position catchUp read from the rows: a commit reported later (the writer thread's) skips those. */
  private readThrough = 0;
  /** The generation that takes new keys, the full ones before it that wait for a merge, and those a merge
   *  writes (both oldest first). */
  private tail: Generation;
  private waiting: Generation[] = [];
  private merging: Generation[] = [];
  /** Kind `keys`: every key in event_keys and in memory (built from the table in the background at start), and
   *  whether that build has ended (until then every lookup probes the table). */
  private filter: HashFilter | undefined;
  private filterReady = false;
  private filterBuild: Promise<void> | undefined;
  private filterBuilding = false;
  private filterAgain = false;
  /** Lookups that probed event_keys (tests: the filter spares most). */
  probes = 0;
  /** The merge or sweep in progress (one at a time). */
  private mergeRun: Promise<void> | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly tailKeys: number;
  private readonly tables: KindTables;
  private readonly hashOf: NonNullable<EventKeysOptions['hash']>;
  private readonly probe: BetterSqlite3.Statement;
  /** Per level, recent first: its ranges by hash in either order, its scan for the filter, its deletes. */
  private readonly levels: Array<{
    rangeAsc: BetterSqlite3.Statement;
    rangeDesc: BetterSqlite3.Statement;
    filterScan: BetterSqlite3.Statement;
    deleteKey: BetterSqlite3.Statement;
    deleteKeys: BetterSqlite3.Statement;
  }>;
  private readonly recentEdge: BetterSqlite3.Statement;
  private readonly recentLast: BetterSqlite3.Statement;
  private readonly countRecent: BetterSqlite3.Statement;
  private readonly moveRange: BetterSqlite3.Statement;
  private readonly dropRange: BetterSqlite3.Statement;
  /** Entries of the recent level as this process counts them (counted once, at its first merge). */
  private recentEntries: number | undefined;
  /** The move in progress: its slices of the hash range and how many have moved (one after each merge). */
  private move: { slices: number; done: number } | undefined;
  private readonly insertKey: BetterSqlite3.Statement;
  private readonly setMerged: BetterSqlite3.Statement;
  private readonly lastPosition: BetterSqlite3.Statement;
  private readonly mergedThrough: BetterSqlite3.Statement;
  private readonly keyedAfter: BetterSqlite3.Statement;
  private readonly goneAfter: BetterSqlite3.Statement;
  private readonly goneWaiting: BetterSqlite3.Statement;
  private readonly deleteGone: BetterSqlite3.Statement;
  private readonly deleteByPosition: BetterSqlite3.Statement;
  private readonly unsynced: <T>(work: () => T) => T;
  /** Merges completed and the seconds they took from start to end, pauses included (metrics). */
  merges = 0;
  mergeSeconds = 0;
  /** Moves of the recent level into the big table (metrics; their time is in mergeSeconds). */
  moves = 0;
  /** Keys of deleted rows removed from event_keys by sweeps, and the sweeps' wall time (metrics). */
  swept = 0;
  sweepSeconds = 0;
  /** Seconds merges, sweeps and the filter's build held the connection (and the event loop), pauses excluded. */
  busySeconds = 0;

  constructor(
    private readonly raw: BetterSqlite3.Database,
    private readonly options: EventKeysOptions,
  ) {
    this.tailKeys = options.tailKeys ?? TAIL_KEYS;
    this.tail = new Generation(0, this.tailKeys);
    this.hashOf = options.hash ?? keyHash;
    const t = KINDS[options.kind ?? 'keys'];
    this.tables = t;
    this.probe = raw
      .prepare(`SELECT position FROM ${t.recent} WHERE h = ? UNION ALL SELECT position FROM ${t.table} WHERE h = ?`)
      .pluck();
    this.levels = [t.recent, t.table].map((table) => ({
      rangeAsc: raw
        .prepare(
          `SELECT position FROM ${table} WHERE h = ? AND position > ? AND position < ? ORDER BY position LIMIT ?`,
        )
        .pluck(),
      rangeDesc: raw
        .prepare(
          `SELECT position FROM ${table} WHERE h = ? AND position > ? AND position < ? ORDER BY position DESC LIMIT ?`,
        )
        .pluck(),
      filterScan: raw.prepare(`SELECT h FROM ${table} WHERE h > ? ORDER BY h LIMIT ?`).pluck(),
      deleteKey: raw.prepare(`DELETE FROM ${table} WHERE h = ? AND position = ?`),
      deleteKeys: raw.prepare(`DELETE FROM ${table} WHERE h = ? AND position IN (SELECT value FROM json_each(?))`),
    }));
    // A move's chunk: the recent level's entries after a (hash, position) and below a slice's end, up to the
    // MERGE_CHUNK-th (or the slice's last), by a range of the primary key, copied and deleted in SQL (half the CPU
    // of a statement per entry from JS: 1.6–2.0 against 3.3–3.6 µs an entry into a table of 2 M, a throwaway
    // script).
    this.recentEdge = raw
      .prepare(
        `SELECT h, position FROM ${t.recent} WHERE (h, position) > (?, ?) AND h < ? ORDER BY h, position LIMIT 1 OFFSET ?`,
      )
      .raw();
    this.recentLast = raw
      .prepare(
        `SELECT h, position FROM ${t.recent} WHERE (h, position) > (?, ?) AND h < ? ORDER BY h DESC, position DESC LIMIT 1`,
      )
      .raw();
    this.countRecent = raw.prepare(`SELECT count(*) FROM ${t.recent}`).pluck();
    this.moveRange = raw.prepare(
      `INSERT OR IGNORE INTO ${t.table} (h, position) SELECT h, position FROM ${t.recent} WHERE (h, position) > (?, ?) AND (h, position) <= (?, ?) ORDER BY h, position`,
    );
    this.dropRange = raw.prepare(`DELETE FROM ${t.recent} WHERE (h, position) > (?, ?) AND (h, position) <= (?, ?)`);
    // Every pair of a generation, its row deleted meanwhile or not: the row's note takes the key out again (sweep).
    this.insertKey = raw.prepare(`INSERT OR IGNORE INTO ${t.recent} (h, position) VALUES (?, ?)`);
    // Never backwards: another writer may have merged further (everything up to either value is merged).
    this.setMerged = raw.prepare(`UPDATE event_keys_state SET ${t.merged} = max(${t.merged}, ?) WHERE id = 1`);
    this.mergedThrough = raw.prepare(`SELECT ${t.merged} FROM event_keys_state WHERE id = 1`).pluck();
    // AUTOINCREMENT's counter: the last position ever given, even if that row was deleted since.
    this.lastPosition = raw
      .prepare(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`)
      .pluck();
    this.unsynced = withoutCommitSync(raw, options.synchronous);
    const [a, b, c] = t.hashed;
    this.keyedAfter = raw.prepare(
      `SELECT position, ${a} AS a, ${b} AS b, ${c} AS c FROM events WHERE position > ? AND position <= ? AND ${t.where} ORDER BY position`,
    );
    // Notes of deleted rows at merged positions only: a row deleted while its key was in memory (the tail, or a
    // generation being merged) still has that key merged, so its note waits until the merge has moved
    // merged_through past it. `h` NULL: a row from before migration 804 whose key was never merged.
    const merged = `(SELECT ${t.merged} FROM event_keys_state WHERE id = 1)`;
    this.goneAfter = raw.prepare(
      `SELECT position, h FROM ${t.gone} WHERE position > ? AND position <= ${merged} ORDER BY position LIMIT ?`,
    );
    this.deleteByPosition = raw.prepare(`DELETE FROM ${t.byPosition} WHERE position = ?`);
    this.goneWaiting = raw
      .prepare(`SELECT count(*) FROM (SELECT 1 FROM ${t.gone} WHERE position <= ${merged} LIMIT ?)`)
      .pluck();
    this.deleteGone = raw.prepare(`DELETE FROM ${t.gone} WHERE position = ?`);
  }

  /**
   * At the start of every write transaction (which holds the write lock: BEGIN IMMEDIATE): the first time, reads
   * the seed and rebuilds the tail from the events after the last merge; afterwards, takes into the tail the keys
   * of events that another connection stored since this one last wrote. Inlet writes a SQLite file from one
   * process, but should two ever serve it, neither misses the other's keys. `last`: the last position given
   * (AUTOINCREMENT's counter), when the caller has read it already (the writer, for both indexes); returns it.
   */
  catchUp(last: number = this.lastPosition.get() as number): number {
    if (!this.loaded) {
      const state = this.raw
        .prepare(`SELECT seed, ${this.tables.merged} AS merged FROM event_keys_state WHERE id = 1`)
        .get() as { seed: number; merged: number };
      this.seed = state.seed;
      this.tail.through = state.merged;
      this.seen = state.merged;
      this.loaded = true;
      // Before the tail is rebuilt below: every key added from here on is in the filter too.
      if ((this.options.kind ?? 'keys') === 'keys' && this.options.filter !== false)
        this.startFilterBuild(state.merged);
      this.sweepTimer = setInterval(() => void this.sweepIfMany(), SWEEP_CHECK_MS);
      this.sweepTimer.unref();
    }
    if (last <= this.seen) return last;
    // Rows up to the merged_through another writer recorded are in event_keys already (it merged every row up
    // to there, this one's included): only those after it are read (a bulk load that merged its own keys,
    // the bench's prefill, costs nothing here).
    const merged = this.mergedThrough.get() as number;
    // Those another writer merged before this one saw them are in the table only, not in the filter: until it is
    // built again from the table (in the background), every lookup probes.
    if (this.filter !== undefined && merged > this.seen) this.startFilterBuild(merged);
    for (const row of this.keyedAfter.iterate(Math.max(this.seen, merged), last) as IterableIterator<{
      position: number;
      a: string;
      b: string;
      c: string;
    }>) {
      this.add(this.hashOf(this.seed, row.a, row.b, row.c), row.position);
    }
    this.seen = last;
    this.readThrough = last;
    return last;
  }

  /** Keys held in memory (the tail and the generations being merged). */
  get held(): number {
    return this.merging.reduce((sum, generation) => sum + generation.count, this.unmerged);
  }

  /** Keys of the tail and of the generations that wait for a merge. */
  private get unmerged(): number {
    return this.waiting.reduce((sum, generation) => sum + generation.count, this.tail.count);
  }

  /** The positions under `h` held in memory, newest first: the tail's, then the generations' being merged. */
  private heldPositions(h: number, into: number[]): void {
    this.tail.positionsOf(h, into);
    for (let i = this.waiting.length - 1; i >= 0; i--) this.waiting[i]!.positionsOf(h, into);
    for (let i = this.merging.length - 1; i >= 0; i--) this.merging[i]!.positionsOf(h, into);
  }

  hash(productId: string, source: string, externalId: string): number {
    return this.hashOf(this.seed, productId, source, externalId);
  }

  /** Positions that may hold this key (read each back and compare), added to `found`: the tail's, the merging
   *  generation's and both levels'. */
  candidates(h: number, found: number[] = []): number[] {
    // A position is in one generation only, and never among this transaction's own (`found` on entry).
    this.heldPositions(h, found);
    if (this.filterReady && !this.filter!.has(h)) return found;
    this.probes++;
    for (const position of this.probe.all(h, h) as number[]) if (!found.includes(position)) found.push(position);
    return found;
  }

  /** The move in progress, if one is: its slices and how many of them have moved (tests). */
  get moving(): { readonly slices: number; readonly done: number } | undefined {
    return this.move === undefined ? undefined : { ...this.move };
  }

  /** The key filter's size once it is built (0 before, and for the subject index). */
  get filterBytes(): number {
    return this.filterReady ? this.filter!.bytes : 0;
  }

  /** The counters and gauges for /metrics. */
  stats(): EventKeyStats {
    return {
      held: this.held,
      merges: this.merges,
      mergeSeconds: this.mergeSeconds,
      moves: this.moves,
      swept: this.swept,
      sweepSeconds: this.sweepSeconds,
      busySeconds: this.busySeconds,
      filterBytes: this.filterBytes,
    };
  }

  /** Resolves once the key filter is built (immediately for the subject index, and before the first catchUp). */
  async filtered(): Promise<void> {
    await this.filterBuild;
  }

  /**
   * (Re)builds the filter in the background, sized for the keys up to `through` (and a tail): a new one holding the
   * keys in memory at once, then every key of the table; lookups probe until it is done. A build asked for while
   * one runs makes that one scan again, into the new filter, once it ends.
   */
  private startFilterBuild(through: number): void {
    this.filterReady = false;
    this.filter = new HashFilter(Math.ceil(through * 1.1) + this.tailKeys);
    for (const generation of [this.tail, ...this.waiting, ...this.merging]) {
      for (let pair = 0; pair < generation.count; pair++) this.filter.add(generation.log[2 * pair]!);
    }
    if (this.filterBuilding) {
      this.filterAgain = true;
      return;
    }
    this.filterBuilding = true;
    this.filterBuild = this.buildFilter()
      .catch((error: unknown) => this.options.onMergeError?.(error))
      .finally(() => {
        this.filterBuilding = false;
      });
  }

  /**
   * Reads every hash of both levels into the filter, in chunks under the connection's lock with the event loop free
   * between them (at 10 M keys, ~1,000 chunks of ~6 ms, ~6 s of CPU). Keys merged into a level meanwhile came from a
   * tail, and every key that enters a tail enters the filter first, so once a scan ends the filter holds every key
   * on disk (keys another writer merged unseen start another scan: catchUp). The recent level first: a move
   * between two chunks takes keys out of it into the big level, which is read afterwards, whole.
   */
  private async buildFilter(): Promise<void> {
    do {
      this.filterAgain = false;
      await pause();
      for (const level of this.levels) {
        for (let after = -1; ;) {
          if (this.stopped) return;
          const hs = await this.background(() => level.filterScan.all(after, FILTER_SCAN_CHUNK) as number[]);
          for (const h of hs) this.filter!.add(h);
          if (hs.length < FILTER_SCAN_CHUNK) break;
          after = hs[hs.length - 1]!;
          await pause();
        }
      }
    } while (this.filterAgain);
    this.filterReady = true;
  }

  /** A subject's hash (the `subjects` index): once catchUp has run (the seed). */
  hashSubject(productId: string, subjectId: string): number {
    return subjectHash(this.hashOf, this.seed, productId, subjectId);
  }

  /**
   * The `subjects` index: positions of the product's events whose subject id is one of `subjectIds` (or whose
   * (product_id, subject_id) hash like one: read the rows back and compare), strictly between `after` and
   * `before`, the first `limit` in `order` (all without a limit). From the tail, the generation being merged and
   * both levels, all read with the connection's lock held (the caller's), so a merge or a move cannot move a
   * position from one place to another between the reads. Takes in other writers' rows first (catchUp).
   */
  subjectPositionsLocked(productId: string, subjectIds: readonly string[], range: PositionRange): number[] {
    this.catchUp();
    const after = range.after ?? 0;
    const before = range.before ?? Number.MAX_SAFE_INTEGER;
    const limit = range.limit ?? -1;
    const found = new Set<number>();
    for (const subjectId of new Set(subjectIds)) {
      const h = this.hashSubject(productId, subjectId);
      const held: number[] = [];
      this.heldPositions(h, held);
      for (const position of held) if (position > after && position < before) found.add(position);
      for (const level of this.levels) {
        const table = range.order === 'asc' ? level.rangeAsc : level.rangeDesc;
        for (const position of table.all(h, after, before, limit) as number[]) found.add(position);
      }
    }
    const sorted = [...found].sort(range.order === 'asc' ? (x, y) => x - y : (x, y) => y - x);
    return range.limit === undefined ? sorted : sorted.slice(0, range.limit);
  }

  /**
   * The `subjects` index: takes out of the table the entries of these subjects' events at `positions`, deleted a
   * moment ago (an erasure's batch; the caller holds the lock): a few leaves (one hash per subject), so the next
   * batch does not walk them again. Their notes stay for the sweep, which then finds nothing left to delete.
   */
  forgetLocked(productId: string, subjectIds: readonly string[], positions: readonly number[]): void {
    if (positions.length === 0) return;
    const json = JSON.stringify(positions);
    for (const subjectId of new Set(subjectIds)) {
      const h = this.hashSubject(productId, subjectId);
      const [recent, big] = this.levels;
      this.forgetRecent(recent!.deleteKeys.run(h, json).changes);
      big!.deleteKeys.run(h, json);
    }
  }

  /** subjectPositionsLocked under the connection's lock (`exclusive`). */
  subjectPositions(productId: string, subjectIds: readonly string[], range: PositionRange): Promise<number[]> {
    return this.options.exclusive(() => this.subjectPositionsLocked(productId, subjectIds, range));
  }

  /** After a commit: the keys it stored (in position order) and the last position it gave. Starts a merge once
   *  the tail is full. A commit of another connection reported after catchUp read its rows adds nothing twice. */
  committed(keys: ReadonlyArray<readonly [number, number]>, lastPosition: number): void {
    for (const [h, position] of keys) if (position > this.readThrough) this.add(h, position);
    if (lastPosition > this.seen) this.seen = lastPosition;
    this.mergeIfFull();
  }

  /** Starts a merge once the tail is full and no merge or sweep runs (one that does starts it when it ends). */
  private mergeIfFull(): void {
    if (this.unmerged >= this.tailKeys && this.mergeRun === undefined && !this.stopped)
      this.startMerge().catch((error: unknown) => this.options.onMergeError?.(error));
  }

  /** Waits for a merge in progress to end (close, tests). */
  async idle(): Promise<void> {
    await this.mergeRun?.catch(() => {});
  }

  /** Waits until no merge runs and none is due (a full tail starts one when the last ends): benches. */
  async settle(): Promise<void> {
    do {
      await this.idle();
      await pause();
    } while (this.mergeRun !== undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.sweepTimer);
    await this.idle();
    await this.filterBuild;
  }

  /** Merges everything written so far and sweeps the keys of deleted rows (tests): waits for a merge in progress,
   *  then merges the tail (a merge ends with a sweep) or only sweeps. */
  async mergeNow(): Promise<void> {
    while (this.mergeRun !== undefined) await this.idle();
    if (this.unmerged > 0) await this.startMerge();
    else await this.startSweep();
  }

  /** Starts a sweep when at least SWEEP_MIN deleted rows' keys wait and nothing else runs (the timer). */
  async sweepIfMany(): Promise<void> {
    if (this.mergeRun !== undefined || this.stopped) return;
    const min = this.options.sweepMin ?? SWEEP_MIN;
    const waiting = await this.background(() => this.goneWaiting.get(min) as number);
    if (waiting < min || this.mergeRun !== undefined || this.stopped) return;
    await this.startSweep().catch((error: unknown) => this.options.onMergeError?.(error));
  }

  private add(h: number, position: number): void {
    this.filter?.add(h);
    if (this.tail.full) {
      this.waiting.push(this.tail);
      this.tail = new Generation(this.tail.through, this.tailKeys);
    }
    this.tail.add(h, position);
  }

  private startMerge(): Promise<void> {
    this.merging = [...this.waiting, this.tail];
    this.waiting = [];
    this.tail = new Generation(this.tail.through, this.tailKeys);
    const merging = this.merging;
    return this.running(async () => {
      await this.merge(merging);
      await this.moveIfLarge();
      await this.sweep();
    });
  }

  private startSweep(): Promise<void> {
    return this.running(() => this.sweep());
  }

  /** One merge or sweep at a time: a merge during a sweep could write a key whose note the sweep has just read
   *  without it and then deletes, and the key would stay (harmless, but never swept). */
  private running(work: () => Promise<void>): Promise<void> {
    const run = work().then(
      () => {
        if (this.mergeRun === run) this.mergeRun = undefined;
        // A tail that filled meanwhile is merged now (after a failure, at the next commit, as before).
        setImmediate(() => this.mergeIfFull());
      },
      (error: unknown) => {
        if (this.mergeRun === run) this.mergeRun = undefined;
        throw error;
      },
    );
    this.mergeRun = run;
    return run;
  }

  /** Background work (merges, sweeps, the filter's build) under the connection's lock, its time counted in
   *  busySeconds: what it takes from ingest, which waits for the lock meanwhile. */
  private background<T>(work: () => T): Promise<T> {
    return this.options.exclusive(() => {
      const started = performance.now();
      try {
        return work();
      } finally {
        this.busySeconds += (performance.now() - started) / 1000;
      }
    });
  }

  /** Short transactions on the writer's connection, each without a sync of its own (see merge), each once the
   *  WAL has room (at most ROOM_WAIT_MS). */
  private async transaction(work: () => void): Promise<void> {
    await this.options.roomInWal?.(ROOM_WAIT_MS);
    return this.background(() => this.unsynced(this.raw.transaction(work)));
  }

  /**
   * Generations into the tables, in short transactions on the writer's connection with the event loop yielding
   * between them: the recent level bucket by bucket of the hash range, each bucket sorted (each leaf written about
   * once); a last transaction moves `merged_through`. If one fails (disk full, the process stopping), the
   * generations go back before the tail, where lookups keep finding them, and are merged again later (INSERT OR
   * IGNORE); a restart rebuilds them from the rows after `merged_through`.
   */
  private async merge(merging: Generation[]): Promise<void> {
    // Merges need no sync of their own: what a power loss takes back is merged again from the rows, since
    // merged_through moves last (the WAL keeps the order of commits).
    const transaction = (work: () => void) => this.transaction(work);
    const started = performance.now();
    try {
      // Not inside the commit that filled the tail (this was called from it): from the next turn of the loop.
      await pause();
      // Counted once per process (a few milliseconds: the level is small), then kept by what merges, moves and
      // sweeps change. Another writer's merges are not counted: they only move the next move earlier or later.
      if (this.recentEntries === undefined)
        this.recentEntries = await this.background(() => this.countRecent.get() as number);
      for (const bucket of hashBuckets(merging)) {
        if (this.stopped) throw new Error('stopped');
        await transaction(() => {
          let added = 0;
          for (let i = 0; i < bucket.length; i += 2) added += this.insertKey.run(bucket[i], bucket[i + 1]).changes;
          if (this.recentEntries !== undefined) this.recentEntries += added;
        });
        await pause();
      }
      // Last, once every key is in: a merge cut off before here is done again from the rows.
      await transaction(() => this.setMerged.run(merging[merging.length - 1]!.through));
      this.merges++;
      this.mergeSeconds += (performance.now() - started) / 1000;
      if (this.merging === merging) this.merging = [];
    } catch (error) {
      if (this.merging === merging) {
        // Back before the tail, older than what it holds: lookups find the keys, the next merge writes them.
        this.waiting = [...merging, ...this.waiting];
        this.merging = [];
      }
      if (!this.stopped) throw error;
    }
  }

  /** Entries taken out of the recent level by a delete. */
  private forgetRecent(count: number): void {
    if (this.recentEntries !== undefined) this.recentEntries = Math.max(0, this.recentEntries - count);
  }

  /**
   * After a merge: once the recent level holds moveThreshold entries (the big one estimated from the positions
   * merged: an upper bound, rows deleted since included), a move starts, spread over moveSlices slices of the hash
   * range, one after this merge and one after each of the next ones: each slice's entries into the big table, in
   * hash order, in short transactions that each copy the slice's next MERGE_CHUNK entries and delete them from the
   * recent level, so an entry is in exactly one level whenever the connection's lock is free (lookups, reads by
   * subject). Each leaf of the big table is written about once per move. Entries merged into a slice already moved
   * stay in the recent level for the next move. A slice cut off halfway (an error, the process stopping) leaves
   * both levels consistent; the next merge takes it up again (a process that starts anew waits for the threshold).
   */
  private async moveIfLarge(): Promise<void> {
    if (this.move === undefined) {
      const recent = this.recentEntries ?? 0;
      const threshold = moveThreshold(this.tail.through - recent, this.tailKeys);
      if (recent < threshold) return;
      this.move = { slices: moveSlices(threshold, this.tailKeys), done: 0 };
    }
    const move = this.move;
    const started = performance.now();
    const end = sliceStart(move.done + 1, move.slices);
    // Positions start at 1: (start, 0) is below every entry of the slice.
    let after: [number, number] = [sliceStart(move.done, move.slices), 0];
    for (let last = false; !last;) {
      if (this.stopped) return;
      let taken = 0;
      await this.transaction(() => {
        let edge = this.recentEdge.get(...after, end, MERGE_CHUNK - 1) as [number, number] | undefined;
        if (edge === undefined) {
          last = true;
          edge = this.recentLast.get(...after, end) as [number, number] | undefined;
          if (edge === undefined) return;
        }
        this.moveRange.run(...after, ...edge);
        taken = this.dropRange.run(...after, ...edge).changes;
        after = edge;
      });
      this.forgetRecent(taken);
      if (!last) await pause();
    }
    move.done++;
    if (move.done === move.slices) {
      this.move = undefined;
      this.moves++;
    }
    this.mergeSeconds += (performance.now() - started) / 1000;
  }

  /**
   * The keys of deleted rows (the notes in event_keys_gone up to merged_through, with the hash each row carried)
   * out of both levels, sorted by hash in short transactions as a merge writes them, then the notes (and any
   * by-position entries) in position order. Keys first: a sweep cut off halfway leaves notes that the next one
   * takes up again (a delete of what is gone deletes nothing). Reads go through `exclusive` too, so that they never
   * see a deletion another statement has not committed.
   */
  private async sweep(): Promise<void> {
    const started = performance.now();
    // The pairs read, a log per chunk of notes: no array grown by copying.
    const chunks: PairLog[] = [];
    const positions: number[] = [];
    for (let after = 0; positions.length < SWEEP_MAX;) {
      if (this.stopped) return;
      const rows = await this.background(
        () => this.goneAfter.all(after, MERGE_CHUNK) as Array<{ position: number; h: number | null }>,
      );
      const log = new Float64Array(2 * rows.length);
      let count = 0;
      for (const { position, h } of rows) {
        positions.push(position);
        if (h === null) continue;
        log[2 * count] = h;
        log[2 * count + 1] = position;
        count++;
      }
      chunks.push({ log, count });
      if (rows.length < MERGE_CHUNK) break;
      after = rows[rows.length - 1]!.position;
      await pause();
    }
    if (positions.length === 0) return;
    let removed = 0;
    for (const bucket of hashBuckets(chunks)) {
      if (this.stopped) return;
      await this.transaction(() => {
        const [recent, big] = this.levels;
        let fromRecent = 0;
        for (let i = 0; i < bucket.length; i += 2) {
          // In one level or the other (or in neither: never merged, or taken out by an erasure already).
          if (recent!.deleteKey.run(bucket[i], bucket[i + 1]).changes === 1) fromRecent++;
          else removed += big!.deleteKey.run(bucket[i], bucket[i + 1]).changes;
        }
        removed += fromRecent;
        this.forgetRecent(fromRecent);
      });
      await pause();
    }
    for (let from = 0; from < positions.length; from += MERGE_CHUNK) {
      if (this.stopped) return;
      await this.transaction(() => {
        for (const position of positions.slice(from, from + MERGE_CHUNK)) {
          this.deleteByPosition.run(position);
          this.deleteGone.run(position);
        }
      });
      await pause();
    }
    this.swept += removed;
    this.sweepSeconds += (performance.now() - started) / 1000;
  }
}
