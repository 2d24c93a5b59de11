// The life of every request: how long receiving it may take (the server's timeouts), an id (the
// client's X-Request-Id when sane, else a fresh UUID) echoed on every answer, the Host and Expect
// rules of HTTP/1.1 answered in problem+json, 503 while shutting down, one access-log line, and the
// duration metric. The hooks here run on every request, so they are callback-style: no promise per hook.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerOptions, ServerResponse } from 'node:http';
import fp from 'fastify-plugin';
import {
  LogController,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type RawRequestDefaultExpression,
} from 'fastify';
import type { Config } from '../../config.js';
import { AppError } from '../../domain/errors.js';
import type { Metrics } from '../../services/metrics.js';
import { redactUrl } from '../redact.js';

/**
 * Node's HTTP server options for slow and idle clients (clarifications §12). Receiving a request is
 * timed by Node's own checker: a connection is on its list from the request's first byte (a new
 * connection: from the connection) until the request's last byte has been parsed, so
 * `headersTimeout` bounds the request line and headers and `requestTimeout` the whole request with its
 * body, and an answer, however long (the live stream, an export, a sync), is never timed: the request
 * behind it was complete when it started. (Node 20, 22 and 24 share that design: `ConnectionsList` in
 * src/node_http_parser.cc.) The checker runs every `connectionsCheckingInterval`; a tenth of the
 * headers timeout, at most 1 s, bounds how late a timeout fires. Fastify's `requestTimeout` option must
 * carry the same value (Fastify sets it on the server after creating it). Idle keep-alive connections
 * are Node's `keepAliveTimeout`. `requireHostHeader: false`: Inlet answers a missing Host itself (below).
 */
export function httpServerOptions(
  config: Pick<Config, 'headersTimeoutMs' | 'requestTimeoutMs' | 'maxHeaderBytes'>,
): ServerOptions {
  return {
    maxHeaderSize: config.maxHeaderBytes,
    headersTimeout: config.headersTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(config.headersTimeoutMs / 10))),
    requireHostHeader: false,
  };
}

/** The Fastify request id, kept on the raw request for the answers written below Fastify (a 408 mid-body). */
export const kRequestId = Symbol('inlet.requestId');
type RawWithId = IncomingMessage & { [kRequestId]?: string };

/** The id a raw request is known by: Fastify's when Fastify saw it, else as Fastify would derive it. */
export function rawRequestId(request: IncomingMessage): string {
  return (request as RawWithId)[kRequestId] ?? requestId(request);
}

/** Writes a problem straight onto a raw response (for the requests Node hands over before Fastify) and closes. */
function answerRaw(res: ServerResponse, id: string, error: AppError): void {
  const body = JSON.stringify(error.toProblem(id));
  res.writeHead(error.status, {
    'content-type': 'application/problem+json',
    'content-length': Buffer.byteLength(body),
    'x-request-id': id,
    connection: 'close',
  });
  res.end(body);
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Fastify's `genReqId`: the client's id when it is safe to log and echo, a fresh UUID otherwise. */
export function requestId(request: RawRequestDefaultExpression): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) ? sent : randomUUID();
}

/**
 * One access-log line per request (method, url, status, time) instead of Fastify's two
 * ("incoming request" + "request completed"): the same information at half the logging cost on the
 * ingest path.
 */
export class AccessLogController extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = {
      method: request.method,
      url: redactUrl(request.url),
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 100) / 100,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request errored');
    else reply.log.info(line, 'request');
  }
}

export const lifecyclePlugin = fp<{ metrics: Metrics }>(
  async (app: FastifyInstance, { metrics }) => {
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });

    // Node answers an Expect other than 100-continue with a bare 417 unless someone listens: we do, in
    // problem+json. The body (if any) is never read, so the connection is closed after the answer.
    app.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      const id = requestId(req);
      app.log.debug({ request_id: id, expect: req.headers.expect }, 'unsupported Expect');
      answerRaw(
        res,
        id,
        new AppError(
          'expectation_failed',
          `Expect "${String(req.headers.expect).slice(0, 100)}" is not supported; only "100-continue" is.`,
          {
            errors: [{ pointer: '/headers/expect', message: 'only 100-continue is supported' }],
          },
        ),
      );
    });

    app.addHook('onRequest', (request, reply, done) => {
      (request.raw as RawWithId)[kRequestId] = request.id;
      reply.header('x-request-id', request.id);
      if (closing) {
        reply.header('connection', 'close');
        done(
          new AppError('unavailable', 'Inlet is shutting down; retry on another instance or in a moment.', {
            headers: { 'retry-after': '1' },
          }),
        );
        return;
      }
      // HTTP/1.1 requires Host (RFC 9112 §3.2); Node's own check would answer a bare 400 without an id.
      if (
        request.headers.host === undefined &&
        request.raw.httpVersionMajor === 1 &&
        request.raw.httpVersionMinor === 1
      ) {
        reply.header('connection', 'close');
        done(
          new AppError('validation_error', 'An HTTP/1.1 request must carry a Host header.', {
            errors: [{ pointer: '/headers/host', message: 'required' }],
          }),
        );
        return;
      }
      done();
    });

    // Responses finished while closing end their keep-alive connection, so the server can close.
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });

    app.addHook('onResponse', (request, reply, done) => {
      metrics.httpDuration.observe(
        { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) },
        reply.elapsedTime / 1000,
      );
      done();
    });
  },
  { name: 'inlet-lifecycle' },
);
