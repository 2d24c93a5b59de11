// The server-sent events transport (WHATWG HTML §9.2): the response headers, message framing, the retry
// hint, heartbeats, back-pressure against a bound of unsent bytes, and closing. What is streamed is the
// route's business; this module knows nothing of events.
import type { FastifyReply, FastifyRequest } from 'fastify';

/** How long a client should wait before reconnecting a dropped stream (the SSE `retry:` field). */
export const STREAM_RETRY_MS = 2000;
/** A comment line this often keeps proxies from closing an idle stream (spec: at least every 15 s). */
export const STREAM_HEARTBEAT_MS = 10_000;
/** A consumer that has not drained below half its bound in this long is given up on. */
const READY_TIMEOUT_MS = 30_000;

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
} as const;

export interface SseMessage {
  /** The id a reconnecting client sends back as Last-Event-ID; none for a live-only message. */
  id?: string;
  event: string;
  /** Serialized as one line of JSON. */
  data: unknown;
}

/** One message in the wire format: JSON has no raw line breaks, so the data is one `data:` line. */
export function frame(message: SseMessage): string {
  const id = message.id === undefined ? '' : `id: ${message.id}\n`;
  return `${id}event: ${message.event}\ndata: ${JSON.stringify(message.data)}\n\n`;
}

/** Long responses are exempt from socket timeouts (light-my-request's fake socket has none). */
export function noSocketTimeout(socket: { setTimeout?: (ms: number) => unknown }): void {
  if (typeof socket.setTimeout === 'function') socket.setTimeout(0);
}

/**
 * The answer to HEAD (Fastify answers it for every GET): the stream's headers, and no stream (Node sends no
 * body to a HEAD, so a held-open answer would never even send its headers).
 */
export function sendSseHead(reply: FastifyReply): FastifyReply {
  return reply.code(200).headers(SSE_HEADERS).send();
}

export interface SseStream {
  readonly ended: boolean;
  /** Writes one message; nothing once the stream has ended. */
  send(message: SseMessage): void;
  /** Writes a comment line (ignored by clients; tools and tests read them). */
  comment(text: string): void;
  /** More than the bound is still unsent: the consumer is too slow. */
  lagging(): boolean;
  /** Resolves true once at most half the bound is unsent; false if the stream closes or stays full too long. */
  ready(): Promise<boolean>;
  /** Ends the stream once: gracefully (`destroy` false) or by cutting the connection. */
  end(destroy: boolean): void;
  /** Called once when the client goes away (after the stream has ended). */
  onClose(listener: () => void): void;
}

/** Takes over the response and starts the stream: headers, the retry hint, a heartbeat until it ends. */
export function startSse(request: FastifyRequest, reply: FastifyReply, bufferBytes: number): SseStream {
  reply.hijack();
  const res = reply.raw;
  // Long-lived on purpose: no socket timeout may end it (the heartbeat keeps proxies awake).
  noSocketTimeout(request.raw.socket);
  res.writeHead(200, {
    ...SSE_HEADERS,
    'x-accel-buffering': 'no',
    'x-request-id': request.id,
    connection: 'keep-alive',
  });
  res.write(`retry: ${STREAM_RETRY_MS}\n\n`);
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
  res.on('close', () => end(true));

  return {
    get ended() {
      return ended;
    },
    send(message) {
      if (!ended) res.write(frame(message));
    },
    comment(text) {
      if (!ended) res.write(`: ${text}\n\n`);
    },
    lagging: () => res.writableLength > bufferBytes,
    ready() {
      if (ended) return Promise.resolve(false);
      if (res.writableLength <= bufferBytes / 2) return Promise.resolve(true);
      return new Promise((resolve) => {
        const timeout = setTimeout(() => resolve(false), READY_TIMEOUT_MS);
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
    end,
    onClose(listener) {
      res.on('close', listener);
    },
  };
}
