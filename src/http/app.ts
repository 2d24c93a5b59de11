// The Fastify application: cross-cutting rules of contract §3 (problem+json errors, request ids,
// JSON-only bodies, gzip, body limits), OpenAPI, and every route. Built from services, never from env.
import { randomUUID } from 'node:crypto';
import { createGunzip } from 'node:zlib';
import secureJsonParse from 'secure-json-parse';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { AppError, type ErrorCode } from '../domain/errors.js';
import type { Services } from '../services.js';
import { EventRecordSchema, EventV2Request } from './schemas/events.js';
import { ProblemSchema } from './schemas/common.js';
import { validatorCompiler } from './validation.js';
import { eventsV1Route } from './routes/events-v1.js';
import { eventsV2Route } from './routes/events-v2.js';
import { eventsBatchRoute } from './routes/events-batch.js';
import { adminRoutes } from './routes/admin-products.js';
import { operationsRoutes } from './routes/operations.js';
import { identifyRoute } from './routes/identify.js';
import { aliasRoute } from './routes/alias.js';
import { adminUserRoutes } from './routes/admin-users.js';
import { trafficReportsRoute } from './routes/traffic-reports.js';
import { adminTrafficRoutes } from './routes/admin-traffic.js';
import { adminEventRoutes } from './routes/admin-events.js';
import { segmentRoutes } from './segment/routes.js';
import { redactUrl } from './redact.js';
import { adminRejectionRoutes } from './routes/admin-rejections.js';
import { BROWSER_NATIVE_ROUTES, corsPreflight } from './browser-keys.js';

/**
 * One access-log line per request (method, url, status, time) instead of Fastify's two
 * ("incoming request" + "request completed"): the same information at half the logging cost on the
 * ingest path.
 */
class AccessLogController extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = { method: request.method, url: redactUrl(request.url), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 };
    if (error) reply.log.error({ ...line, err: error }, 'request errored');
    else reply.log.info(line, 'request');
  }
}

export interface BuildAppOptions {
  logger?: FastifyServerOptions['logger'];
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

const FASTIFY_ERRORS: Record<string, { code: ErrorCode; detail: string }> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type', detail: 'Send the body as JSON with "Content-Type: application/json".' },
  FST_ERR_CTP_INVALID_TYPE: { code: 'unsupported_media_type', detail: 'Send the body as JSON with "Content-Type: application/json".' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'invalid_json', detail: 'The body is empty; send a JSON object.' },
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid_json', detail: 'The body is not valid JSON.' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'validation_error', detail: 'Content-Length does not match the body.' },
  Z_DATA_ERROR: { code: 'invalid_json', detail: 'The body is not valid gzip (Content-Encoding: gzip).' },
  Z_BUF_ERROR: { code: 'invalid_json', detail: 'The gzip body is truncated.' },
};

/** Errors of the database driver that mean "storage unreachable, retry later" rather than a bug. */
function isStorageUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return (
    typeof code === 'string' &&
    (['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_IOERR', 'SQLITE_FULL'].includes(code) ||
      code.startsWith('08') || // connection exception
      code === '57P01' || // admin shutdown
      code === '57P03' || // cannot connect now
      code === '53300' || // too many connections
      code === '40P01' || // deadlock detected: the transaction was rolled back, a retry is safe
      code === '40001') // serialization failure: likewise
  );
}

/**
 * Parses a JSON body: UTF-8 only, and `__proto__` / `constructor.prototype` keys refused (they are
 * valid JSON but a prototype-pollution vector), each with its own clear answer.
 */
function parseJsonBody(contentType: string | undefined, body: string): unknown {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw new AppError('unsupported_media_type', `charset "${charset}" is not supported; send the JSON body as UTF-8.`);
  }
  if (body.length === 0) throw new AppError('invalid_json', 'The body is empty; send a JSON object.');
  try {
    return secureJsonParse(body, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    const message = (error as Error).message;
    if (/prototype/i.test(message)) {
      throw new AppError('validation_error', 'The body uses "__proto__" or "constructor.prototype" as a key; those keys are refused.');
    }
    throw new AppError('invalid_json', `The body is not valid JSON: ${message}.`);
  }
}

