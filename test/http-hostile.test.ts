// Hostile input over a real socket (issue 9): bodies that are never read, broken gzip, NUL and
// lone surrogates, oversized headers, lying Content-Length. inject() skips the socket layer, where
// the gzip crash lived, so every case here goes through node:net to a listening server.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { ADMIN_TOKEN, createTestApp, type TestContext } from './helpers.js';
import { rawRequest, requestBytes, type RawAnswer } from './support/raw-http.js';

// In a real process an unhandled stream error kills the server; under node:test it is only a note
// on the hook that started it. Recording them makes such a crash fail the test that caused it.
// @test-alone: it listens for process-wide uncaught exceptions (test/README.md).
const uncaught: unknown[] = [];
const recordUncaught = (error: unknown) => uncaught.push(error);

let ctx: TestContext;
let port: number;
let product: { id: string; eventsKey: string; reportsKey: string };

before(async () => {
  process.on('uncaughtException', recordUncaught);
  ctx = await createTestApp({ maxBodyBytes: 64 * 1024 });
  product = await ctx.product('hostile');
  await ctx.app.listen({ port: 0, host: '127.0.0.1' });
  const address = ctx.app.server.address();
  port = typeof address === 'object' && address !== null ? address.port : 0;
});
after(async () => {
  process.removeListener('uncaughtException', recordUncaught);
  await ctx.close();
});

const event = JSON.stringify({ subject_type: 'user', subject_id: 'u1', event_type: 'project', action: 'created' });

function assertProblem(answer: RawAnswer, status: number, code?: string): Record<string, unknown> {
  assert.equal(answer.status, status, `status ${answer.status}: ${answer.body}`);
  assert.match(answer.headers['content-type'] ?? '', /^application\/problem\+json/);
  const problem = JSON.parse(answer.body) as Record<string, unknown>;
  assert.equal(problem.status, status);
  assert.equal(typeof problem.request_id, 'string');
  assert.equal(problem.request_id, answer.headers['x-request-id']);
  if (code !== undefined) assert.equal(problem.code, code);
  return problem;
}

/** The process still serves: a fresh connection stores an event. */
async function assertAlive(): Promise<void> {
  assert.deepEqual(uncaught.splice(0).map(String), [], 'an error escaped: in production the process would have died');
  const answer = await rawRequest(port, [
    requestBytes(
      'POST',
      '/api/v2/events',
      { authorization: `Bearer ${product.eventsKey}`, 'content-type': 'application/json', connection: 'close' },
      event,
    ),
  ]);
  assert.ok(answer.status === 201 || answer.status === 200, `alive check: ${answer.status} ${answer.body}`);
}

const notGzip = Buffer.from('this is not gzip at all '.repeat(10));

