// GET /admin/v1/stats (clarifications §28): ingest rate, rejections, commit latency, the database pool and
// destinations by status, as JSON for the console's health page. /healthz keeps meaning "process alive".
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services.js';
import { dataEnvelope } from '../schemas/common.js';

const nullableNumber = (description?: string) =>
  Type.Union([Type.Number(), Type.Null()], description === undefined ? {} : { description });

const Stats = Type.Object({
  instance: Type.Object(
    {
      hostname: Type.String({ description: 'os.hostname() of the process that answered' }),
      pid: Type.Integer({ description: 'Its process id' }),
      started_at: Type.String(),
      uptime_seconds: Type.Integer(),
    },
    { description: 'The process that answered (ingest, rejections and commit figures are its own)' },
  ),
  ingest: Type.Object({
    events_total: Type.Record(Type.String(), Type.Number(), {
      description: 'Events answered since start, by outcome (created, duplicate, rejected)',
    }),
    events_per_second: Type.Number({
      description: 'Created events per second over rate_window_seconds (up to the last minute)',
    }),
    rate_window_seconds: Type.Integer(),
  }),
  rejections: Type.Object({
    total: Type.Number({ description: 'Items rejected since start (warnings not counted)' }),
    by_code: Type.Array(
      Type.Object({
        code: Type.String(),
        severity: Type.String({ description: 'rejected or warning' }),
        count: Type.Number(),
      }),
    ),
  }),
  commit: Type.Object({
    count: Type.Number({ description: 'Group commits since start' }),
    mean_ms: nullableNumber(),
    p50_ms: nullableNumber('Upper bound of the histogram bucket holding the median'),
    p99_ms: nullableNumber('Upper bound of the histogram bucket holding the 99th percentile'),
    mean_events: nullableNumber('Events per commit'),
  }),
  pool: Type.Union(
    [
      Type.Object({ max: Type.Integer(), open: Type.Integer(), idle: Type.Integer(), waiting: Type.Integer() }),
      Type.Null(),
    ],
    {
      description: 'PostgreSQL connection pool of this process; null on SQLite',
    },
  ),
  destinations: Type.Object(
    {
      active: Type.Integer(),
      paused: Type.Integer(),
      disabled: Type.Integer(),
      disabled_destinations: Type.Array(
        Type.Object({
          id: Type.String(),
          product_id: Type.String(),
          name: Type.String(),
          reason: Type.Union([Type.String(), Type.Null()]),
        }),
      ),
    },
    { description: 'Every product, every instance' },
  ),
});

export function adminStatsRoutes(app: FastifyInstance, services: Services): void {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/stats',
    {
      schema: {
        summary: "The service's own figures: ingest rate, rejections, commit latency, pool, destinations by status",
        response: { 200: dataEnvelope(Stats) },
      },
    },
    async () => ({ data: await services.stats.stats() }),
  );
}
