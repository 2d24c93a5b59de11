// PostgreSQL's checkpoints and WAL, seen from Inlet: counters in /metrics, and a warning in the log when the server
// checkpoints because its WAL keeps reaching max_wal_size.
//
// Why it matters (docs/scaling-out.md, "PostgreSQL settings for sustained ingest"): two of Inlet's indexes take keys
// in random order, and the first change of a page after a checkpoint writes the whole 8 KB page into the WAL. On the
// defaults (max_wal_size 1GB) at 10 M events each event wrote ~12 KB of WAL, so checkpoints followed each other
// seconds apart and batches ran 25 % slower than with the settings the docs give (bench/runs/2026-11-postgresql.md, "PostgreSQL at
// 10 M events"). PostgreSQL logs "checkpoints are occurring too frequently" in its own log only, which an operator
// of Inlet may never read; the counters are cluster-wide, so another application's writes count too.
import { Counter, type Registry } from 'prom-client';
import type { PostgresWalStats } from '../storage/types.js';
import { sharedScrapeRead } from './metrics.js';

/** How often the watch compares the counters. */
export const CHECKPOINT_CHECK_INTERVAL_MS = 5 * 60_000;
/** At most one warning in this long. */
export const CHECKPOINT_WARNING_QUIET_MS = 60 * 60_000;
/** Requested checkpoints within one interval that make a warning: one may be a manual CHECKPOINT or a base backup. */
export const REQUESTED_CHECKPOINTS_WARNING = 2;

/**
 * The warning for the counters read `elapsedMs` apart, or undefined. Counters of another server (after a failover) or
 * that went down (statistics reset) give none: the next interval compares from there.
 */
export function checkpointAdvice(
  before: PostgresWalStats,
  after: PostgresWalStats,
  elapsedMs: number,
): { message: string; details: Record<string, unknown> } | undefined {
  const requested = after.requestedCheckpoints - before.requestedCheckpoints;
  const timed = after.timedCheckpoints - before.timedCheckpoints;
  if (after.server !== before.server || requested < REQUESTED_CHECKPOINTS_WARNING || timed < 0) return undefined;
  const minutes = Math.max(1, Math.round(elapsedMs / 60_000));
  const walBytes =
    after.walBytes !== undefined && before.walBytes !== undefined ? after.walBytes - before.walBytes : undefined;
  const fullPages =
    after.walFullPageImages !== undefined && before.walFullPageImages !== undefined
      ? after.walFullPageImages - before.walFullPageImages
      : undefined;
  const wrote =
    walBytes !== undefined && walBytes >= 0
      ? `; it wrote ${formatBytes(walBytes)} of WAL meanwhile${fullPages !== undefined && fullPages >= 0 ? `, with ${fullPages.toLocaleString('en')} whole pages in it` : ''}`
      : '';
  return {
    message:
      `PostgreSQL made ${requested} requested checkpoints in the last ${minutes} min, against ${timed} by checkpoint_timeout (${after.checkpointTimeout})${wrote}. ` +
      `Under sustained ingest that is the WAL reaching max_wal_size (${after.maxWalSize}): after each checkpoint the next change of every page ` +
      'writes the whole page into the WAL again, which multiplies the WAL and slows ingest. Raise max_wal_size (and shared_buffers): ' +
      'docs/scaling-out.md, "PostgreSQL settings for sustained ingest". (The counters are the whole server\'s: a manual CHECKPOINT or another application counts too.)',
    details: {
      requestedCheckpoints: requested,
      timedCheckpoints: timed,
      minutes,
      maxWalSize: after.maxWalSize,
      checkpointTimeout: after.checkpointTimeout,
      ...(walBytes === undefined ? {} : { walBytes }),
      ...(fullPages === undefined ? {} : { walFullPageImages: fullPages }),
    },
  };
}

function formatBytes(bytes: number): string {
  if (bytes >= 1024 ** 3) return `${(bytes / 1024 ** 3).toFixed(1)} GB`;
  if (bytes >= 1024 ** 2) return `${(bytes / 1024 ** 2).toFixed(1)} MB`;
  return `${Math.round(bytes / 1024)} kB`;
}

