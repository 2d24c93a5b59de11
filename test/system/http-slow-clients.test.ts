// Slow and idle clients (issue 9, clarifications §12): receiving a request is timed (headers, then
// headers + body), idle keep-alive sockets are closed, and an answer is never cut however long it
// takes. Thousands of stalled sockets neither stop normal requests nor blow up memory.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/http/app.js';
import { ADMIN_TOKEN, createTestServices } from '../helpers.js';
import { parseResponse, requestBytes } from '../support/raw-http.js';

const HEADERS_TIMEOUT_MS = 600;
const REQUEST_TIMEOUT_MS = 1200;
const KEEP_ALIVE_TIMEOUT_MS = 900;

let app: FastifyInstance;
let port: number;
let closeServices: () => Promise<void>;

before(async () => {
  const created = await createTestServices({
    headersTimeoutMs: HEADERS_TIMEOUT_MS,
    requestTimeoutMs: REQUEST_TIMEOUT_MS,
    keepAliveTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  });
  closeServices = created.close;
  app = await buildApp(created.services, { logger: false });
  // A long answer, streamed over 2.5 s: longer than every receive timeout above.
  app.get('/test/slow-answer', (_request, reply) => {
    reply.type('text/plain');
    const stream = new PassThrough();
    let sent = 0;
    const timer = setInterval(() => {
      stream.write(`chunk ${sent}\n`);
      if (++sent === 5) {
        clearInterval(timer);
        stream.end();
      }
    }, 500);
    return reply.send(stream);
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as { port: number }).port;
});
after(async () => {
  await app.close();
  await closeServices();
});

interface Watched {
  socket: Socket;
  received: string;
  closedAt?: number;
}

function open(first?: string | Buffer): Promise<Watched> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const watched: Watched = { socket, received: '' };
    socket.on('data', (chunk) => (watched.received += chunk.toString('latin1')));
    socket.on('close', () => (watched.closedAt = Date.now()));
    socket.on('error', () => {});
    socket.once('connect', () => {
      if (first !== undefined) socket.write(first);
      resolve(watched);
    });
    socket.once('error', reject);
  });
}

async function until(condition: () => boolean, timeoutMs: number): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

// The check runs every headersTimeout / 4, so a socket lives at most that much past its timeout.
const SLACK_MS = HEADERS_TIMEOUT_MS / 4 + 400;

