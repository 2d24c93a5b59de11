// Prometheus metrics. One registry per service container, so several apps in one process (tests)
// never share counters.
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  events: Counter<'endpoint' | 'format' | 'outcome'>;
  httpDuration: Histogram<'method' | 'route' | 'status'>;
  commitDuration: Histogram;
  commitSize: Histogram;
  rateLimited: Counter<'endpoint'>;
  rejections: Counter<'code' | 'severity' | 'recorded'>;
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'inlet_' });
  return {
    registry,
    events: new Counter({
      name: 'inlet_events_total',
      help: 'Events answered, by endpoint, name format (preferred, unified, legacy, v1) and outcome (created, duplicate, rejected)',
      labelNames: ['endpoint', 'format', 'outcome'],
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'inlet_http_request_duration_seconds',
      help: 'HTTP request latency by method, route and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    commitDuration: new Histogram({
      name: 'inlet_ingest_commit_duration_seconds',
      help: 'Duration of one group commit of events (one transaction)',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    }),
    commitSize: new Histogram({
      name: 'inlet_ingest_commit_events',
      help: 'Events written by one group commit',
      buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500],
      registers: [registry],
    }),
    rateLimited: new Counter({
      name: 'inlet_rate_limited_total',
      help: 'Requests refused with 429',
      labelNames: ['endpoint'],
      registers: [registry],
    }),
    rejections: new Counter({
      name: 'inlet_rejections_total',
      help: 'Items refused one by one (severity rejected) or stored with a failed identity side effect (warning), by code; recorded=false past INLET_REJECTIONS_MAX_PER_HOUR',
      labelNames: ['code', 'severity', 'recorded'],
      registers: [registry],
    }),
  };
}

/** How long a gauge that reads the database at scrape time may take before the scrape goes on without it. */
export const SCRAPE_READ_TIMEOUT_MS = 2_000;

/**
 * A scrape-time read for a gauge's collect: its result, or undefined when it failed or took longer than `ms`.
 * A gauge that reads the database must never fail the scrape (prom-client rejects the whole /metrics then, which
 * answered 503 during every database outage, when the other metrics are needed most) nor hold it for the pool's
 * connect timeout; it leaves its samples out instead.
 */
export function scrapeRead<T>(read: () => Promise<T>, ms = SCRAPE_READ_TIMEOUT_MS): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    read(),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ])
    .then(
      (value) => value,
      () => undefined,
    )
    .finally(() => clearTimeout(timer));
}

/**
 * scrapeRead shared by the metrics one read feeds: prom-client collects every metric of a scrape at once, so those
 * that ask for the read while it is in flight await the same answer (one query per scrape, not one per metric).
 */
export function sharedScrapeRead<T>(read: () => Promise<T>): () => Promise<T | undefined> {
  let inFlight: Promise<T | undefined> | undefined;
  return () =>
    (inFlight ??= scrapeRead(read).finally(() => {
      inFlight = undefined;
    }));
}
