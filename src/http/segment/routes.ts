// The Segment-compatible routes (segment-compat.md B), one encapsulated plugin: its own body parser
// (JSON whatever the Content-Type says), its own answer to an oversized body (400, which every SDK
// drops instead of retrying), key lookup from Basic auth, X-Write-Key, the body or the query.
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../../domain/errors.js';
import { itemBytesBound, sentFieldsJson, SEGMENT_LIMITS, type SegmentCall } from '../../domain/segment.js';
import type { Services } from '../../services.js';
import type { SegmentAnswer } from '../../services/segment-service.js';
import { authOf } from '../auth.js';
import { problemResponse } from '../schemas/common.js';
import { corsPreflight } from '../browser-keys.js';
import { answerRefusedBodies, bodyObject, parseEveryBodyAsJson, withoutKey, type KeptBodies } from './bodies.js';
import { presentedKey, segmentAuth } from './keys.js';
import { settingsRoutes } from './settings.js';
import { analyticsJsRoutes } from './analytics-js.js';

/** Where each call arrives: the long path of the HTTP API and the browser SDK's short form. */
const SINGLE_ROUTES: Array<[SegmentCall, string]> = [
  ['track', 't'],
  ['identify', 'i'],
  ['alias', 'a'],
  ['page', 'p'],
  ['screen', 's'],
  ['group', 'g'],
];
const BATCH_PATHS = ['/v1/batch', '/v1/import', '/v1/b', '/beacon/v1/batch'];

const SegmentAnswerSchema = Type.Object(
  {
    success: Type.Boolean(),
    accepted: Type.Integer({ description: 'Items stored now' }),
    duplicates: Type.Integer({
      description: 'Items whose messageId was already stored (not stored or performed again)',
    }),
    rejected: Type.Array(
      Type.Object({
        index: Type.Integer(),
        messageId: Type.Union([Type.String(), Type.Null()]),
        code: Type.String(),
        detail: Type.String(),
      }),
      { description: 'Items refused, one by one; also recorded (GET /admin/v1/products/{id}/rejections)' },
    ),
    warnings: Type.Array(
      Type.Object({
        index: Type.Integer(),
        messageId: Type.Union([Type.String(), Type.Null()]),
        code: Type.String(),
        detail: Type.String(),
      }),
      { description: 'Items stored (counted in accepted) whose identity side effect failed, e.g. identity_conflict' },
    ),
  },
  { description: 'accepted + duplicates + rejected.length = the number of items' },
);

const segmentResponses = {
  200: SegmentAnswerSchema,
  400: problemResponse(
    'Body not JSON, not an object, or over its limit (payload_too_large): SDKs drop it without retrying',
  ),
  401: problemResponse('No key, or an unknown, revoked or expired one'),
  403: problemResponse('Not an events or browser key; origin_not_allowed; secret_key_in_browser'),
  429: problemResponse('Rate limited (Retry-After)'),
};

/** One call on its own route (`/v1/track`, `/v1/t`, …): the body is the item. */
async function answerCall(
  segment: Services['segment'],
  kept: KeptBodies,
  request: FastifyRequest,
  call: SegmentCall,
): Promise<SegmentAnswer> {
  const item = withoutKey(bodyObject(request));
  const bytes = Buffer.byteLength(JSON.stringify(item));
  if (bytes > SEGMENT_LIMITS.itemBytes) {
    throw new AppError(
      'payload_too_large',
      `The event is ${bytes} bytes of JSON; one event may be at most ${SEGMENT_LIMITS.itemBytes}.`,
      { status: 400 },
    );
  }
  // Measured once: the service takes this size instead of serialising the item again.
  return segment.ingest(authOf(request), {
    call,
    items: [item],
    itemBytes: [bytes],
    receivedAt: new Date().toISOString(),
    route: request.routeOptions.url ?? call,
    clientIp: request.ip,
    storable: kept.scanned.get(request)?.scan.plain === true,
  });
}