/**
 * inlet_postgres_checkpoints_total{server,kind}, inlet_postgres_wal_bytes_total{server} and
 * inlet_postgres_wal_full_page_images_total{server}, read at scrape time (one read for the three, at most 2 s: no samples
 * without an answer). `server` is the one that answered: after a failover its counters are another series, not a reset.
 */
export function registerWalMetrics(registry: Registry, read: () => Promise<PostgresWalStats>): void {
  const once = sharedScrapeRead(read);
  new Counter({
    name: 'inlet_postgres_checkpoints_total',
    help: 'Checkpoints of the PostgreSQL server this process writes to (the server that answered; cluster-wide, since its statistics reset), by kind: timed (checkpoint_timeout) or requested (max_wal_size reached, CHECKPOINT, a base backup). Requested ones every few minutes under ingest: raise max_wal_size (docs/scaling-out.md)',
    labelNames: ['server', 'kind'],
    registers: [registry],
    async collect() {
      this.reset();
      const now = await once();
      if (now === undefined) return;
      this.inc({ server: now.server, kind: 'timed' }, now.timedCheckpoints);
      this.inc({ server: now.server, kind: 'requested' }, now.requestedCheckpoints);
    },
  });
  // The WAL's two counters differ only in name, help and the figure they take.
  const walCounters: Array<[name: string, help: string, pick: (stats: PostgresWalStats) => number | undefined]> = [
    [
      'inlet_postgres_wal_bytes_total',
      'Bytes of WAL the PostgreSQL server this process writes to has generated (pg_stat_wal, PostgreSQL 14 and later; cluster-wide)',
      (stats) => stats.walBytes,
    ],
    [
      'inlet_postgres_wal_full_page_images_total',
      'Whole 8 KB pages written into the WAL (first change of a page after a checkpoint) by the PostgreSQL server this process writes to (pg_stat_wal, 14 and later; cluster-wide)',
      (stats) => stats.walFullPageImages,
    ],
  ];
  for (const [name, help, pick] of walCounters) {
    new Counter({
      name,
      help,
      labelNames: ['server'],
      registers: [registry],
      async collect() {
        this.reset();
        const now = await once();
        if (now === undefined) return;
        const value = pick(now);
        if (value !== undefined) this.inc({ server: now.server }, value);
      },
    });
  }
}

export interface CheckpointWatchLog {
  warn(details: Record<string, unknown>, message: string): void;
}

export interface CheckpointWatch {
  start(log: CheckpointWatchLog): void;
  /** Reads the counters now and compares them with the last read (what the timer does); for tests. */
  check(): Promise<void>;
  stop(): void;
}

/** Reads the counters every `intervalMs` and logs checkpointAdvice's warning, at most once per `quietMs`. */
export function createCheckpointWatch(
  read: () => Promise<PostgresWalStats>,
  options: { intervalMs?: number; quietMs?: number; now?: () => number } = {},
): CheckpointWatch {
  const intervalMs = options.intervalMs ?? CHECKPOINT_CHECK_INTERVAL_MS;
  const quietMs = options.quietMs ?? CHECKPOINT_WARNING_QUIET_MS;
  const now = options.now ?? Date.now;
  let last: { at: number; stats: PostgresWalStats } | undefined;
  let warnedAt = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  let log: CheckpointWatchLog | undefined;

  async function check(): Promise<void> {
    // A failed read (the primary away during a failover) skips this turn; the next one compares from the last good.
    const stats = await read().catch(() => undefined);
    if (stats === undefined) return;
    const at = now();
    const advice = last === undefined ? undefined : checkpointAdvice(last.stats, stats, at - last.at);
    last = { at, stats };
    if (advice !== undefined && at - warnedAt >= quietMs) {
      warnedAt = at;
      log?.warn(advice.details, advice.message);
    }
  }

  return {
    start(logger) {
      log = logger;
      if (timer !== undefined || intervalMs <= 0) return;
      void check();
      timer = setInterval(() => void check(), intervalMs);
      timer.unref();
    },
    check,
    stop() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
}
