// GET /admin/v1/stats (clarifications §28): the health page of the console as JSON, read from this
// process's own Prometheus metrics (ingest, rejections, commit latency), its PostgreSQL pool, and the
// destinations table (global: every instance sees the same counts).
// The ingest rate is a difference of counter samples: each call keeps one (time, totals) sample, and the
// rate is taken over the oldest sample of the last RATE_WINDOW_MS (the console polls every few
// seconds); on the first call, over the process's life.
import { hostname } from 'node:os';
import type { Histogram } from 'prom-client';
import type { DestinationStatus, PoolStats } from '../storage/types.js';
import type { Metrics } from './metrics.js';

const RATE_WINDOW_MS = 60_000;
const MAX_SAMPLES = 120;

export interface Stats {
  instance: { hostname: string; pid: number; started_at: string; uptime_seconds: number };
  ingest: {
    /** Events answered by this process since it started, by outcome (created, duplicate, rejected). */
    events_total: Record<string, number>;
    /** Created events per second over `rate_window_seconds`. */
    events_per_second: number;
    rate_window_seconds: number;
  };
  rejections: { total: number; by_code: Array<{ code: string; severity: string; count: number }> };
  commit: {
    count: number;
    mean_ms: number | null;
    p50_ms: number | null;
    p99_ms: number | null;
    mean_events: number | null;
  };
  /** PostgreSQL only; null on SQLite (one connection, no pool). */
  pool: PoolStats | null;
  destinations: Record<DestinationStatus, number> & {
    disabled_destinations: Array<{ id: string; product_id: string; name: string; reason: string | null }>;
  };
}

export interface StatsServiceOptions {
  metrics: Metrics;
  poolStats?: (() => PoolStats) | undefined;
  destinationSummary: () => Promise<{
    byStatus: Record<DestinationStatus, number>;
    disabled: Stats['destinations']['disabled_destinations'];
  }>;
  now?: () => number;
}

interface HistogramSnapshot {
  count: number;
  sum: number;
  /** Cumulative counts by upper bound (le), ascending. */
  buckets: Array<{ le: number; count: number }>;
}

async function snapshotOf(histogram: Histogram): Promise<HistogramSnapshot> {
  const { values } = await histogram.get();
  let count = 0;
  let sum = 0;
  const buckets: HistogramSnapshot['buckets'] = [];
  for (const value of values) {
    const name = value.metricName ?? '';
    if (name.endsWith('_count')) count = value.value;
    else if (name.endsWith('_sum')) sum = value.value;
    else if (name.endsWith('_bucket') && value.labels.le !== '+Inf')
      buckets.push({ le: Number(value.labels.le), count: value.value });
  }
  buckets.sort((a, b) => a.le - b.le);
  return { count, sum, buckets };
}

/** The upper bound of the bucket holding quantile q (as Prometheus' histogram_quantile would, without interpolation). */
export function bucketQuantile(snapshot: HistogramSnapshot, q: number): number | null {
  if (snapshot.count === 0) return null;
  const rank = q * snapshot.count;
  for (const bucket of snapshot.buckets) if (bucket.count >= rank) return bucket.le;
  return snapshot.buckets.at(-1)?.le ?? null;
}

export function createStatsService(options: StatsServiceOptions) {
  const now = options.now ?? Date.now;
  const startedAt = now();
  const samples: Array<{ at: number; created: number }> = [{ at: startedAt, created: 0 }];

  return {
    async stats(): Promise<Stats> {
      const at = now();
      const eventsTotal: Record<string, number> = {};
      for (const value of (await options.metrics.events.get()).values) {
        const outcome = String(value.labels.outcome ?? 'unknown');
        eventsTotal[outcome] = (eventsTotal[outcome] ?? 0) + value.value;
      }
      const created = eventsTotal.created ?? 0;
      while (samples.length > 1 && at - samples[1]!.at >= RATE_WINDOW_MS) samples.shift();
      const oldest = samples[0]!;
      const seconds = Math.max((at - oldest.at) / 1000, 0.001);
      samples.push({ at, created });
      if (samples.length > MAX_SAMPLES) samples.splice(1, samples.length - MAX_SAMPLES);

      const byCode = new Map<string, { code: string; severity: string; count: number }>();
      for (const value of (await options.metrics.rejections.get()).values) {
        const code = String(value.labels.code);
        const severity = String(value.labels.severity);
        const entry = byCode.get(`${code}\u0000${severity}`) ?? { code, severity, count: 0 };
        entry.count += value.value;
        byCode.set(`${code}\u0000${severity}`, entry);
      }
      const rejections = [...byCode.values()].sort((a, b) => b.count - a.count);

      const commit = await snapshotOf(options.metrics.commitDuration);
      const size = await snapshotOf(options.metrics.commitSize);
      const ms = (seconds: number | null) => (seconds === null ? null : Math.round(seconds * 1_000_000) / 1000);
      const summary = await options.destinationSummary();

      return {
        instance: {
          hostname: hostname(),
          pid: process.pid,
          started_at: new Date(startedAt).toISOString(),
          uptime_seconds: Math.round((at - startedAt) / 1000),
        },
        ingest: {
          events_total: eventsTotal,
          events_per_second: Math.round(((created - oldest.created) / seconds) * 100) / 100,
          rate_window_seconds: Math.round(seconds),
        },
        rejections: {
          total: rejections.filter((r) => r.severity === 'rejected').reduce((n, r) => n + r.count, 0),
          by_code: rejections,
        },
        commit: {
          count: commit.count,
          mean_ms: commit.count === 0 ? null : ms(commit.sum / commit.count),
          p50_ms: ms(bucketQuantile(commit, 0.5)),
          p99_ms: ms(bucketQuantile(commit, 0.99)),
          mean_events: size.count === 0 ? null : Math.round((size.sum / size.count) * 10) / 10,
        },
        pool: options.poolStats?.() ?? null,
        destinations: { ...summary.byStatus, disabled_destinations: summary.disabled },
      };
    },
  };
}

export type StatsService = ReturnType<typeof createStatsService>;