describe('Content-Encoding: gzip with a body nobody reads', () => {
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    it(`${type}: 415 problem+json, the process lives, keep-alive still works`, async () => {
      const headers = {
        authorization: `Bearer ${product.eventsKey}`,
        'content-type': type,
        'content-encoding': 'gzip',
      };
      const answer = await rawRequest(port, [requestBytes('POST', '/api/v2/events', headers, notGzip)]);
      assertProblem(answer, 415, 'unsupported_media_type');
      // Wait for the bytes the server never read to be gone before checking it is alive.
      await new Promise((resolve) => setTimeout(resolve, 50));
      await assertAlive();
    });
  }

  it('a GET with a gzip body that is not gzip: answered, the process lives', async () => {
    const answer = await rawRequest(port, [
      requestBytes('GET', '/healthz', { 'content-encoding': 'gzip', connection: 'close' }, notGzip),
    ]);
    assert.ok(answer.status !== undefined && answer.status < 500, `status ${answer.status}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await assertAlive();
  });

  it('two requests on one keep-alive connection, the first with an unread gzip body: both answered', async () => {
    const first = requestBytes(
      'POST',
      '/api/v2/events',
      { authorization: `Bearer ${product.eventsKey}`, 'content-type': 'text/plain', 'content-encoding': 'gzip' },
      notGzip,
    );
    const second = requestBytes('GET', '/healthz', {});
    const answers = await new Promise<string>((resolve) => {
      // Both in one write; collect everything until the server closes or 1 s passes.
      import('node:net').then(({ connect }) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(Buffer.concat([first, second])));
        let text = '';
        socket.on('data', (chunk) => (text += chunk.toString('latin1')));
        const done = () => resolve(text);
        socket.on('close', done);
        socket.on('error', done);
        setTimeout(() => socket.destroy(), 1000);
      });
    });
    assert.match(answers, /^HTTP\/1\.1 415/);
    // Either the second request is answered on the same connection or the connection was closed
    // after the first answer: never a hang, never a crash.
    const statuses = [...answers.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.ok(
      statuses.every((s) => s < 500),
      String(statuses),
    );
    await assertAlive();
  });
});

describe('gzip bodies that are read', () => {
  const headers = () => ({
    authorization: `Bearer ${product.eventsKey}`,
    'content-type': 'application/json',
    'content-encoding': 'gzip',
  });

  it('not gzip: 400 invalid_json', async () => {
    assertProblem(
      await rawRequest(port, [requestBytes('POST', '/api/v2/events', headers(), notGzip)]),
      400,
      'invalid_json',
    );
    await assertAlive();
  });

  it('truncated gzip: 400 invalid_json', async () => {
    const whole = gzipSync(event);
    assertProblem(
      await rawRequest(port, [requestBytes('POST', '/api/v2/events', headers(), whole.subarray(0, whole.length - 6))]),
      400,
      'invalid_json',
    );
    await assertAlive();
  });

  it('a gzip bomb (inflates past the body limit), then garbage in the same body: 413, the process lives', async () => {
    const bomb = gzipSync(Buffer.alloc(20 * 1024 * 1024, 0x20));
    const body = Buffer.concat([bomb, notGzip]);
    const answer = await rawRequest(port, [requestBytes('POST', '/api/v2/events', headers(), body)]);
    assertProblem(answer, 413, 'payload_too_large');
    await new Promise((resolve) => setTimeout(resolve, 100));
    await assertAlive();
  });

  it('a gzip bomb sent slowly: 413 and the connection is closed, not left hanging', async () => {
    const bomb = gzipSync(Buffer.alloc(20 * 1024 * 1024, 0x20));
    const head = requestBytes('POST', '/api/v2/events', {
      ...headers(),
      'content-length': String(bomb.length + 100_000),
    });
    // The declared length is never reached: the server must answer and close rather than wait.
    const answer = await rawRequest(port, [head, bomb]);
    assertProblem(answer, 413, 'payload_too_large');
    assert.equal(answer.headers.connection, 'close');
    await assertAlive();
  });
});

describe('NUL and lone surrogates: 400 validation_error with a pointer (clarifications §13)', () => {
  const cases: Array<{ name: string; path: string; key: () => string; pointer: string }> = [
    {
      name: 'traffic reports ?source=%00',
      path: '/api/v2/traffic_reports?source=%00',
      key: () => product.reportsKey,
      pointer: '/source',
    },
    {
      name: 'traffic reports ?medium=a%00b',
      path: '/api/v2/traffic_reports?medium=a%00b',
      key: () => product.reportsKey,
      pointer: '/medium',
    },
    {
      name: 'traffic reports ?cursor=%00',
      path: '/api/v2/traffic_reports?cursor=%00',
      key: () => product.reportsKey,
      pointer: '/cursor',
    },
    {
      name: 'admin user lookup, NUL in the path',
      path: `/admin/v1/products/${'P'}/users/a%00b`,
      key: () => ADMIN_TOKEN,
      pointer: '/external_id',
    },
    {
      name: 'admin product, NUL in the path',
      path: '/admin/v1/products/%00/keys',
      key: () => ADMIN_TOKEN,
      pointer: '/product_id',
    },
    {
      name: 'admin traffic runs, NUL in the query',
      path: '/admin/v1/products/P/traffic_source/runs?limit=%00',
      key: () => ADMIN_TOKEN,
      pointer: '/limit',
    },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const path = c.path.replace('/products/P/', `/products/${product.id}/`);
      const answer = await rawRequest(port, [
        requestBytes('GET', path, { authorization: `Bearer ${c.key()}`, connection: 'close' }),
      ]);
      const problem = assertProblem(answer, 400, 'validation_error');
      const errors = problem.errors as Array<{ pointer: string; message: string }>;
      assert.ok(
        errors.some((e) => e.pointer === c.pointer),
        answer.body,
      );
    });
  }

  it('a lone surrogate in a JSON body (identify): 400 with the pointer', async () => {
    const body = '{"external_id":"u\\ud800x"}';
    const answer = await rawRequest(port, [
      requestBytes(
        'POST',
        '/api/v2/identify',
        { authorization: `Bearer ${product.eventsKey}`, 'content-type': 'application/json', connection: 'close' },
        body,
      ),
    ]);
    const problem = assertProblem(answer, 400, 'validation_error');
    assert.deepEqual(
      (problem.errors as Array<{ pointer: string }>).map((e) => e.pointer),
      ['/external_id'],
    );
  });

  it('a lone surrogate in an event property: 400 with the pointer', async () => {
    const body = JSON.stringify({
      subject_type: 'user',
      subject_id: 'u',
      event_type: 'project',
      action: 'created',
    }).replace(/}$/, ',"properties":{"p":"\\udc00"}}');
    const answer = await rawRequest(port, [
      requestBytes(
        'POST',
        '/api/v2/events',
        { authorization: `Bearer ${product.eventsKey}`, 'content-type': 'application/json', connection: 'close' },
        body,
      ),
    ]);
    const problem = assertProblem(answer, 400, 'validation_error');
    assert.deepEqual(
      (problem.errors as Array<{ pointer: string }>).map((e) => e.pointer),
      ['/properties/p'],
    );
  });
});

describe('malformed HTTP', () => {
  it('a 1 MB Authorization header: 431 problem+json, connection closed', async () => {
    const answer = await rawRequest(port, [
      requestBytes('GET', '/api/v2/traffic_reports', { authorization: `Bearer ${'a'.repeat(1024 * 1024)}` }),
    ]);
    assertProblem(answer, 431, 'header_too_large');
    assert.ok(answer.closed || answer.headers.connection === 'close');
    await assertAlive();
  });

  it('Content-Length shorter than the body: the rest is a malformed request, answered 400 problem+json', async () => {
    const headers = {
      authorization: `Bearer ${product.eventsKey}`,
      'content-type': 'application/json',
      'content-length': '10',
    };
    const text = await new Promise<string>((resolve) => {
      import('node:net').then(({ connect }) => {
        const socket = connect(port, '127.0.0.1', () =>
          socket.write(requestBytes('POST', '/api/v2/events', headers, event)),
        );
        let all = '';
        socket.on('data', (chunk) => (all += chunk.toString('latin1')));
        socket.on('close', () => resolve(all));
        socket.on('error', () => resolve(all));
        setTimeout(() => socket.destroy(), 2000);
      });
    });
    // The first request (its 10-byte body is not JSON) may or may not be answered before the parser
    // meets the leftover bytes; those are answered 400 problem+json and the connection closed.
    const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.ok(statuses.length >= 1 && statuses.every((s) => s === 400), text);
    assert.ok(!/"statusCode"/.test(text), 'the bad request is answered in problem+json, not Fastify JSON');
    const last = text.slice(text.lastIndexOf('HTTP/1.1 400'));
    assert.match(last, /application\/problem\+json/);
    assert.match(last, /x-request-id/i);
    await assertAlive();
  });

  it('an HTTP/1.1 request without Host: 400 problem+json naming the header, with the request id', async () => {
    const bytes = `GET /healthz HTTP/1.1\r\nX-Request-Id: no-host-1\r\n\r\n`;
    const answer = await rawRequest(port, [bytes]);
    const problem = assertProblem(answer, 400, 'validation_error');
    assert.equal(problem.request_id, 'no-host-1');
    assert.deepEqual(problem.errors, [{ pointer: '/headers/host', message: 'required' }]);
    assert.equal(answer.headers.connection, 'close');
    // HTTP/1.0 does not require Host.
    const old = await rawRequest(port, ['GET /healthz HTTP/1.0\r\n\r\n']);
    assert.equal(old.status, 200, old.body);
  });

  it('an ingest request without Host is refused before anything is stored', async () => {
    const body = JSON.stringify({
      subject_type: 'user',
      subject_id: 'no-host',
      event_type: 'project',
      action: 'created',
    });
    const head = `POST /api/v2/events HTTP/1.1\r\nAuthorization: Bearer ${product.eventsKey}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const stored = await ctx.services.storage.events.count(product.id);
    assertProblem(await rawRequest(port, [head + body]), 400, 'validation_error');
    assert.equal(await ctx.services.storage.events.count(product.id), stored);
    await assertAlive();
  });

  it('an Expect other than 100-continue: 417 expectation_failed problem+json with the request id, then closed', async () => {
    const headers = {
      authorization: `Bearer ${product.eventsKey}`,
      'content-type': 'application/json',
      expect: 'something-else',
      'x-request-id': 'expect-1',
    };
    const answer = await rawRequest(port, [requestBytes('POST', '/api/v2/events', headers, event)]);
    const problem = assertProblem(answer, 417, 'expectation_failed');
    assert.equal(problem.request_id, 'expect-1');
    assert.deepEqual(
      (problem.errors as Array<{ pointer: string }>).map((e) => e.pointer),
      ['/headers/expect'],
    );
    assert.ok(answer.closed || answer.headers.connection === 'close');
    await assertAlive();
  });

  it('Expect: 100-continue still works: 100, then the answer', async () => {
    const headers = {
      authorization: `Bearer ${product.eventsKey}`,
      'content-type': 'application/json',
      expect: '100-continue',
      'content-length': String(event.length),
      connection: 'close',
    };
    const text = await new Promise<string>((resolve) => {
      import('node:net').then(({ connect }) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(requestBytes('POST', '/api/v2/events', headers)));
        let all = '';
        socket.on('data', (chunk) => {
          all += chunk.toString('latin1');
          if (all.startsWith('HTTP/1.1 100') && all.indexOf('\r\n\r\n') === all.length - 4) socket.write(event);
        });
        socket.on('close', () => resolve(all));
        socket.on('error', () => resolve(all));
        setTimeout(() => socket.destroy(), 5000);
      });
    });
    assert.match(text, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /);
  });

  it('a request line that is not HTTP: 400 problem+json', async () => {
    const answer = await rawRequest(port, ['GARBAGE\r\n\r\n']);
    assertProblem(answer, 400, 'validation_error');
  });
});

