// The Fastify application, built from services (never from env): server options, then one plugin per
// cross-cutting concern of contract §3, then the routes. Each plugin's file says what it guarantees.
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { pino, type DestinationStream, type LoggerOptions } from 'pino';
import type { Services } from '../services.js';
import { EventRecordSchema, EventV2Request } from './schemas/events.js';
import { ProblemSchema } from './schemas/common.js';
import { validatorCompiler } from './validation.js';
import { cachedSerializerFactory } from './serializer-cache.js';
import { bodyPlugin } from './plugins/body.js';
import { clientErrorHandler, errorsPlugin, frameworkErrors } from './plugins/errors.js';
import { AccessLogController, httpServerOptions, lifecyclePlugin, requestId } from './plugins/lifecycle.js';
import { openapiPlugin } from './plugins/openapi.js';
import { eventsV1Route } from './routes/events-v1.js';
import { eventsV2Route } from './routes/events-v2.js';
import { eventsBatchRoute } from './routes/events-batch.js';
import { operationsRoutes } from './routes/operations.js';
import { identifyRoute } from './routes/identify.js';
import { aliasRoute } from './routes/alias.js';
import { trafficReportsRoute } from './routes/traffic-reports.js';
import { segmentRoutes } from './segment/routes.js';
import { adminPlugin } from './admin/index.js';
import { consoleRoutes } from './console.js';
import { authPlugin } from './auth.js';
import { BROWSER_NATIVE_ROUTES, corsPreflight } from './browser-keys.js';

export interface BuildAppOptions {
  logger?: FastifyServerOptions['logger'];
  /** The process's logger, made before the services (main.ts: the migrations log through it); else one of `logger`. */
  loggerInstance?: FastifyBaseLogger;
  /** Where the built console is (default dist/console); tests point it elsewhere. */
  consoleAssetsDir?: string;
}

/**
 * A hop count is applied as a function: Fastify refuses a bare number (a client that reaches Inlet
 * directly could then spoof X-Forwarded-For), so a count is only for deployments reachable through
 * the proxy alone (README). Addresses/CIDRs are checked against the peer, as Fastify does.
 */
function trustProxyOption(setting: Services['config']['trustProxy']): boolean {
  if (setting === false) return false;
  const option: NonNullable<FastifyServerOptions['trustProxy']> =
    typeof setting === 'number' ? (_address: string, hop: number) => hop < setting : setting.join(',');
  // The cast only picks Fastify's HTTP/1 overload of the factory; every form above is a valid trustProxy.
  return option as unknown as boolean;
}

/** The log's level and what it never writes (credentials in request headers). */
export function loggerOptions(level: string): LoggerOptions {
  return { level, redact: { paths: ['req.headers.authorization', 'req.headers.cookie'], remove: true } };
}

/**
 * Where the server's log goes: standard output, written off the event loop. A synchronous write per line was
 * the largest single cost of the access log (one system call per request); asynchronously, the lines logged
 * while one write is under way go out together in the next. Whatever is still buffered is written out
 * synchronously when the process exits (pino's exit hook); a kill -9 loses the lines not yet written.
 */
export function logDestination(fd = 1): DestinationStream {
  return pino.destination({ dest: fd, sync: false });
}

export async function buildApp(services: Services, options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const { config, storage } = services;
  const app = Fastify({
    ...(options.loggerInstance === undefined
      ? { logger: options.logger ?? loggerOptions(config.logLevel) }
      : { loggerInstance: options.loggerInstance }),
    bodyLimit: config.maxBodyBytes,
    // INLET_TRUST_PROXY: whether X-Forwarded-For/-Proto/-Host are believed (per-IP limits, context.ip, settings' apiHost).
    trustProxy: trustProxyOption(config.trustProxy),
    logController: new AccessLogController({ requestIdLogLabel: 'request_id' }),
    genReqId: requestId,
    // Our own onRequest hook answers 503 problem+json while closing (Fastify's would not be problem+json).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true },
    frameworkErrors,
    clientErrorHandler,
    // Slow and idle clients (lifecycle.ts, httpServerOptions): receiving a request is timed, an answer is not.
    requestTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    http: httpServerOptions(config),
    // Response serializers compiled once per process (serializer-cache.ts).
    schemaController: { compilersFactory: { buildSerializer: cachedSerializerFactory } },
  });
  app.server.maxConnections = config.maxConnections;

  app.setValidatorCompiler(validatorCompiler);
  app.addSchema(ProblemSchema);
  app.addSchema(EventRecordSchema);
  app.addSchema(EventV2Request);

  await app.register(lifecyclePlugin, { metrics: services.metrics });
  await app.register(errorsPlugin, {
    isUnavailable: (error) => storage.isUnavailable(error),
    storageClosed: () => storage.closed,
  });
  await app.register(bodyPlugin);
  await app.register(openapiPlugin);
  await app.register(authPlugin);

  operationsRoutes(app, services);
  eventsV1Route(app, services);
  eventsV2Route(app, services);
  eventsBatchRoute(app, services);
  identifyRoute(app, services);
  aliasRoute(app, services);
  trafficReportsRoute(app, services);
  await app.register(segmentRoutes, { services });
  corsPreflight(app, BROWSER_NATIVE_ROUTES);
  // Without INLET_ADMIN_TOKEN the admin API does not exist: its URLs are unknown routes (404).
  if (config.adminToken !== undefined)
    await app.register(adminPlugin, { prefix: '/admin/v1', services, adminToken: config.adminToken });
  // The web console (issue 14): on whenever the admin API is, a page saying why not when it is off.
  consoleRoutes(app, {
    adminApi: config.adminToken !== undefined,
    enabled: config.consoleEnabled,
    ...(options.consoleAssetsDir === undefined ? {} : { assetsDir: options.consoleAssetsDir }),
  });
  // Live streams end cleanly before the server waits for its connections to close.
  app.addHook('preClose', async () => {
    await services.events.streams.close();
  });

  return app;
}
