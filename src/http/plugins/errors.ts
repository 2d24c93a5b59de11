// One error model on the wire (contract §3): every error, whichever layer raised it, leaves as RFC 9457
// problem+json with the request id. This plugin renders route and hook errors and unknown routes;
// `frameworkErrors` and `clientErrorHandler` (Fastify constructor options) cover the two places
// hooks never see: URLs Fastify cannot route, and bytes Node's HTTP parser refuses.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import fp from 'fastify-plugin';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { AppError, type ErrorCode } from '../../domain/errors.js';
import { isLingering, lingerThenDestroy } from './body.js';
import { rawRequestId } from './lifecycle.js';

const JSON_ONLY = 'Send the body as JSON with "Content-Type: application/json".';

const FASTIFY_ERRORS: Record<string, { code: ErrorCode; detail: string }> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type', detail: JSON_ONLY },
  FST_ERR_CTP_INVALID_TYPE: { code: 'unsupported_media_type', detail: JSON_ONLY },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'invalid_json', detail: 'The body is empty; send a JSON object.' },
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid_json', detail: 'The body is not valid JSON.' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'validation_error', detail: 'Content-Length does not match the body.' },
  Z_DATA_ERROR: { code: 'invalid_json', detail: 'The body is not valid gzip (Content-Encoding: gzip).' },
  Z_BUF_ERROR: { code: 'invalid_json', detail: 'The gzip body is truncated.' },
};

export interface ErrorsOptions {
  /** Whether an error means "storage unreachable, retry later" (the storage adapter knows its driver's codes). */
  isUnavailable(error: unknown): boolean;
  /** True once storage was closed (shutdown): then every query fails, and that is "retry", not a bug. */
  storageClosed(): boolean;
}

function unavailable(cause: unknown): AppError {
  return new AppError('unavailable', 'Storage is unavailable; nothing from this request was stored. Retry later.', {
    cause,
  });
}

export function toAppError(
  error: FastifyError | Error,
  bodyLimit: number | undefined,
  options: ErrorsOptions,
): AppError {
  if (error instanceof AppError) return error;
  const code = (error as FastifyError).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new AppError(
      'payload_too_large',
      bodyLimit === undefined
        ? 'The body is too large.'
        : `The body is larger than ${bodyLimit} bytes (after decompression), the limit of this endpoint.`,
    );
  }
  const known = code === undefined ? undefined : FASTIFY_ERRORS[code];
  if (known !== undefined) return new AppError(known.code, known.detail);
  if (error instanceof SyntaxError && (error as FastifyError).statusCode === 400)
    return new AppError('invalid_json', `The body is not valid JSON: ${error.message}`);
  if (options.isUnavailable(error) || options.isUnavailable((error as { cause?: unknown }).cause ?? {}))
    return unavailable(error);
  const status = (error as FastifyError).statusCode;
  if (status === 404) return new AppError('not_found', error.message);
  if (status === 415) return new AppError('unsupported_media_type', error.message);
  if (status === 413) return new AppError('payload_too_large', error.message);
  if (status !== undefined && status >= 400 && status < 500) return new AppError('validation_error', error.message);
  if (options.storageClosed()) return unavailable(error);
  return new AppError('internal', 'An unexpected error occurred. It has been logged with this request id.', {
    cause: error,
  });
}

function sendProblem(reply: FastifyReply, requestId: string, error: AppError): void {
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  // Storage away (a failover, a restart): tell clients when to retry; nothing of the request was stored
  // unless the commit's outcome was unknown, and then the retry is answered as a duplicate.
  if (error.code === 'unavailable' && error.headers['retry-after'] === undefined) reply.header('retry-after', '1');
  if (error.code === 'unauthorized') reply.header('www-authenticate', 'Bearer');
  void reply
    .code(error.status)
    .type('application/problem+json')
    .serializer(JSON.stringify)
    .send(error.toProblem(requestId));
}

export const errorsPlugin = fp<ErrorsOptions>(
  async (app: FastifyInstance, options) => {
    app.setErrorHandler((error: FastifyError, request, reply) => {
      const appError = toAppError(error, request.routeOptions.bodyLimit, options);
      if (appError.status >= 500)
        request.log.error({ err: appError.cause ?? error, code: appError.code }, 'request failed');
      sendProblem(reply, request.id, appError);
    });

    app.setNotFoundHandler((request, reply) => {
      sendProblem(
        reply,
        request.id,
        new AppError('not_found', `No route ${request.method} ${request.url.split('?')[0]}.`),
      );
    });
  },
  { name: 'inlet-errors' },
);

/**
 * Errors Fastify raises before routing (a malformed URL such as "/api/v2/%") skip hooks and the error
 * handler; without this they would be Fastify's own JSON, without X-Request-Id.
 */
