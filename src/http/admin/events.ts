// Admin reads of events (events-out §3–5): the list, one event, the live stream (server-sent events)
// and the export. Handlers are thin: the read service validates filters and cursors, storage pages by
// the commit position.
import { Readable, pipeline } from 'node:stream';
import { createGzip } from 'node:zlib';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { encodeCursor } from '../../domain/event-cursor.js';
import { AppError } from '../../domain/errors.js';
import { RFC3339_PATTERN_SOURCE } from '../../domain/timestamps.js';
import { EXPORT_CONTENT_TYPES, exportText, type ExportFormat } from '../../resources/event-export.js';
import { eventResource } from '../../resources/events.js';
import { rejectionResource } from '../../resources/rejections.js';
import { EVENTS_DEFAULT_LIMIT, EVENTS_MAX_LIMIT, type EventFilterParams } from '../../services/event-read-service.js';
import type { EventRecord, RejectionRecord } from '../../storage/types.js';
import type { Services } from '../../services.js';
import { dataEnvelope, problemResponse } from '../schemas/common.js';
import { EventRecordSchema } from '../schemas/events.js';
import { productOf } from './context.js';

/** How long a client should wait before reconnecting a dropped stream (the SSE `retry:` field). */
export const STREAM_RETRY_MS = 2000;
/** A comment line this often keeps proxies from closing an idle stream (spec: at least every 15 s). */
export const STREAM_HEARTBEAT_MS = 10_000;

const Timestamp = (description: string) =>
  Type.String({
    pattern: RFC3339_PATTERN_SOURCE,
    description,
    errorMessage: 'must be an RFC 3339 timestamp with an offset, for example 2026-03-01T12:00:00Z',
  });

const filterProperties = {
  canonical_name: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 4000,
      description: 'One or more canonical names, comma-separated (e.g. project.created,user.signed_up)',
    }),
  ),
  event_type: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'Entity noun' })),
  action: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'Verb' })),
  source: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: '"api" for the HTTP API' })),
  key_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'The API key that sent the event' })),
  subject_type: Type.Optional(
    Type.String({ minLength: 1, maxLength: 32, description: 'user, account or subscription (with subject_id)' }),
  ),
  subject_id: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'With subject_type' })),
  user: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        'An external id: every event of that user, including ids merged into it by alias and linked anonymous ids',
    }),
  ),
  received_from: Type.Optional(Timestamp('Received at or after (RFC 3339)')),
  received_to: Type.Optional(Timestamp('Received before (RFC 3339, exclusive)')),
};

const ListQuery = Type.Object(
  {
    ...filterProperties,
    order: Type.Optional(
      Type.Union([Type.Literal('desc'), Type.Literal('asc')], {
        description: 'desc (default): newest first; asc: oldest first',
      }),
    ),
    limit: Type.Optional(
      Type.String({
        pattern: '^[0-9]{1,4}$',
        description: `1–${EVENTS_MAX_LIMIT} (default ${EVENTS_DEFAULT_LIMIT})`,
        errorMessage: `must be a whole number from 1 to ${EVENTS_MAX_LIMIT}`,
      }),
    ),
    cursor: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: 'Opaque: meta.next_cursor of the previous page' }),
    ),
  },
  { additionalProperties: false },
);

const StreamQuery = Type.Object(
  {
    ...filterProperties,
    after: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        description: 'Resume after this event id (same as the Last-Event-ID header)',
      }),
    ),
    include: Type.Optional(
      Type.Literal('rejections', {
        description:
          'rejections: also send the rejections recorded for the product (Segment routes, native batch) as `event: rejection` messages ' +
          '(the JSON of GET …/rejections, no id: they are live only, not resumed by Last-Event-ID; key_id filters them too)',
      }),
    ),
  },
  { additionalProperties: false },
);

const ExportQuery = Type.Object(
  {
    ...filterProperties,
    format: Type.Optional(
      Type.Union([Type.Literal('ndjson'), Type.Literal('csv')], { description: 'ndjson (default) or csv' }),
    ),
  },
  { additionalProperties: false },
);

const EventParams = Type.Object(
  {
    product_id: Type.String({ minLength: 1, maxLength: 64 }),
    uuid: Type.String({ minLength: 1, maxLength: 64, description: 'The event uuid' }),
  },
  { additionalProperties: false },
);

/** Beside the plugin's 401 and 404 (no such product). */
const adminErrors = { 400: problemResponse('Unknown or invalid parameter') };