describe('receive timeouts', () => {
  it('partial headers: 408 request_timeout problem+json, then the connection is closed', async () => {
    const started = Date.now();
    const s = await open('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    await until(() => s.closedAt !== undefined, HEADERS_TIMEOUT_MS + SLACK_MS + 1000);
    const elapsed = s.closedAt! - started;
    assert.ok(elapsed >= HEADERS_TIMEOUT_MS - 50, `closed after ${elapsed} ms`);
    const answer = parseResponse(s.received);
    assert.equal(answer?.status, 408, s.received);
    assert.match(answer!.headers['content-type']!, /application\/problem\+json/);
    assert.equal(JSON.parse(answer!.body).code, 'request_timeout');
    assert.ok(answer!.headers['x-request-id']);
  });

  it('a connection that never sends a byte is closed after the headers timeout', async () => {
    const started = Date.now();
    const s = await open();
    await until(() => s.closedAt !== undefined, HEADERS_TIMEOUT_MS + SLACK_MS + 1000);
    assert.ok(s.closedAt! - started >= HEADERS_TIMEOUT_MS - 50);
  });

  it('a body that never finishes: 408 after the request timeout', async () => {
    const started = Date.now();
    const head = requestBytes('POST', '/admin/v1/products', { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', 'content-length': '1000' });
    const s = await open(Buffer.concat([head, Buffer.from('{"subject_type":')]));
    await until(() => s.closedAt !== undefined, REQUEST_TIMEOUT_MS + SLACK_MS + 1000);
    const elapsed = s.closedAt! - started;
    assert.ok(elapsed >= REQUEST_TIMEOUT_MS - 50 && elapsed < REQUEST_TIMEOUT_MS + SLACK_MS + 500, `closed after ${elapsed} ms`);
    const answer = parseResponse(s.received);
    assert.equal(answer?.status, 408, s.received);
    assert.equal(JSON.parse(answer!.body).code, 'request_timeout');
  });

  it('an idle keep-alive connection is closed after the keep-alive timeout, without an answer', async () => {
    const s = await open(requestBytes('GET', '/healthz', {}));
    await until(() => parseResponse(s.received) !== undefined, 2000);
    const answered = Date.now();
    assert.equal(parseResponse(s.received)?.status, 200);
    await until(() => s.closedAt !== undefined, KEEP_ALIVE_TIMEOUT_MS + SLACK_MS + 1000);
    const idle = s.closedAt! - answered;
    assert.ok(idle >= KEEP_ALIVE_TIMEOUT_MS - 100, `closed after ${idle} ms idle`);
    // Nothing after the one answer: no unsolicited 408 on an idle keep-alive socket.
    assert.equal([...s.received.matchAll(/HTTP\/1\.1 /g)].length, 1, s.received);
  });

  it('a long answer (2.5 s, beyond every receive timeout) is not cut', async () => {
    const s = await open(requestBytes('GET', '/test/slow-answer', { connection: 'close' }));
    await until(() => s.closedAt !== undefined, 6000);
    assert.match(s.received, /^HTTP\/1\.1 200/);
    for (let i = 0; i < 5; i++) assert.match(s.received, new RegExp(`chunk ${i}\n`));
    assert.match(s.received, /\r\n0\r\n\r\n$/, 'the chunked answer ended properly');
  });
});

describe('thousands of stalled sockets', () => {
  const STALLED = Number(process.env.INLET_TEST_STALLED_SOCKETS ?? 3000);
  let slowApp: FastifyInstance;
  let slowPort: number;
  let closeSlow: () => Promise<void>;

  before(async () => {
    // Timeouts long enough that every stalled socket is open at once before the first expires.
    const created = await createTestServices({ headersTimeoutMs: 4000, requestTimeoutMs: 5000, keepAliveTimeoutMs: 5000 });
    closeSlow = created.close;
    slowApp = await buildApp(created.services, { logger: false });
    await slowApp.listen({ port: 0, host: '127.0.0.1' });
    slowPort = (slowApp.server.address() as { port: number }).port;
  });
  after(async () => {
    await slowApp.close();
    await closeSlow();
  });

  function openOn(targetPort: number, first?: Buffer): Promise<Watched> {
    return new Promise((resolve, reject) => {
      const socket = connect(targetPort, '127.0.0.1');
      const watched: Watched = { socket, received: '' };
      socket.on('data', (chunk) => (watched.received += chunk.toString('latin1')));
      socket.on('close', () => (watched.closedAt = Date.now()));
      socket.on('error', () => {});
      socket.once('connect', () => {
        if (first !== undefined) socket.write(first);
        resolve(watched);
      });
      socket.once('error', reject);
    });
  }

  it(`${STALLED} stalled sockets (idle, partial headers, partial body): normal requests still answered, memory bounded, all closed by the timeouts`, async () => {
    const partialHeaders = Buffer.from('POST /api/v2/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ');
    const partialBody = Buffer.concat([
      requestBytes('POST', '/admin/v1/products', { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', 'content-length': '100000' }),
      Buffer.from('{"name":"'),
    ]);
    const kinds = [undefined, partialHeaders, partialBody];
    global.gc?.();
    const rssBefore = process.memoryUsage().rss;
    const stalled: Watched[] = [];
    for (let i = 0; i < STALLED; i += 250) {
      const batch = Array.from({ length: Math.min(250, STALLED - i) }, (_, j) => openOn(slowPort, kinds[(i + j) % 3]));
      stalled.push(...(await Promise.all(batch)));
    }
    const opened = Date.now();
    const rssStalled = process.memoryUsage().rss;

    // Normal requests, each on its own connection, while every stalled socket is open.
    const latencies: number[] = [];
    for (let i = 0; i < 30; i++) {
      const started = Date.now();
      const s = await openOn(slowPort, requestBytes('GET', '/healthz', { connection: 'close' }));
      await until(() => s.closedAt !== undefined, 3000);
      assert.equal(parseResponse(s.received)?.status, 200, s.received);
      latencies.push(Date.now() - started);
    }
    const stillOpen = stalled.filter((s) => s.closedAt === undefined).length;
    assert.equal(stillOpen, STALLED, 'the stalled sockets were all still open while the normal requests ran');

    await until(() => stalled.every((s) => s.closedAt !== undefined), 5000 + 5000 / 4 + 3000);
    const allClosed = Date.now() - opened;
    const rssGrowthMb = (rssStalled - rssBefore) / 1024 / 1024;
    // Client and server sockets live in this one process: the figure covers both ends.
    console.log(
      `stalled sockets: ${STALLED}; RSS +${rssGrowthMb.toFixed(1)} MiB with all open (both ends); ` +
        `normal requests p50 ${latencies.sort((a, b) => a - b)[15]} ms, max ${latencies.at(-1)} ms; all closed ${allClosed} ms after opening`,
    );
    assert.ok(rssGrowthMb < 200, `RSS grew ${rssGrowthMb.toFixed(1)} MiB`);
    assert.ok(latencies.at(-1)! < 2000, `a normal request took ${latencies.at(-1)} ms`);
    const timedOut = stalled.filter((s) => parseResponse(s.received)?.status === 408).length;
    assert.ok(timedOut >= (STALLED * 2) / 3 - 5, `${timedOut} of ${STALLED} were answered 408`);
    const connections = await new Promise<number>((resolve, reject) => slowApp.server.getConnections((error, count) => (error ? reject(error) : resolve(count))));
    assert.equal(connections, 0);
  });
});
