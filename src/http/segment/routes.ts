// The Segment-compatible routes (segment-compat.md B), one encapsulated plugin: its own body parser
// (JSON whatever the Content-Type says), its own answer to an oversized body (400, which every SDK
// drops instead of retrying), key lookup from Basic auth, X-Write-Key, the body or the query.
import { Type } from '@sinclair/typebox';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import secureJsonParse from 'secure-json-parse';
import { originAllowed } from '../../domain/api-keys.js';
import { AppError } from '../../domain/errors.js';
import { uuidv7 } from '../../domain/ids.js';
import { MAX_BODY_DEPTH } from '../../domain/json-values.js';
import {
  itemBytesBound,
  scanSegmentBody,
  sentFieldsJson,
  SEGMENT_LIMITS,
  type SegmentBodyScan,
  type SegmentCall,
} from '../../domain/segment.js';
import type { Services } from '../../services.js';
import type { AuthContext } from '../../services/key-service.js';
import { authOf } from '../auth.js';
import { problemResponse } from '../schemas/common.js';
import { corsPreflight } from '../browser-keys.js';
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

function parseAnyJson(body: string, scan: SegmentBodyScan): unknown {
  if (body.length === 0) throw new AppError('invalid_json', 'The body is empty; send a JSON object.');
  if (scan.tooDeep) {
    throw new AppError(
      'validation_error',
      `The body nests arrays and objects more than ${MAX_BODY_DEPTH} levels deep.`,
      { errors: [{ pointer: '', message: `is nested more than ${MAX_BODY_DEPTH} levels deep` }] },
    );
  }
  try {
    return secureJsonParse(body, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    const message = (error as Error).message;
    if (/prototype/i.test(message))
      throw new AppError(
        'validation_error',
        'The body uses "__proto__" or "constructor.prototype" as a key; those keys are refused.',
      );
    throw new AppError('invalid_json', `The body is not valid JSON: ${message}.`);
  }
}

function bodyObject(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new AppError('validation_error', 'The body must be a JSON object.');
  return body as Record<string, unknown>;
}

/** `writeKey` is how the key travels in the body; it is never stored with the event. */
function withoutKey(body: Record<string, unknown>): Record<string, unknown> {
  if (!('writeKey' in body)) return body;
  const { writeKey: _key, ...rest } = body;
  return rest;
}

export async function segmentRoutes(app: FastifyInstance, options: { services: Services }): Promise<void> {
  const { services } = options;

  /** The text of a body that could not be parsed, kept for the rejection record. */
  const unparsedBodies = new WeakMap<FastifyRequest, string>();
  /** What the scan before parsing found, and the text, for the handler (item sizes, the storability walk skipped). */
  const scannedBodies = new WeakMap<FastifyRequest, { text: string; scan: SegmentBodyScan }>();

  // Every SDK sends JSON, under whatever Content-Type (text/plain, form-urlencoded, none).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, body, done) => {
    try {
      const text = body as string;
      const scan = scanSegmentBody(text, MAX_BODY_DEPTH);
      const parsed = parseAnyJson(text, scan);
      scannedBodies.set(request, { text, scan });
      done(null, parsed);
    } catch (error) {
      unparsedBodies.set(request, body as string);
      done(error as Error, undefined);
    }
  });

  /**
   * A whole request refused for its body (not JSON, not an object, no batch array, over a limit) is
   * recorded too, as one rejection holding the body as received (segment-compat: nothing an SDK sends is
   * dropped without a trace). Only when the key is known and may be used from here: the one the handler
   * authenticated, or one presented in a header or the query (the body could not be read) that is an
   * events key sent without an Origin, or a browser key from one of its origins.
   */
  async function recordRefusal(request: FastifyRequest, error: AppError): Promise<void> {
    // Taken before the key lookup below, so that refusals are listed in the order they were answered, not in
    // the order their keys were looked up (a request refused later, with its key cached, came first).
    const id = uuidv7();
    const receivedAt = new Date().toISOString();
    let auth: AuthContext | null = request.auth;
    if (auth === null) {
      const key = presentedKey(request);
      if (key === undefined) return;
      try {
        auth = await services.keys.authenticateKey(key, ['events', 'browser']);
      } catch {
        return; // an unknown, revoked or wrong kind of key: nobody to record it for
      }
      const origin = request.headers.origin;
      if (
        auth.kind === 'events'
          ? origin !== undefined
          : origin !== undefined && !originAllowed(origin, auth.allowedOrigins ?? [])
      )
        return;
    }
    const text = unparsedBodies.get(request);
    const parsed = request.body;
    const item =
      text !== undefined
        ? text
        : parsed !== undefined && parsed !== null
          ? withoutKey(
              typeof parsed === 'object' && !Array.isArray(parsed)
                ? (parsed as Record<string, unknown>)
                : { body: parsed },
            )
          : `(not kept: the body was over the ${request.routeOptions.bodyLimit}-byte limit of ${request.routeOptions.url})`;
    const messageId =
      typeof (parsed as { messageId?: unknown } | undefined)?.messageId === 'string'
        ? (parsed as { messageId: string }).messageId
        : null;
    services.rejections.record(
      auth,
      request.routeOptions.url ?? request.url,
      [
        {
          index: 0,
          messageId,
          code: error.code,
          detail: `The whole request was refused: ${error.message}`,
          severity: 'rejected',
          item,
          id,
        },
      ],
      receivedAt,
    );
  }

  // Segment answers an oversized body with 400, which SDKs drop; a 413 would be retried by some.
  app.setErrorHandler((error: FastifyError | AppError, request, reply) => {
    const tooLarge =
      (error as FastifyError).code === 'FST_ERR_CTP_BODY_TOO_LARGE' ||
      (error instanceof AppError && error.code === 'payload_too_large');
    const refused = tooLarge
      ? new AppError('payload_too_large', error.message, { status: 400 })
      : error instanceof AppError && (error.code === 'invalid_json' || error.code === 'validation_error')
        ? error
        : undefined;
    if (refused !== undefined) {
      void recordRefusal(request, refused).catch((failure: unknown) =>
        request.log.warn({ err: failure }, 'a refused Segment request could not be recorded'),
      );
    }
    if (!tooLarge) throw error;
    const limit = request.routeOptions.bodyLimit;
    const appError =
      error instanceof AppError
        ? new AppError('payload_too_large', error.message, { status: 400 })
        : new AppError(
            'payload_too_large',
            `The body is larger than ${limit} bytes (after decompression), the limit of this route.`,
            { status: 400 },
          );
    void reply
      .code(400)
      .type('application/problem+json')
      .serializer(JSON.stringify)
      .send(appError.toProblem(request.id));
  });

  /**
   * The write key may travel in the body, so it is looked for once the body is parsed (a preHandler);
   * a body that is not a JSON object is refused first, as no key can be read from it.
   */
  async function authenticate(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    bodyObject(request);
    await segmentAuth(services, request, reply, presentedKey(request));
  }

  const answer = async (request: FastifyRequest, call: SegmentCall | undefined) => {
    const body = bodyObject(request);
    const auth = authOf(request);
    const receivedAt = new Date().toISOString();
    const scanned = scannedBodies.get(request);
    const storable = scanned?.scan.plain === true;
    if (call !== undefined) {
      const item = withoutKey(body);
      const bytes = Buffer.byteLength(JSON.stringify(item));
      if (bytes > SEGMENT_LIMITS.itemBytes) {
        throw new AppError(
          'payload_too_large',
          `The event is ${bytes} bytes of JSON; one event may be at most ${SEGMENT_LIMITS.itemBytes}.`,
          { status: 400 },
        );
      }
      // Measured once: the service takes this size instead of serialising the item again.
      return services.segment.ingest(auth, {
        call,
        items: [item],
        itemBytes: [bytes],
        receivedAt,
        route: request.routeOptions.url ?? call,
        clientIp: request.ip,
        storable,
      });
    }
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
    return services.segment.ingest(auth, {
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
  };

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
      (request) => answer(request, undefined),
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
        (request) => answer(request, call),
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
