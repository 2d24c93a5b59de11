// Request bodies (contract §3): JSON only, UTF-8 only, `__proto__` refused; gzip decompressed as it
// streams in so the body limit applies to the decompressed size. And the rule issue 9 was about:
// every stream this plugin creates has its errors handled, and a body nobody reads (415, 401, a
// GET with a body) never stalls or kills anything: its inflater is torn down after the answer and
// the connection closed when the body was not complete.
import type { Socket } from 'node:net';
import { createGunzip, type Gunzip } from 'node:zlib';
import type { IncomingMessage } from 'node:http';
import fp from 'fastify-plugin';
import secureJsonParse from 'secure-json-parse';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../../domain/errors.js';

/**
 * Parses a JSON body: UTF-8 only, and `__proto__` / `constructor.prototype` keys refused (they are
 * valid JSON but a prototype-pollution vector), each with its own clear answer.
 */
export function parseJsonBody(contentType: string | undefined, body: string): unknown {
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
      throw new AppError(
        'validation_error',
        'The body uses "__proto__" or "constructor.prototype" as a key; those keys are refused.',
      );
    }
    throw new AppError('invalid_json', `The body is not valid JSON: ${message}.`);
  }
}

type CountingGunzip = Gunzip & { receivedEncodedLength: number };

/** The inflater of each gzip request still in flight, to tear down if its body was not read to the end. */
const inflaters = new WeakMap<IncomingMessage, CountingGunzip>();

function ignore(): void {}

/**
 * A gunzip fed by the request. Its 'error' always has a listener: Fastify's body reader listens only
 * while it reads (it stops at the body limit), and an unheard 'error' on a stream kills the process.
 */
function inflate(raw: IncomingMessage): CountingGunzip {
  const gunzip = createGunzip() as CountingGunzip;
  gunzip.receivedEncodedLength = 0;
  gunzip.on('error', ignore);
  raw.on('data', (chunk: Buffer) => {
    gunzip.receivedEncodedLength += chunk.length;
  });
  raw.on('error', (error) => gunzip.destroy(error));
  raw.pipe(gunzip);
  inflaters.set(raw, gunzip);
  return gunzip;
}

/** Stops inflating a body that was not read to its end and lets the request's own bytes drain. */
function release(raw: IncomingMessage): void {
  const gunzip = inflaters.get(raw);
  if (gunzip === undefined) return;
  inflaters.delete(raw);
  raw.unpipe(gunzip);
  if (!gunzip.readableEnded) gunzip.destroy();
  // What the client already sent is buffered in the request: read it out so the socket is not
  // left paused (the connection closes after the answer when the body was not complete).
  raw.resume();
}

const lingering = new WeakSet<object>();

/** Whether the socket is discarding the rest of a body after its answer (a receive timeout then just closes it). */
export function isLingering(socket: object): boolean {
  return lingering.has(socket);
}

/** How long a connection closed after an incomplete body keeps discarding what the client still sends. */
const LINGER_MS = 2000;

/**
 * A lingering close (what Apache and nginx do). Node closes a `Connection: close` socket as soon as
 * its answer is written; if the client is still sending the rest of a large body, the bytes that
 * arrive after that make the kernel answer with a reset, and a reset discards the answer the client
 * had not read yet: it sees ECONNRESET instead of its 413 (the fuzz suite found this). So after the
 * answer, keep reading and discarding for a bounded time, until the client closes its side.
 */
function lingerBeforeClosing(raw: IncomingMessage): void {
  const socket = raw.socket;
  if (socket.destroyed) return;
  // Node's server has already called socket.destroySoon(): undo its pending destroy-on-finish.
  socket.removeListener('finish', socket.destroy);
  raw.resume();
  lingerThenDestroy(socket);
}

/**
 * The lingering close itself, for any socket whose last answer is written (or being flushed): discard what
 * the client still sends until it closes its side, for at most LINGER_MS, then destroy. Also used after a
 * malformed request (errors.ts), where the client may still be sending bytes that are not HTTP.
 */
export function lingerThenDestroy(socket: Socket): void {
  if (socket.destroyed || lingering.has(socket)) return;
  lingering.add(socket);
  const timer = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once('end', () => socket.destroy());
  socket.once('close', () => clearTimeout(timer));
  socket.on('data', () => {});
  socket.resume();
}

export const bodyPlugin = fp(
  async (app: FastifyInstance) => {
    // JSON only (contract §3): Fastify's default text/plain parser would let other bodies through.
    // (The Segment routes, in their own scope, read JSON under any Content-Type.)
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
      try {
        done(null, parseJsonBody(request.headers['content-type'], body as string));
      } catch (error) {
        done(error as Error, undefined);
      }
    });

    app.addHook('preParsing', (request, _reply, payload, done) => {
      const encoding = request.headers['content-encoding']?.trim().toLowerCase();
      if (encoding === undefined || encoding === '' || encoding === 'identity') {
        done(null, payload);
        return;
      }
      if (encoding !== 'gzip') {
        done(
          new AppError(
            'unsupported_media_type',
            `Content-Encoding "${encoding}" is not supported; send gzip or no encoding.`,
          ),
        );
        return;
      }
      done(null, inflate(request.raw));
    });

    // A body not received to its end (answered early: 401, 413, 415, …) leaves unknown bytes on the
    // connection: close it after the answer instead of reading or waiting for the rest.
    app.addHook('onSend', (request, reply, payload, done) => {
      if (request.raw.complete === false) reply.header('connection', 'close');
      done(null, payload);
    });

    app.addHook('onResponse', (request, _reply, done) => {
      release(request.raw);
      if (request.raw.complete === false) lingerBeforeClosing(request.raw);
      done();
    });
  },
  { name: 'inlet-body' },
);