function filterParamsOf(
  query: Static<typeof StreamQuery> | Static<typeof ExportQuery> | Static<typeof ListQuery>,
): EventFilterParams {
  const {
    canonical_name,
    event_type,
    action,
    source,
    key_id,
    subject_type,
    subject_id,
    user,
    received_from,
    received_to,
  } = query;
  return {
    canonical_name,
    event_type,
    action,
    source,
    key_id,
    subject_type,
    subject_id,
    user,
    received_from,
    received_to,
  };
}

function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false;
  return header.split(',').some((part) => {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (name !== 'gzip' && name !== 'x-gzip') return false;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

/** Long responses are exempt from socket timeouts (light-my-request's fake socket has none). */
function noSocketTimeout(socket: { setTimeout?: (ms: number) => unknown }): void {
  if (typeof socket.setTimeout === 'function') socket.setTimeout(0);
}

function streamMessage(event: EventRecord): string {
  return `id: ${encodeCursor(event.position!)}\nevent: event\ndata: ${JSON.stringify(eventResource(event))}\n\n`;
}

/** Live only: no `id:` line, so a client's Last-Event-ID stays the last event's cursor. */
function rejectionMessage(rejection: RejectionRecord): string {
  return `event: rejection\ndata: ${JSON.stringify(rejectionResource(rejection))}\n\n`;
}

export function adminEventRoutes(app: FastifyInstance, services: Services): void {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  const { reads, streams } = services.events;

  typed.get(
    '/products/:product_id/events',
    {
      schema: {
        summary: "List a product's events, newest (or oldest) first, with filters and an opaque cursor",
        querystring: ListQuery,
        response: {
          200: Type.Object({
            data: Type.Array(Type.Ref(EventRecordSchema)),
            meta: Type.Object({
              next_cursor: Type.Union([Type.String(), Type.Null()], {
                description:
                  'Pass as cursor for the next page; null when nothing more matches now. A page may be short and still have a cursor.',
              }),
            }),
          }),
          ...adminErrors,
        },
      },
    },
    async (request) => {
      const productId = productOf(request).id;
      const { order, limit, cursor } = request.query;
      const page = await reads.list(productId, {
        ...filterParamsOf(request.query),
        order,
        limit: limit === undefined ? undefined : Number(limit),
        cursor,
      });
      return { data: page.events.map(eventResource), meta: { next_cursor: page.nextCursor } };
    },
  );

  typed.get(
    '/products/:product_id/events/stream',
    {
      schema: {
        summary: "Live stream of a product's events (server-sent events), resumable with Last-Event-ID",
        description:
          'Each committed event is one message: `id: <cursor>`, `event: event`, `data: <event JSON>`; with `include=rejections` recorded rejections come as `event: rejection` (live only). Without a cursor the stream starts at the current end; ' +
          '`Last-Event-ID` (or `after`) resumes exactly after that event, also after a restart. A comment line comes at least every 15 s. ' +
          'A consumer that falls too far behind is disconnected and resumes with Last-Event-ID. Over the per-instance cap of open streams: 503 with Retry-After.',
        querystring: StreamQuery,
        headers: Type.Object({
          'last-event-id': Type.Optional(
            Type.String({ maxLength: 200, description: 'The id of the last event received' }),
          ),
        }),
        response: {
          200: { description: 'text/event-stream', content: { 'text/event-stream': { schema: { type: 'string' } } } },
          ...adminErrors,
          503: problemResponse('Too many open streams on this instance, or shutting down (see Retry-After)'),
        },
      },
    },
    async (request, reply) => {
      const productId = productOf(request).id;
      const filter = await reads.resolveFilter(productId, filterParamsOf(request.query));
      const lastEventId = request.headers['last-event-id'];
      const resumeFrom =
        typeof lastEventId === 'string' && lastEventId !== ''
          ? { cursor: lastEventId, pointer: '/headers/last-event-id' }
          : request.query.after === undefined
            ? undefined
            : { cursor: request.query.after, pointer: '/after' };
      const after = resumeFrom === undefined ? undefined : reads.positionOf(resumeFrom.cursor, resumeFrom.pointer);
      if (streams.full) {
        throw new AppError(
          'unavailable',
          `This instance already serves ${services.config.eventStreamsMax} live streams; retry later or on another instance.`,
          {
            headers: { 'retry-after': '5' },
          },
        );
      }

      if (request.method === 'HEAD') {
        // HEAD (Fastify answers it for every GET): the stream's headers, and no stream (Node sends no body
        // to a HEAD, so a held-open answer would never even send its headers).
        return reply
          .code(200)
          .header('content-type', 'text/event-stream; charset=utf-8')
          .header('cache-control', 'no-cache, no-transform')
          .send();
      }
      reply.hijack();
      const res = reply.raw;
      // Long-lived on purpose: no socket timeout may end it (the heartbeat keeps proxies awake).
      noSocketTimeout(request.raw.socket);
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        'x-accel-buffering': 'no',
        'x-request-id': request.id,
        connection: 'keep-alive',
      });
      res.write(`retry: ${STREAM_RETRY_MS}\n\n`);
      const bound = services.config.eventStreamBufferBytes;
      let ended = false;
      const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), STREAM_HEARTBEAT_MS);
      heartbeat.unref();
      const end = (destroy: boolean) => {
        if (ended) return;
        ended = true;
        clearInterval(heartbeat);
        if (destroy) res.destroy();
        else res.end();
      };
      let stop: (() => void) | undefined;
      res.on('close', () => {
        end(true);
        stop?.();
      });
      try {
        stop = await streams.open(
          productId,
          filter,
          after,
          {
            send(event) {
              if (!ended) res.write(streamMessage(event));
            },
            sendRejection(rejection) {
              if (!ended) res.write(rejectionMessage(rejection));
            },
            lagging: () => res.writableLength > bound,
            ready() {
              if (ended) return Promise.resolve(false);
              if (res.writableLength <= bound / 2) return Promise.resolve(true);
              return new Promise((resolve) => {
                const timeout = setTimeout(() => resolve(false), 30_000);
                const done = (ok: boolean) => {
                  clearTimeout(timeout);
                  res.off('drain', onDrain);
                  res.off('close', onClose);
                  resolve(ok);
                };
                const onDrain = () => done(true);
                const onClose = () => done(false);
                res.once('drain', onDrain);
                res.once('close', onClose);
              });
            },
            close(reason) {
              if (reason === 'slow') request.log.warn({ productId }, 'live stream cut off: the consumer is too slow');
              end(reason !== 'shutdown');
            },
          },
          { includeRejections: request.query.include === 'rejections' },
        );
        if (ended) stop();
        // The stream has joined: every event committed from now on will be sent (tests and tools wait for this).
        else res.write(': open\n\n');
      } catch (error) {
        request.log.error({ err: error }, 'live stream failed');
        end(true);
      }
    },
  );

  typed.get(
    '/products/:product_id/events/export',
    {
      schema: {
        summary: "Export a product's events (NDJSON or CSV, gzip when accepted), streamed in position order",
        description:
          'Every event of the range exactly once, oldest first, up to the end of the product when the export started. CSV has a header row; nested objects are JSON in their cell.',
        querystring: ExportQuery,
        response: {
          200: {
            description: 'The events',
            content: {
              'application/x-ndjson': { schema: { type: 'string' } },
              'text/csv': { schema: { type: 'string' } },
            },
          },
          ...adminErrors,
        },
      },
    },
    async (request, reply) => {
      const productId = productOf(request).id;
      const format: ExportFormat = request.query.format ?? 'ndjson';
      const filter = await reads.resolveFilter(productId, filterParamsOf(request.query));
      noSocketTimeout(request.raw.socket);
      const gzip = acceptsGzip(request.headers['accept-encoding']);
      reply
        .type(EXPORT_CONTENT_TYPES[format])
        .header(
          'content-disposition',
          `attachment; filename="events-${productId.replace(/[^A-Za-z0-9_-]/g, '_')}.${format}"`,
        )
        .header('vary', 'accept-encoding');
      // HEAD: the headers only; the export itself is not run.
      if (request.method === 'HEAD') return reply.send();
      const source = Readable.from(exportText(reads.exportPages(productId, filter), format), { objectMode: false });
      if (!gzip) return reply.send(source);
      reply.header('content-encoding', 'gzip');
      return reply.send(
        pipeline(source, createGzip(), (error) => {
          if (error) request.log.error({ err: error }, 'export failed');
        }),
      );
    },
  );

  typed.get(
    '/products/:product_id/events/:uuid',
    {
      schema: {
        summary: 'One event by uuid',
        params: EventParams,
        response: {
          200: dataEnvelope(Type.Ref(EventRecordSchema)),
          ...adminErrors,
          404: problemResponse('No such product, or no such event in it'),
        },
      },
    },
    async (request) => {
      return { data: eventResource(await reads.get(productOf(request).id, request.params.uuid)) };
    },
  );
}