/** A batch (`/v1/batch`, `/v1/import`, …): `batch` holds the items, each naming its `type`. */
async function answerBatch(
  segment: Services['segment'],
  kept: KeptBodies,
  request: FastifyRequest,
): Promise<SegmentAnswer> {
  const body = bodyObject(request);
  const receivedAt = new Date().toISOString();
  const scanned = kept.scanned.get(request);
  const storable = scanned?.scan.plain === true;
  const items = body.batch;
  if (!Array.isArray(items))
    throw new AppError('validation_error', 'The body needs "batch": an array of calls.', {
      errors: [{ pointer: '/batch', message: 'must be an array' }],
    });
  if (items.length > SEGMENT_LIMITS.batchItems) {
    throw new AppError(
      'payload_too_large',
      `A batch holds at most ${SEGMENT_LIMITS.batchItems} calls; this one has ${items.length}.`,
      { status: 400 },
    );
  }
  // Item sizes from the text as sent, when it bounds the re-serialised size (a plain body whose batch
  // items are all objects); otherwise each item is serialised to be measured.
  const spans = scanned?.scan.items;
  const itemBytes =
    storable && spans !== undefined && spans.length === items.length
      ? spans.map((span) => itemBytesBound(scanned!.text, span, SEGMENT_LIMITS.itemBytes))
      : undefined;
  return segment.ingest(authOf(request), {
    storable,
    ...(itemBytes === undefined
      ? {}
      : { itemBytes, sentJson: (index: number) => sentFieldsJson(scanned!.text, scanned!.scan, index) }),
    call: undefined,
    items: items.map((item) =>
      typeof item === 'object' && item !== null && !Array.isArray(item)
        ? withoutKey(item as Record<string, unknown>)
        : item,
    ),
    receivedAt,
    route: request.routeOptions.url ?? '/v1/batch',
    clientIp: request.ip,
    batch: { sentAt: body.sentAt, context: body.context, integrations: body.integrations },
  });
}

export async function segmentRoutes(app: FastifyInstance, options: { services: Services }): Promise<void> {
  const { services } = options;
  const kept: KeptBodies = { unparsed: new WeakMap(), scanned: new WeakMap() };
  parseEveryBodyAsJson(app, kept);
  answerRefusedBodies(app, services, kept);

  /**
   * The write key may travel in the body, so it is looked for once the body is parsed (a preHandler);
   * a body that is not a JSON object is refused first, as no key can be read from it.
   */
  async function authenticate(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    bodyObject(request);
    await segmentAuth(services, request, reply, presentedKey(request));
  }

  for (const path of BATCH_PATHS) {
    app.post(
      path,
      {
        bodyLimit: SEGMENT_LIMITS.batchBodyBytes,
        preHandler: authenticate,
        schema: {
          tags: ['segment'],
          summary: `Segment batch (${path})`,
          description: `Up to ${SEGMENT_LIMITS.batchItems} calls (5 MiB, 32 KiB each) of any type. Always 200 once the body is a JSON object within its limits: good items are stored, bad ones rejected one by one and recorded.`,
          security: [{ writeKeyBasic: [] }],
          response: segmentResponses,
        },
      },
      (request) => answerBatch(services.segment, kept, request),
    );
  }
  for (const [call, short] of SINGLE_ROUTES) {
    for (const path of [`/v1/${call}`, `/v1/${short}`]) {
      app.post(
        path,
        {
          bodyLimit: SEGMENT_LIMITS.singleBodyBytes,
          preHandler: authenticate,
          schema: {
            tags: ['segment'],
            summary: `Segment ${call} (${path})`,
            description: `One ${call} call (at most 32 KiB of JSON). 200 with the per-item answer.`,
            security: [{ writeKeyBasic: [] }],
            response: segmentResponses,
          },
        },
        (request) => answerCall(services.segment, kept, request, call),
      );
    }
  }
  // The browser SDK's metrics sink: accepted and ignored.
  app.post(
    '/v1/m',
    {
      bodyLimit: SEGMENT_LIMITS.singleBodyBytes,
      schema: { tags: ['segment'], summary: 'Segment SDK metrics (ignored)' },
    },
    async () => ({ success: true }),
  );

  settingsRoutes(app, services);
  analyticsJsRoutes(app);
  corsPreflight(app, [
    ...BATCH_PATHS,
    ...SINGLE_ROUTES.flatMap(([call, short]) => [`/v1/${call}`, `/v1/${short}`]),
    '/v1/m',
    '/v1/projects/:key/settings',
    '/sourceConfig',
  ]);
}
