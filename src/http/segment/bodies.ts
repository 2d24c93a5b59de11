// The bodies of the Segment routes: JSON whatever the Content-Type says, an oversized body answered with 400
// (which every SDK drops instead of retrying), and every request refused for its body recorded as a rejection.
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import secureJsonParse from 'secure-json-parse';
import { originAllowed } from '../../domain/api-keys.js';
import { AppError } from '../../domain/errors.js';
import { uuidv7 } from '../../domain/ids.js';
import { MAX_BODY_DEPTH } from '../../domain/json-values.js';
import { scanSegmentBody, type SegmentBodyScan } from '../../domain/segment.js';
import type { Services } from '../../services.js';
import type { AuthContext } from '../../services/key-service.js';
import { presentedKey } from './keys.js';

/** What the body parser keeps of each request for the steps after it. */
export interface KeptBodies {
  /** The text of a body that could not be parsed, kept for the rejection record. */
  unparsed: WeakMap<FastifyRequest, string>;
  /** What the scan before parsing found, and the text, for the handler (item sizes, the storability walk skipped). */
  scanned: WeakMap<FastifyRequest, { text: string; scan: SegmentBodyScan }>;
}

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

export function bodyObject(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new AppError('validation_error', 'The body must be a JSON object.');
  return body as Record<string, unknown>;
}

/** `writeKey` is how the key travels in the body; it is never stored with the event. */
export function withoutKey(body: Record<string, unknown>): Record<string, unknown> {
  if (!('writeKey' in body)) return body;
  const { writeKey: _key, ...rest } = body;
  return rest;
}

/** Every SDK sends JSON, under whatever Content-Type (text/plain, form-urlencoded, none). */
export function parseEveryBodyAsJson(app: FastifyInstance, kept: KeptBodies): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, body, done) => {
    try {
      const text = body as string;
      const scan = scanSegmentBody(text, MAX_BODY_DEPTH);
      const parsed = parseAnyJson(text, scan);
      kept.scanned.set(request, { text, scan });
      done(null, parsed);
    } catch (error) {
      kept.unparsed.set(request, body as string);
      done(error as Error, undefined);
    }
  });
}

/**
 * The key of a request refused before the handler authenticated it: one presented in a header or the query
 * (the body could not be read) that is an events key sent without an Origin, or a browser key from one of
 * its origins; undefined when there is none, or it may not be used from here.
 */
async function keyOfRefused(keys: Services['keys'], request: FastifyRequest): Promise<AuthContext | undefined> {
  const key = presentedKey(request);
  if (key === undefined) return undefined;
  let auth: AuthContext;
  try {
    auth = await keys.authenticateKey(key, ['events', 'browser']);
  } catch {
    return undefined; // an unknown, revoked or wrong kind of key: nobody to record it for
  }
  const origin = request.headers.origin;
  const usable =
    auth.kind === 'events'
      ? origin === undefined
      : origin === undefined || originAllowed(origin, auth.allowedOrigins ?? []);
  return usable ? auth : undefined;
}

/** The refused body as it is recorded: its text, the parsed body without the key, or why it was not kept. */
function refusedItem(kept: KeptBodies, request: FastifyRequest): unknown {
  const text = kept.unparsed.get(request);
  if (text !== undefined) return text;
  const parsed = request.body;
  if (parsed === undefined || parsed === null)
    return `(not kept: the body was over the ${request.routeOptions.bodyLimit}-byte limit of ${request.routeOptions.url})`;
  return withoutKey(
    typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : { body: parsed },
  );
}

/**
 * A whole request refused for its body (not JSON, not an object, no batch array, over a limit) is
 * recorded too, as one rejection holding the body as received (segment-compat: nothing an SDK sends is
 * dropped without a trace). Only when the key is known and may be used from here: the one the handler
 * authenticated, or one `keyOfRefused` finds.
 */
async function recordRefusal(
  services: Pick<Services, 'keys' | 'rejections'>,
  kept: KeptBodies,
  request: FastifyRequest,
  error: AppError,
): Promise<void> {
  // Taken before the key lookup below, so that refusals are listed in the order they were answered, not in
  // the order their keys were looked up (a request refused later, with its key cached, came first).
  const id = uuidv7();
  const receivedAt = new Date().toISOString();
  const auth = request.auth ?? (await keyOfRefused(services.keys, request));
  if (auth === undefined) return;
  const parsed = request.body;
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
        item: refusedItem(kept, request),
        id,
      },
    ],
    receivedAt,
  );
}

/**
 * Segment answers an oversized body with 400, which SDKs drop; a 413 would be retried by some. A request
 * refused for its body is recorded (`recordRefusal`); every other error goes to the app's handler.
 */
export function answerRefusedBodies(
  app: FastifyInstance,
  services: Pick<Services, 'keys' | 'rejections'>,
  kept: KeptBodies,
): void {
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
      void recordRefusal(services, kept, request, refused).catch((failure: unknown) =>
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
}