describe('deep nesting and unstorable rejections', () => {
  const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

  for (const [name, path, body] of [
    ['Segment track, a body 10,000 levels deep', '/v1/track', deep(10_000)],
    [
      'Segment batch, a messageId 20,000 arrays deep',
      '/v1/batch',
      `{"batch":[{"type":"track","event":"x","userId":"u","messageId":${'['.repeat(20_000)}${']'.repeat(20_000)}}]}`,
    ],
    ['native event, a body 5,000 levels deep (under 32 KiB)', '/api/v2/events', deep(5_000)],
  ] as const) {
    it(`${name}: 400 problem+json, the process lives`, async () => {
      const auth = path.startsWith('/v1/')
        ? `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}`
        : `Bearer ${product.eventsKey}`;
      const answer = await rawRequest(port, [
        requestBytes(
          'POST',
          path,
          { authorization: auth, 'content-type': 'application/json', connection: 'close' },
          body,
        ),
      ]);
      assertProblem(answer, 400, 'validation_error');
      await assertAlive();
    });
  }

  it('a Segment item with NUL and a lone surrogate in its messageId is rejected and still recorded, on every backend', async () => {
    const auth = `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}`;
    const body = '{"batch":[{"type":"track","event":"Bad\\u0000Name","userId":"u","messageId":"m\\u0000\\ud800"}]}';
    const answer = await rawRequest(port, [
      requestBytes(
        'POST',
        '/v1/batch',
        { authorization: auth, 'content-type': 'application/json', connection: 'close' },
        body,
      ),
    ]);
    assert.equal(answer.status, 200, answer.body);
    const list = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${product.id}/rejections`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(list.statusCode, 200, list.body);
    const rows = (list.json() as { data: Array<{ message_id: string | null; item: unknown }> }).data;
    assert.ok(
      rows.some((row) => row.message_id === 'm\uFFFD\uFFFD'),
      list.body,
    );
    await assertAlive();
  });
});

describe('an answer given before a large body has arrived reaches the client (lingering close)', () => {
  const big = Buffer.alloc(8 * 1024 * 1024, 0x61); // far over this app's 64 KiB body limit
  for (const [name, method, path, status] of [
    ['an over-limit event body', 'POST', '/api/v2/events', 413],
    ['a large body on a GET that answers a big document', 'GET', '/docs/yaml', 200],
  ] as const) {
    it(`${name}: the whole ${status} answer arrives, no reset`, async () => {
      for (let round = 0; round < 5; round++) {
        const answer = await rawRequest(
          port,
          [
            requestBytes(
              method,
              path,
              { authorization: `Bearer ${product.eventsKey}`, 'content-type': 'application/json' },
              big,
            ),
          ],
          15_000,
        );
        assert.equal(answer.status, status, `round ${round}: ${answer.status} ${answer.body.slice(0, 200)}`);
        if (status !== 200) assertProblem(answer, status, 'payload_too_large');
      }
      await assertAlive();
    });
  }

  it('a GET answering a big document, followed by megabytes that are not HTTP: the whole 200 arrives, no reset (fuzz seed 20261123 case 37813)', async () => {
    // No framing: the bytes after the GET are read as a next request, which Node's parser refuses.
    const garbage = Buffer.concat([Buffer.from('GET /docs/yaml HTTP/1.1\r\nhost: localhost\r\n\r\n', 'latin1'), big]);
    for (let round = 0; round < 5; round++) {
      const answer = await rawRequest(port, [garbage], 15_000);
      assert.equal(
        answer.status,
        200,
        `round ${round}: ${answer.status} closed=${answer.closed} ${answer.body.slice(0, 200)}`,
      );
    }
    await assertAlive();
  });
});