function toAppError(
  error: FastifyError | Error,
  bodyLimit: number | undefined,
  storage: { readonly closed: boolean; isUnavailable(error: unknown): boolean },
): AppError {
  if (error instanceof AppError) return error;
  const code = (error as FastifyError).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new AppError(
      'payload_too_large',
      bodyLimit === undefined ? 'The body is too large.' : `The body is larger than ${bodyLimit} bytes (after decompression), the limit of this endpoint.`,
    );
  }
  const known = code === undefined ? undefined : FASTIFY_ERRORS[code];
  if (known !== undefined) return new AppError(known.code, known.detail);
  if (error instanceof SyntaxError && (error as FastifyError).statusCode === 400) return new AppError('invalid_json', `The body is not valid JSON: ${error.message}`);
  if (isStorageUnavailable(error) || isStorageUnavailable((error as { cause?: unknown }).cause ?? {}) || storage.isUnavailable(error)) {
    return new AppError('unavailable', 'Storage is unavailable; nothing from this request was stored. Retry later.', { cause: error });
  }
  const status = (error as FastifyError).statusCode;
  if (status === 404) return new AppError('not_found', error.message);
  if (status === 415) return new AppError('unsupported_media_type', error.message);
  if (status === 413) return new AppError('payload_too_large', error.message);
  if (status !== undefined && status >= 400 && status < 500) return new AppError('validation_error', error.message);
  // Once storage was closed (shutdown), every query fails with a driver-specific error: that is
  // "unavailable, retry" for the client, not a bug.
  if (storage.closed) return new AppError('unavailable', 'Storage is unavailable; nothing from this request was stored. Retry later.', { cause: error });
  return new AppError('internal', 'An unexpected error occurred. It has been logged with this request id.', { cause: error });
}

/**
 * A hop count is applied as a function: Fastify refuses a bare number (a client that reaches Inlet
 * directly could then spoof X-Forwarded-For), so a count is only for deployments reachable through
 * the proxy alone (README). Addresses/CIDRs are checked against the peer, as Fastify does.
 */
function trustProxyOption(setting: Services['config']['trustProxy']): boolean {
  if (setting === false) return false;
  const option: NonNullable<FastifyServerOptions['trustProxy']> = typeof setting === 'number' ? (_address: string, hop: number) => hop < setting : setting.join(',');
  // The cast only picks Fastify's HTTP/1 overload of the factory; every form above is a valid trustProxy.
  return option as unknown as boolean;
}

