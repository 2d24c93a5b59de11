// The live stream (events-out §4) over a real socket: latency, resumption with Last-Event-ID (also
// after a restart on the same database), isolation, the cap on open streams, a slow consumer cut off,
// a clean end on shutdown.
// @test-alone: it measures the heap of the process (test/README.md).
import { strict as assert } from 'node:assert';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../src/config.js';
import { buildApp } from '../src/http/app.js';
import type { Services } from '../src/services.js';
import { ADMIN_TOKEN, bearer, createTestServices, reusableDatabase, type TestDatabase } from './helpers.js';

interface Message {
  id: string;
  event: string;
  data: { uuid: string; subject_id: string; canonical_name: string; key_id: string | null };
}

interface Server {
  app: FastifyInstance;
  services: Services;
  url: string;
  close(): Promise<void>;
  product(): Promise<{ id: string; eventsKey: string }>;
}

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** A server on `database`, or on a database of its own that its close() removes. */
async function startServer(overrides: Partial<Config> = {}, shared?: TestDatabase): Promise<Server> {
  const database = shared ?? reusableDatabase();
  const { services } = await createTestServices({ eventStreamPollMs: 100, ...overrides }, database);
  const app = await buildApp(services, { logger: false });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await app.close();
    await services.close();
    if (shared === undefined) await database.drop();
  };
  cleanups.push(close);
  return {
    app,
    services,
    url,
    close,
    async product() {
      const created = await fetch(`${url}/admin/v1/products`, {
        method: 'POST',
        headers: { ...auth(), 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'stream' }),
      });
      const id = ((await created.json()) as { data: { id: string } }).data.id;
      const key = await fetch(`${url}/admin/v1/products/${id}/keys`, {
        method: 'POST',
        headers: { ...auth(), 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'events' }),
      });
      return { id, eventsKey: ((await key.json()) as { data: { key: string } }).data.key };
    },
  };
}

function auth(): Record<string, string> {
  return { authorization: `Bearer ${ADMIN_TOKEN}` };
}

async function send(server: Server, key: string, subjectIds: string[], properties: object = {}): Promise<string[]> {
  const res = await fetch(`${server.url}/api/v2/events/batch`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({
      events: subjectIds.map((id) => ({
        event_type: 'page',
        action: 'viewed',
        subject_type: 'user',
        subject_id: id,
        properties,
      })),
    }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return (JSON.parse(text) as { data: Array<{ event: { uuid: string } }> }).data.map((item) => item.event.uuid);
}

interface Rejection {
  id: string;
  route: string;
  code: string;
  message_id: string | null;
  key_id: string | null;
}

interface Stream {
  response: IncomingMessage;
  messages: Message[];
  rejections: Rejection[];
  raw: string;
  ended: Promise<void>;
  waitFor(count: number, timeoutMs?: number): Promise<void>;
  /** Resolves once the server says the stream has joined (the ": open" comment). */
  opened(): Promise<void>;
  close(): void;
}

function openStream(
  server: Server,
  productId: string,
  options: { query?: string; lastEventId?: string; pause?: boolean } = {},
): Promise<Stream> {
  return new Promise((resolve) => {
    const req = httpRequest(`${server.url}/admin/v1/products/${productId}/events/stream${options.query ?? ''}`, {
      headers: { ...auth(), ...(options.lastEventId === undefined ? {} : { 'last-event-id': options.lastEventId }) },
    });
    req.on('error', () => {});
    req.on('response', (response) => {
      const stream: Stream = {
        response,
        messages: [],
        rejections: [],
        raw: '',
        ended: new Promise((done) => {
          response.on('end', done);
          response.on('close', done);
          response.on('error', () => done());
          response.socket.on('close', () => done());
        }),
        async waitFor(count, timeoutMs = 5000) {
          const deadline = Date.now() + timeoutMs;
          while (stream.messages.length < count) {
            if (Date.now() > deadline) throw new Error(`waited for ${count} messages, got ${stream.messages.length}`);
            await new Promise((r) => setTimeout(r, 10));
          }
        },
        async opened() {
          const deadline = Date.now() + 5000;
          while (!stream.raw.includes(': open\n\n')) {
            if (Date.now() > deadline) throw new Error('the stream did not open');
            await new Promise((r) => setTimeout(r, 5));
          }
        },
        close: () => req.destroy(),
      };
      let buffer = '';
      if (options.pause) {
        // A consumer that stops reading: nothing consumes the body (a 'data' listener would resume it).
        response.pause();
        resolve(stream);
        return;
      }
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        stream.raw += chunk;
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = Object.fromEntries(
            block
              .split('\n')
              .filter((l) => !l.startsWith(':'))
              .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)]),
          );
          if (fields.event === 'event')
            stream.messages.push({ id: fields.id!, event: fields.event, data: JSON.parse(fields.data!) });
          if (fields.event === 'rejection') {
            assert.equal(fields.id, undefined, 'a rejection carries no id: it is live only');
            stream.rejections.push(JSON.parse(fields.data!));
          }
        }
      });
      resolve(stream);
    });
    req.end();
  });
}

