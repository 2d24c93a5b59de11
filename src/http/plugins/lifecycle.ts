// The life of every request: an id (the client's X-Request-Id when sane, else a fresh UUID) echoed
// on every answer, 503 while shutting down, one access-log line, and the duration metric.
// The hooks here run on every request, so they are callback-style: no promise per hook.
import { randomUUID } from 'node:crypto';
import fp from 'fastify-plugin';
import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type RawRequestDefaultExpression } from 'fastify';
import { AppError } from '../../domain/errors.js';
import type { Metrics } from '../../services/metrics.js';
import { redactUrl } from '../redact.js';

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
    const line = { method: request.method, url: redactUrl(request.url), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 };
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

    app.addHook('onRequest', (request, reply, done) => {
      reply.header('x-request-id', request.id);
      if (closing) {
        reply.header('connection', 'close');
        done(new AppError('unavailable', 'Inlet is shutting down; retry on another instance or in a moment.', { headers: { 'retry-after': '1' } }));
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