export async function buildApp(services: Services, options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const { config } = services;
  const app = Fastify({
    logger: options.logger ?? {
      level: config.logLevel,
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie'], remove: true },
    },
    bodyLimit: config.maxBodyBytes,
    // INLET_TRUST_PROXY: whether X-Forwarded-For/-Proto/-Host are believed (per-IP limits, context.ip, settings' apiHost).
    trustProxy: trustProxyOption(config.trustProxy),
    logController: new AccessLogController({ requestIdLogLabel: 'request_id' }),
    genReqId(request) {
      const sent = request.headers['x-request-id'];
      return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) ? sent : randomUUID();
    },
    // Our own onRequest hook answers 503 problem+json while closing (Fastify's would not be problem+json).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true },
    // Errors Fastify raises before routing (a malformed URL such as "/api/v2/%") skip hooks and the
    // error handler; without this they would be Fastify's own JSON, without X-Request-Id.
    frameworkErrors(error, request, reply) {
      const appError =
        error.code === 'FST_ERR_BAD_URL'
          ? new AppError('validation_error', 'The URL is not valid (malformed percent-encoding).')
          : new AppError('validation_error', 'The request could not be routed.');
      void (reply as FastifyReply)
        .code(appError.status)
        .header('x-request-id', request.id)
        .type('application/problem+json')
        .serializer(JSON.stringify)
        .send(appError.toProblem(request.id));
    },
  });

  // JSON only (contract §3): Fastify's default text/plain parser would let other bodies through.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    try {
      done(null, parseJsonBody(request.headers['content-type'], body as string));
    } catch (error) {
      done(error as Error, undefined);
    }
  });

  app.setValidatorCompiler(validatorCompiler);
  app.addSchema(ProblemSchema);
  app.addSchema(EventRecordSchema);
  app.addSchema(EventV2Request);

  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  // The hooks that run on every request are callback-style: no promise per hook on the hot path.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    if (closing) {
      reply.header('connection', 'close');
      done(new AppError('unavailable', 'Inlet is shutting down; retry on another instance or in a moment.', { headers: { 'retry-after': '1' } }));
      return;
    }
    done();
  });

  // gzip request bodies: decompressed as they stream in, so the body limit applies to the
  // decompressed size (a small zip bomb is refused with 413 without being inflated whole).
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const encoding = request.headers['content-encoding']?.trim().toLowerCase();
    if (encoding === undefined || encoding === '' || encoding === 'identity') {
      done(null, payload);
      return;
    }
    if (encoding !== 'gzip') {
      done(new AppError('unsupported_media_type', `Content-Encoding "${encoding}" is not supported; send gzip or no encoding.`));
      return;
    }
    const gunzip = createGunzip() as ReturnType<typeof createGunzip> & { receivedEncodedLength: number };
    gunzip.receivedEncodedLength = 0;
    payload.on('data', (chunk: Buffer) => {
      gunzip.receivedEncodedLength += chunk.length;
    });
    payload.on('error', (error) => gunzip.destroy(error));
    payload.pipe(gunzip);
    done(null, gunzip);
  });

  // Responses finished while closing end their keep-alive connection, so the server can close.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });

  app.addHook('onResponse', (request, reply, done) => {
    services.metrics.httpDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
    done();
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const appError = toAppError(error, request.routeOptions.bodyLimit, services.storage);
    if (appError.status >= 500) {
      request.log.error({ err: appError.cause ?? error, code: appError.code }, 'request failed');
    }
    for (const [name, value] of Object.entries(appError.headers)) reply.header(name, value);
    // Storage away (a failover, a restart): tell clients when to retry; nothing of the request was stored
    // unless the commit's outcome was unknown, and then the retry is answered as a duplicate.
    if (appError.code === 'unavailable' && appError.headers['retry-after'] === undefined) reply.header('retry-after', '1');
    if (appError.code === 'unauthorized') reply.header('www-authenticate', 'Bearer');
    reply
      .code(appError.status)
      .type('application/problem+json')
      .serializer(JSON.stringify)
      .send(appError.toProblem(request.id));
  });

  app.setNotFoundHandler((request, reply) => {
    const error = new AppError('not_found', `No route ${request.method} ${request.url.split('?')[0]}.`);
    reply.code(404).type('application/problem+json').send(error.toProblem(request.id));
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Inlet API',
        version: '1.0.0',
        description:
          'Product events and identity. Write endpoints take an events key (inlet_ev_…), the traffic reports endpoint a reports key (inlet_rp_…), the admin API the operator token. Every error is application/problem+json with a stable `code`.',
      },
      components: {
        securitySchemes: {
          eventsKey: { type: 'http', scheme: 'bearer', description: 'Events API key (inlet_ev_…)' },
          reportsKey: { type: 'http', scheme: 'bearer', description: 'Reports API key (inlet_rp_…)' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'INLET_ADMIN_TOKEN' },
          writeKeyBasic: { type: 'http', scheme: 'basic', description: 'Segment write key (an events key) as the Basic user name; also X-Write-Key, "writeKey" in the body or ?writeKey=' },
        },
      },
      tags: [
        { name: 'events', description: 'Event ingestion' },
        { name: 'identity', description: 'Users: identify and alias' },
        { name: 'admin', description: 'Products and keys (operators)' },
        { name: 'traffic', description: 'Traffic reports and their sources (GA4, Plausible)' },
        { name: 'operations', description: 'Health and metrics' },
        { name: 'segment', description: 'Segment- and RudderStack-compatible ingestion (their SDKs, unchanged)' },
      ],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  operationsRoutes(app, services);
  eventsV1Route(app, services);
  eventsV2Route(app, services);
  eventsBatchRoute(app, services);
  identifyRoute(app, services);
  aliasRoute(app, services);
  trafficReportsRoute(app, services);
  await app.register(segmentRoutes, { services });
  corsPreflight(app, BROWSER_NATIVE_ROUTES);
  if (config.adminToken !== undefined) {
    adminRoutes(app, services, config.adminToken);
    adminUserRoutes(app, services, config.adminToken);
    adminTrafficRoutes(app, services, config.adminToken);
    adminEventRoutes(app, services, config.adminToken);
    adminRejectionRoutes(app, services, config.adminToken);
  }
  // Live streams end cleanly before the server waits for its connections to close.
  app.addHook('preClose', async () => {
    await services.events.streams.close();
  });

  return app;
}

