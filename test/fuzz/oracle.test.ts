// The fuzz oracle itself (test/fuzz/harness.ts `judge`): the bare answers Node's HTTP server would write
// on its own — 400 for an HTTP/1.1 request without Host, 417 for an Expect other than 100-continue —
// are failures, not known exceptions: Inlet answers both in problem+json (lifecycle.ts), and the fuzz
// suite must fail if either comes back.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { judge } from './harness.js';
import type { FuzzCase } from './generator.js';
import type { Exchange } from './raw-client.js';

function caseOf(head: string): FuzzCase {
  return {
    seed: 1,
    index: 0,
    route: 'POST /api/v2/events',
    mode: 'header',
    mutations: [],
    method: 'POST',
    bytes: Buffer.from(`${head}\r\n\r\n{}`),
    headOnly: false,
    after: { kind: 'read' },
    mustAnswer: true,
    pipelined: false,
    allow502: false,
  };
}

function bare(status: number): Exchange {
  return {
    responses: [{ status, headers: { connection: ['close'] }, body: Buffer.alloc(0) }],
    outcome: 'closed',
    elapsedMs: 1,
  };
}

describe('fuzz oracle: no bare Node answers', () => {
  it('a bare 400 to a request without Host fails', () => {
    const problems = judge(caseOf('POST /api/v2/events HTTP/1.1\r\nContent-Length: 2'), bare(400), 1000);
    assert.ok(
      problems.some((p) => /not application\/problem\+json/.test(p)),
      problems.join('; '),
    );
  });

  it('a bare 417 to an unknown Expect fails', () => {
    const problems = judge(
      caseOf('POST /api/v2/events HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 2'),
      bare(417),
      1000,
    );
    assert.ok(
      problems.some((p) => /not application\/problem\+json/.test(p)),
      problems.join('; '),
    );
  });

  it('the same answers in problem+json with a request id pass', () => {
    const body = Buffer.from(
      JSON.stringify({ type: 't', title: 'x', status: 417, detail: 'd', code: 'expectation_failed', request_id: 'r1' }),
    );
    const answer: Exchange = {
      responses: [
        { status: 417, headers: { 'content-type': ['application/problem+json'], 'x-request-id': ['r1'] }, body },
      ],
      outcome: 'closed',
      elapsedMs: 1,
    };
    assert.deepEqual(
      judge(
        caseOf('POST /api/v2/events HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 2'),
        answer,
        1000,
      ),
      [],
    );
  });
});

describe("fuzz oracle: the console's explanatory page", () => {
  const page = (route: string): [FuzzCase, Exchange] => {
    const c = { ...caseOf(`GET ${route.split(' ')[1]!.replace('*', 'x')} HTTP/1.1\r\nHost: x`), route, method: 'GET' };
    const body = Buffer.from(
      '<!doctype html><html><head><title>Inlet console: not built</title></head><body></body></html>',
    );
    return [
      c,
      {
        responses: [{ status: 404, headers: { 'content-type': ['text/html; charset=utf-8'] }, body }],
        outcome: 'closed',
        elapsedMs: 1,
      },
    ];
  };

  it('a 404 HTML page on /console (not built, or the admin API off) passes', () => {
    assert.deepEqual(judge(...page('GET /console'), 1000), []);
    assert.deepEqual(judge(...page('GET /console/*'), 1000), []);
  });

  it('the same HTML 404 on an API route fails', () => {
    const problems = judge(...page('GET /admin/v1/products'), 1000);
    assert.ok(
      problems.some((p) => /not application\/problem\+json/.test(p)),
      problems.join('; '),
    );
  });
});

describe('the raw client reads a live stream as one answer', () => {
  it('an event stream sending more than 64 KiB of events at once is not a malformed answer (seed 7 case 49675)', async () => {
    const { createServer } = await import('node:net');
    const { exchange } = await import('./raw-client.js');
    const server = createServer((socket) => {
      socket.once('data', () => {
        socket.write(
          'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n',
        );
        const event = `id: c1\nevent: event\ndata: {"text":"${'x'.repeat(1000)}"}\n\n`;
        const chunk = `${Buffer.byteLength(event).toString(16)}\r\n${event}\r\n`;
        socket.write(chunk.repeat(200)); // about 200 KB right behind the head
      });
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const result = await exchange(
        (server.address() as { port: number }).port,
        Buffer.from('GET /stream HTTP/1.1\r\nhost: x\r\n\r\n'),
        { after: { kind: 'read' }, pipelined: true, deadlineMs: 5000, idleMs: 200 },
      );
      assert.equal(result.malformed, undefined);
      assert.deepEqual(
        result.responses.map((r) => r.status),
        [200],
      );
    } finally {
      server.close();
    }
  });
});
