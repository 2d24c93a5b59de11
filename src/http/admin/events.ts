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
import { noSocketTimeout, sendSseHead, startSse, type SseMessage } from '../sse.js';
import { productOf } from './context.js';

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

function eventMessage(event: EventRecord): SseMessage {
  return { id: encodeCursor(event.position!), event: 'event', data: eventResource(event) };
}

/** Live only: no `id:` line, so a client's Last-Event-ID stays the last event's cursor. */
function rejectionMessage(rejection: RejectionRecord): SseMessage {
  return { event: 'rejection', data: rejectionResource(rejection) };
}

export function adminEventRoutes(app: FastifyInstance, services: Services): void {
  eventListRoute(app, services);
  eventStreamRoute(app, services);
  eventExportRoute(app, services);
  eventGetRoute(app, services);
}

/** The list, newest or oldest first, by cursor. */
function eventListRoute(app: FastifyInstance, services: Services): void {
  const { reads } = services.events;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
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
}

/** The live stream (server-sent events through `http/sse.ts`). */
function eventStreamRoute(app: FastifyInstance, services: Services): void {
  const { reads, streams } = services.events;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
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

      // HEAD: the stream's headers, and no stream.
      if (request.method === 'HEAD') return sendSseHead(reply);
      const sse = startSse(request, reply, services.config.eventStreamBufferBytes);
      let stop: (() => void) | undefined;
      sse.onClose(() => stop?.());
      try {
        stop = await streams.open(
          productId,
          filter,
          after,
          {
            send: (event) => sse.send(eventMessage(event)),
            sendRejection: (rejection) => sse.send(rejectionMessage(rejection)),
            lagging: () => sse.lagging(),
            ready: () => sse.ready(),
            close(reason) {
              if (reason === 'slow') request.log.warn({ productId }, 'live stream cut off: the consumer is too slow');
              sse.end(reason !== 'shutdown');
            },
          },
          { includeRejections: request.query.include === 'rejections' },
        );
        if (sse.ended) stop();
        // The stream has joined: every event committed from now on will be sent (tests and tools wait for this).
        else sse.comment('open');
      } catch (error) {
        request.log.error({ err: error }, 'live stream failed');
        sse.end(true);
      }
    },
  );
}

/** The export, NDJSON or CSV, gzip when accepted. */
function eventExportRoute(app: FastifyInstance, services: Services): void {
  const { reads } = services.events;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
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
}

/** One event by uuid. */
function eventGetRoute(app: FastifyInstance, services: Services): void {
  const { reads } = services.events;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
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