describe('GET /admin/v1/products/{id}/events/stream', () => {
  it('starts at the current end; each new event arrives within 1 s with SSE headers, id and the event JSON', async () => {
    const server = await startServer();
    const product = await server.product();
    await send(server, product.eventsKey, ['before']);
    const stream = await openStream(server, product.id);
    assert.equal(stream.response.statusCode, 200);
    assert.match(String(stream.response.headers['content-type']), /^text\/event-stream/);
    assert.equal(stream.response.headers['x-accel-buffering'], 'no');
    await stream.opened();
    const sentAt = Date.now();
    const [uuid] = await send(server, product.eventsKey, ['after']);
    await stream.waitFor(1, 1000);
    assert.ok(Date.now() - sentAt < 1000, `latency ${Date.now() - sentAt} ms`);
    assert.match(stream.raw, /^retry: \d+\n\n/);
    assert.equal(stream.messages.length, 1, 'the event sent before the stream opened is not replayed');
    assert.equal(stream.messages[0]!.data.uuid, uuid);
    assert.equal(stream.messages[0]!.event, 'event');
    assert.ok(stream.messages[0]!.data.key_id);
    stream.close();
  });

  it('resumes with Last-Event-ID (or ?after=) exactly after the last event seen, also after a restart', async () => {
    const database = reusableDatabase();
    let server = await startServer({}, database);
    const product = await server.product();
    const other = await server.product();
    const stream = await openStream(server, product.id);
    await stream.opened();
    const first = await send(server, product.eventsKey, ['a', 'b', 'c']);
    await send(server, other.eventsKey, ['x']);
    await stream.waitFor(3);
    stream.close();
    const lastId = stream.messages[2]!.id;
    const missed = await send(server, product.eventsKey, ['d', 'e']);
    const resumed = await openStream(server, product.id, { lastEventId: lastId });
    await resumed.waitFor(2);
    const more = await send(server, product.eventsKey, ['f']);
    await resumed.waitFor(3);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(
      resumed.messages.map((m) => m.data.uuid),
      [...missed, ...more],
      'exactly the missed events, then the new one',
    );
    resumed.close();
    assert.deepEqual(
      stream.messages.map((m) => m.data.uuid),
      first,
    );

    // Restart: a new server process state on the same database.
    const resumeAt = resumed.messages[2]!.id;
    await server.close();
    const afterRestartIds: string[] = [];
    server = await startServer({}, database);
    afterRestartIds.push(...(await send(server, product.eventsKey, ['g', 'h'])));
    const again = await openStream(server, product.id, { query: `?after=${encodeURIComponent(resumeAt)}` });
    await again.waitFor(2);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(
      again.messages.map((m) => m.data.uuid),
      afterRestartIds,
    );
    again.close();
    const fromStart = await openStream(server, other.id, { lastEventId: stream.messages[0]!.id });
    await fromStart.waitFor(1);
    assert.equal(fromStart.messages.length, 1, 'another product’s stream never shows this product’s events');
    fromStart.close();
    await server.close();
    await database.drop();
  });

  it('filters apply to the stream; bad cursors and parameters are 400', async () => {
    const server = await startServer();
    const product = await server.product();
    const stream = await openStream(server, product.id, { query: '?subject_type=user&subject_id=wanted' });
    await stream.opened();
    const ids = await send(server, product.eventsKey, ['unwanted', 'wanted', 'unwanted', 'wanted']);
    await stream.waitFor(2);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(
      stream.messages.map((m) => m.data.uuid),
      [ids[1], ids[3]],
    );
    stream.close();
    for (const query of ['?after=nope', '?colour=red', '?subject_type=user']) {
      const res = await fetch(`${server.url}/admin/v1/products/${product.id}/events/stream${query}`, {
        headers: auth(),
      });
      assert.equal(res.status, 400, query);
    }
    const res = await fetch(`${server.url}/admin/v1/products/${product.id}/events/stream`, {
      headers: { ...auth(), 'last-event-id': 'c1.zz' },
    });
    assert.equal(res.status, 400);
  });

  it('include=rejections: rejections recorded on any instance arrive live as `event: rejection` (no id); not without it', async () => {
    const database = reusableDatabase();
    const server = await startServer({}, database);
    const other = await startServer({}, database); // a second instance on the same database
    const product = await server.product();
    const withRejections = await openStream(server, product.id, { query: '?include=rejections' });
    const eventsOnly = await openStream(server, product.id);
    await Promise.all([withRejections.opened(), eventsOnly.opened()]);
    const basic = `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}`;
    const segment = await fetch(`${other.url}/v1/batch`, {
      method: 'POST',
      headers: { authorization: basic, 'content-type': 'application/json' },
      body: JSON.stringify({
        batch: [
          { type: 'track', event: 'Anonymous', messageId: 'no-identity' },
          { type: 'track', event: 'Fine', userId: 'u', messageId: 'fine' },
        ],
      }),
    });
    assert.equal(segment.status, 200);
    const native = await fetch(`${server.url}/api/v2/events/batch`, {
      method: 'POST',
      headers: { ...bearer(product.eventsKey), 'content-type': 'application/json' },
      body: JSON.stringify({
        events: [{ subject_type: 'user', subject_id: 'u', event: 'nosep', external_id: 'bad-name' }],
      }),
    });
    assert.equal(native.status, 207);
    const deadline = Date.now() + 5000;
    while (withRejections.rejections.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await withRejections.waitFor(1);
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(
      withRejections.rejections.map((r) => [r.route, r.code, r.message_id]),
      [
        ['/v1/batch', 'missing_identity', 'no-identity'],
        ['/api/v2/events/batch', 'validation_error', 'bad-name'],
      ],
      'each rejection once, in the order recorded',
    );
    assert.equal(withRejections.messages.length, 1, 'the stored event as usual');
    assert.equal(eventsOnly.rejections.length, 0, 'no rejections without include=rejections');
    assert.equal(eventsOnly.messages.length, 1);
    const bad = await fetch(`${server.url}/admin/v1/products/${product.id}/events/stream?include=everything`, {
      headers: auth(),
    });
    assert.equal(bad.status, 400);
    withRejections.close();
    eventsOnly.close();
    await other.close();
    await server.close();
    await database.drop();
  });

  it('HEAD of the stream and of the export answers the headers at once (no stream held open, no export run)', async () => {
    const server = await startServer();
    const product = await server.product();
    for (const path of ['events/stream', 'events/export?format=csv']) {
      const res = await fetch(`${server.url}/admin/v1/products/${product.id}/${path}`, {
        method: 'HEAD',
        headers: auth(),
        signal: AbortSignal.timeout(5000),
      });
      assert.equal(res.status, 200, path);
      assert.match(
        res.headers.get('content-type') ?? '',
        path.startsWith('events/stream') ? /^text\/event-stream/ : /^text\/csv/,
      );
      assert.equal(await res.text(), '');
    }
    assert.equal(server.services.events.streams.openCount, 0);
  });

  it('caps open streams per instance: 503 with Retry-After', async () => {
    const server = await startServer({ eventStreamsMax: 1 });
    const product = await server.product();
    const first = await openStream(server, product.id);
    const res = await fetch(`${server.url}/admin/v1/products/${product.id}/events/stream`, { headers: auth() });
    assert.equal(res.status, 503);
    assert.ok(res.headers.get('retry-after'));
    first.close();
    await first.ended;
    await new Promise((r) => setTimeout(r, 100));
    const second = await openStream(server, product.id);
    assert.equal(second.response.statusCode, 200);
    second.close();
  });

  it('cuts off a consumer that stops reading, so the server buffers a bounded amount', async () => {
    const server = await startServer({ eventStreamBufferBytes: 16 * 1024 });
    const product = await server.product();
    const slow = await openStream(server, product.id, { pause: true });
    const fast = await openStream(server, product.id);
    await fast.opened();
    const big = { text: 'x'.repeat(8000) };
    let sent = 0;
    const deadline = Date.now() + 20_000;
    // Loopback socket buffers take a few MB before the server's own buffer starts to grow.
    while (server.app.server.listening && Date.now() < deadline) {
      sent += (
        await send(
          server,
          product.eventsKey,
          Array.from({ length: 100 }, (_, i) => `s${i}`),
          big,
        )
      ).length;
      if (server.services.events.streams.openCount === 1) break;
    }
    assert.equal(server.services.events.streams.openCount, 1, 'the slow stream was cut off, the other one stays');
    const heap = process.memoryUsage().heapUsed;
    sent += (
      await send(
        server,
        product.eventsKey,
        Array.from({ length: 100 }, (_, i) => `t${i}`),
        big,
      )
    ).length;
    // Generous: the promise is that it gets every event, not how fast a loaded machine parses 7 MB of SSE.
    await fast.waitFor(sent, 30_000);
    assert.equal(fast.messages.length, sent, 'the stream that keeps reading gets every event');
    assert.ok(
      process.memoryUsage().heapUsed - heap < 50 * 1024 * 1024,
      'memory stays bounded once the slow consumer is gone',
    );
    fast.close();
    slow.close();
  });

  it('ends open streams cleanly on shutdown', async () => {
    const server = await startServer();
    const product = await server.product();
    const stream = await openStream(server, product.id);
    let ended = false;
    stream.response.on('end', () => (ended = true));
    await server.close();
    await stream.ended;
    assert.ok(ended, 'the response ended normally (not reset)');
  });
});
