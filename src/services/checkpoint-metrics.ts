// SQLite WAL checkpoints (storage/sqlite/checkpointer.ts): how long each took, by the checkpoint thread or by
// the writer on the event loop (every request waits for the latter), and the WAL's size. What to look at when
// ingest latency rises while background deletes (erasure, retention) run.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { CheckpointEvent, EventKeyStats } from '../storage/types.js';

export function registerCheckpointMetrics(
  registry: Registry,
  observe: (listener: (event: CheckpointEvent) => void) => void,
): void {
  const duration = new Histogram({
    name: 'inlet_sqlite_checkpoint_seconds',
    help: 'SQLite WAL checkpoints by who ran them: the checkpoint thread (thread) or the writer on the event loop (writer)',
    labelNames: ['by'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const frames = new Gauge({
    name: 'inlet_sqlite_wal_frames',
    help: 'SQLite WAL after the last checkpoint: frames in it (wal) and frames not yet copied into the database file (behind)',
    labelNames: ['state'],
    registers: [registry],
  });
  const largest = new Gauge({
    name: 'inlet_sqlite_wal_frames_max',
    help: 'The most frames the SQLite WAL held after a checkpoint since the start',
    registers: [registry],
  });
  const copied = new Counter({
    name: 'inlet_sqlite_checkpoint_frames_total',
    help: 'WAL frames (pages) copied into the database file, by the checkpoint thread (thread) or by the writer on the event loop (writer)',
    labelNames: ['by'],
    registers: [registry],
  });
  let max = 0;
  observe((event) => {
    duration.observe({ by: event.by }, event.seconds);
    copied.inc({ by: event.by }, event.copied);
    if (event.walFrames < 0) return;
    frames.set({ state: 'wal' }, event.walFrames);
    frames.set({ state: 'behind' }, Math.max(0, event.walFrames - event.backfilled));
    if (event.walFrames > max) largest.set((max = event.walFrames));
  });
}

/** SQLite idempotency keys (storage/sqlite/event-keys.ts): how many wait in memory for a merge, the merges and
 *  sweeps, and the key filter. */
export function registerEventKeyMetrics(registry: Registry, stats: () => EventKeyStats): void {
  registerHashIndexMetrics(registry, stats, {
    one: 'key',
    many: 'keys',
    table: 'event_keys',
    what: 'Idempotency keys',
    sweptBy: 'erasure, retention',
  });
  new Gauge({
    name: 'inlet_sqlite_event_key_filter_bytes',
    help: 'Bytes of the in-memory filter of SQLite idempotency keys (~1.25 a key); 0 while it is built from event_keys after a start, when every keyed event probes the table',
    registers: [registry],
    collect() {
      this.set(stats().filterBytes);
    },
  });
}

/** SQLite's subject index (the same machinery, kind `subjects`): entries waiting in memory, merges and sweeps. */
export function registerEventSubjectMetrics(registry: Registry, stats: () => EventKeyStats): void {
  registerHashIndexMetrics(registry, stats, {
    one: 'subject',
    many: 'subjects',
    table: 'event_subjects',
    what: 'Subject entries',
    sweptBy: 'retention; erasures remove their own',
  });
}

/** inlet_sqlite_event_{many}_in_memory, _{one}_merges_total, _{one}_merge_seconds_total, _{many}_swept_total,
 *  _{one}_sweep_seconds_total and _{one}_maintenance_busy_seconds_total of one index. */
function registerHashIndexMetrics(
  registry: Registry,
  stats: () => EventKeyStats,
  index: { one: string; many: string; table: string; what: string; sweptBy: string },
): void {
  const { one, many, table, what, sweptBy } = index;
  new Gauge({
    name: `inlet_sqlite_event_${many}_in_memory`,
    help: `${what} of the newest SQLite events held in memory until merged into ${table} (a merge starts at 250,000)`,
    registers: [registry],
    collect() {
      this.set(stats().held);
    },
  });
  const wall = 'start to end (they yield to requests between short transactions)';
  counterOf(
    registry,
    `inlet_sqlite_event_${one}_merges_total`,
    `Merges of in-memory ${what.toLowerCase()} into the SQLite ${table} table`,
    () => stats().merges,
  );
  counterOf(
    registry,
    `inlet_sqlite_event_${one}_merge_seconds_total`,
    `Wall time of those merges and of the moves that follow some, ${wall}`,
    () => stats().mergeSeconds,
  );
  counterOf(
    registry,
    `inlet_sqlite_event_${one}_level_moves_total`,
    `Moves of the recent level (${table}_recent, which merges write into) into the big ${table} table, once it holds about sqrt(2 × big × 250,000) entries: counted when the last of its slices (up to 8, one after each merge) has moved`,
    () => stats().moves,
  );
  counterOf(
    registry,
    `inlet_sqlite_event_${many}_swept_total`,
    `${what} of deleted SQLite events (${sweptBy}) removed from ${table} by sweeps, which follow merges or run once 100,000 wait`,
    () => stats().swept,
  );
  counterOf(
    registry,
    `inlet_sqlite_event_${one}_sweep_seconds_total`,
    `Wall time of those sweeps, ${wall}`,
    () => stats().sweepSeconds,
  );
  counterOf(
    registry,
    `inlet_sqlite_event_${one}_maintenance_busy_seconds_total`,
    `Time the background work on ${table} (merges, sweeps${one === 'key' ? ", the filter's build" : ''}) held the writer's connection and the event loop, pauses excluded: what it takes from ingest`,
    () => stats().busySeconds,
  );
}

/** A counter that follows a total kept elsewhere: each scrape adds what it grew by since the last one. */
function counterOf(registry: Registry, name: string, help: string, total: () => number): void {
  let counted = 0;
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      const now = total();
      this.inc(now - counted);
      counted = now;
    },
  });
}