export const frameworkErrors: NonNullable<FastifyServerOptions['frameworkErrors']> = (error, request, reply) => {
  const appError =
    error.code === 'FST_ERR_BAD_URL'
      ? new AppError('validation_error', 'The URL is not valid (malformed percent-encoding).')
      : new AppError('validation_error', 'The request could not be routed.');
  reply.header('x-request-id', request.id);
  sendProblem(reply as FastifyReply, (request as FastifyRequest).id, appError);
};

/** What Node's HTTP parser refused, as the problem we answer (nothing reached Fastify: no route, no hooks). */
function clientProblem(error: NodeJS.ErrnoException): AppError {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return new AppError(
      'request_timeout',
      'The request (headers and body) was not received within the time allowed (INLET_HEADERS_TIMEOUT_MS, INLET_REQUEST_TIMEOUT_MS); send it faster.',
    );
  }
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    return new AppError(
      'header_too_large',
      'The request headers are larger than the server accepts (INLET_MAX_HEADER_BYTES).',
    );
  }
  return new AppError(
    'validation_error',
    'The request is not valid HTTP/1.1 (request line, headers or framing such as Content-Length).',
  );
}

/** Node's in-flight response on a socket (a request whose headers were parsed and not yet answered in full). */
function responseOn(socket: Socket): ServerResponse | undefined {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
}

/**
 * Calls `then` once no answer is under way on the socket any more: at once if there is none, else
 * after it (and any pipelined answers queued behind it) has finished. `then` gets the in-flight
 * response of a request that is still incomplete, if that is what is left: the request the error is
 * about. An answer that never finishes (a live stream) keeps the connection until it ends; one cut
 * short (the socket closed) ends it all.
 */
function afterAnswersUnderWay(socket: Socket, then: (pending: ServerResponse | undefined) => void): void {
  const response = responseOn(socket);
  if (response === undefined || (!response.headersSent && !response.req.complete)) {
    then(response);
    return;
  }
  let finished = false;
  // Node's own 'finish' listener (added first) hands the socket to the next queued answer, if any.
  response.once('finish', () => {
    finished = true;
    afterAnswersUnderWay(socket, then);
  });
  response.once('close', () => {
    if (!finished) socket.destroy();
  });
}

/**
 * Fastify's default answers a malformed request with its own JSON; this answers it with problem+json
 * and a fresh request id (there was no request to take one from), then closes the connection, as
 * Node does: after a framing error the rest of the stream cannot be trusted.
 *
 * An answer already under way is never cut or written into, whatever the error: the problem is
 * answered after it, in order (a stalled request pipelined behind a live stream or an export, bytes
 * that are not HTTP behind a good request, an EOF inside a body the server had begun to answer).
 *
 * A receive timeout (ERR_HTTP_REQUEST_TIMEOUT, lifecycle.ts) is answered 408: partial headers with a
 * fresh id, a partial body with the id its request already has. A connection that never sent a byte,
 * or one lingering after an early answer (body.ts), is closed without a word.
 */
export function clientErrorHandler(this: FastifyInstance, error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  // Lingering (below, or body.ts): what the client still sends is discarded, and Node's parser, which still
  // sees it, reports each chunk as malformed again: nothing more to answer. A receive timeout just closes.
  if (isLingering(socket)) {
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') socket.destroy();
    return;
  }
  // After a parse error Node closes the connection once the answer under way is written, with
  // socket.destroySoon(): while the client is still sending, that close is a reset, and the reset discards
  // the answer the client has not read yet. Make it a lingering close on this socket.
  (socket as Socket & { destroySoon(): void }).destroySoon = () => {
    if (socket.writable) socket.end();
    lingerThenDestroy(socket);
  };
  afterAnswersUnderWay(socket, (pending) => {
    if (socket.destroyed) return;
    if (
      error.code === 'ERR_HTTP_REQUEST_TIMEOUT' &&
      (isLingering(socket) || (pending === undefined && socket.bytesRead === 0))
    ) {
      socket.destroy();
      return;
    }
    const appError = clientProblem(error);
    const requestId = pending === undefined ? randomUUID() : rawRequestId(pending.req);
    this.log.debug({ err: error, request_id: requestId }, 'malformed or timed-out request');
    if (!socket.writable) {
      // Already ended after the answer under way (Node's destroySoon above): let it linger and close.
      lingerThenDestroy(socket);
      return;
    }
    const body = JSON.stringify(appError.toProblem(requestId));
    // end (FIN after the answer), then a lingering close: the client may still be sending (megabytes that
    // are not HTTP behind a good request, say); destroying while its bytes arrive makes the kernel send a
    // reset, which discards the answers it has not read yet (fuzz seed 20261123 case 37813).
    socket.end(
      `HTTP/1.1 ${appError.status} ${STATUS_CODES[appError.status] ?? ''}\r\ncontent-type: application/problem+json\r\nx-request-id: ${requestId}\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
    lingerThenDestroy(socket);
  });
}
