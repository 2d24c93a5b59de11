// Thousands of stalled sockets (issue 9 item 4): idle connections that never send a byte, partial
// headers, partial bodies and idle keep-alive connections, all open at once against the real server
// process. Normal ingest requests must still be answered with sane latency, the server's memory must
// stay bounded, and the receive and keep-alive timeouts must close every stalled socket.
// Bounded by design: sockets open in batches with a connect deadline each, every wait has a deadline,
// and the run ends within about 60 s even on a loaded machine.
//   INLET_TEST_STALLED_SOCKETS=<n>  stalled sockets (default 3000)
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { loadavg } from 'node:os';
import { ADMIN_TOKEN, dialect, testDatabase, type TestDatabase } from '../helpers.js';
import { parseResponse, requestBytes } from '../support/raw-http.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';

const skip = dialect === 'sqlite' ? false : 'HTTP-layer test: the SQLite pass runs it';

const STALLED = Number(process.env.INLET_TEST_STALLED_SOCKETS ?? 3000);
const BATCH = 200;
/** Long enough that every stalled socket is still open while the normal requests run. */
const HEADERS_TIMEOUT_MS = 15_000;
const REQUEST_TIMEOUT_MS = 17_000;
const KEEP_ALIVE_TIMEOUT_MS = 17_000;
/** The normal requests stop at this point after the first stalled socket opened (before the first timeout). */
const MEASURE_UNTIL_MS = 12_000;
const NORMAL_REQUESTS = 400;
const NORMAL_CONCURRENCY = 4;

let database: TestDatabase;
let server: ServerProcess | undefined;
const sockets: Socket[] = [];

before(async () => {
  if (skip) return;
  database = testDatabase();
  server = await startServerProcess(
    {
      INLET_DATABASE_URL: database.databaseUrl,
      INLET_ADMIN_TOKEN: ADMIN_TOKEN,
      // info: startServerProcess waits for the "Inlet listening" line.
      INLET_LOG_LEVEL: 'info',
      INLET_RATE_LIMIT_RPS: '0',
      INLET_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
      INLET_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
      INLET_KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_TIMEOUT_MS),
    },
    60_000,
  );
});

after(async () => {
  for (const socket of sockets) socket.destroy();
  if (server !== undefined) {
    server.child.kill('SIGTERM');
    const killer = setTimeout(() => server!.child.kill('SIGKILL'), 10_000);
    await server.exited;
    clearTimeout(killer);
  }
  await database?.drop();
});

function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match![1]) / 1024;
}

function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

interface Stalled {
  kind: Kind;
  socket: Socket;
  received: string;
  closedAt?: number;
}

type Kind = 'silent' | 'partial-headers' | 'partial-body' | 'idle-keep-alive';
const KINDS: Kind[] = ['silent', 'partial-headers', 'partial-body', 'idle-keep-alive'];

/** Connects (within 5 s) and sends what the kind sends, then leaves the socket as it is. */
function openStalled(port: number, kind: Kind, key: string): Promise<Stalled> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    sockets.push(socket);
    const stalled: Stalled = { kind, socket, received: '' };
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${kind}: no connection within 5 s`));
    }, 5000);
    socket.on('data', (chunk: Buffer) => (stalled.received += chunk.toString('latin1')));
    socket.on('close', () => (stalled.closedAt = Date.now()));
    socket.on('error', () => {});
    socket.once('connect', () => {
      clearTimeout(timer);
      if (kind === 'partial-headers')
        socket.write('POST /api/v2/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ');
      // With a valid key: a request without one is answered 401 at once and never waits for its body.
      if (kind === 'partial-body') {
        const head = requestBytes('POST', '/api/v2/events', {
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          'content-length': '10000',
        });
        socket.write(Buffer.concat([head, Buffer.from('{"subject_id":"')]));
      }
      if (kind === 'idle-keep-alive') socket.write(requestBytes('GET', '/healthz', {}));
      resolve(stalled);
    });
  });
}

/** One ingest request on a fresh connection; resolves with its latency (ms) and status. */
function ingestOnce(port: number, key: string, n: number): Promise<{ ms: number; status: number | undefined }> {
  const body = JSON.stringify({
    subject_type: 'user',
    subject_id: `normal-${n}`,
    event_type: 'page',
    action: 'viewed',
  });
  const bytes = requestBytes(
    'POST',
    '/api/v2/events',
    { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
    body,
  );
  return new Promise((resolve) => {
    const started = process.hrtime.bigint();
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    let text = '';
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ ms: Number(process.hrtime.bigint() - started) / 1e6, status: parseResponse(text)?.status });
    };
    const timer = setTimeout(done, 10_000);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (parseResponse(text) !== undefined) done();
    });
    socket.on('error', done);
    socket.on('close', done);
  });
}

async function normalRequests(
  port: number,
  key: string,
  count: number,
  until: number,
): Promise<Array<{ ms: number; status: number | undefined }>> {
  const results: Array<{ ms: number; status: number | undefined }> = [];
  let next = 0;
  const worker = async () => {
    while (next < count && Date.now() < until) results.push(await ingestOnce(port, key, next++));
  };
  await Promise.all(Array.from({ length: NORMAL_CONCURRENCY }, worker));
  return results;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

async function until(what: string, condition: () => boolean, timeoutMs: number): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

it(
  `${STALLED} stalled sockets: normal ingest still answered with sane latency, server memory bounded, every stalled socket closed by the timeouts`,
  { skip, timeout: 120_000 },
  async (t) => {
    const { port, child } = server!;
    const pid = child.pid!;
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const product = await fetch(`${server!.url}/admin/v1/products`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ name: 'stalled' }),
    });
    const productId = ((await product.json()) as { data: { id: string } }).data.id;
    const created = await fetch(`${server!.url}/admin/v1/products/${productId}/keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ kind: 'events' }),
    });
    const key = ((await created.json()) as { data: { key: string } }).data.key;

    // Warm-up, then the baseline: the same normal requests with nothing stalled.
    await normalRequests(port, key, 100, Date.now() + 20_000);
    const baseline = await normalRequests(port, key, NORMAL_REQUESTS, Date.now() + 20_000);
    const rssBefore = rssMb(pid);
    const fdsBefore = openFds(pid);

    const started = Date.now();
    const stalled: Stalled[] = [];
    for (let i = 0; i < STALLED; i += BATCH) {
      const batch = Array.from({ length: Math.min(BATCH, STALLED - i) }, (_, j) =>
        openStalled(port, KINDS[(i + j) % KINDS.length]!, key),
      );
      stalled.push(...(await Promise.all(batch)));
      // Stagger: let the server accept this batch before the next one arrives.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const openedMs = Date.now() - started;
    // The keep-alive ones have had their answer; the others wait for a timeout.
    await until(
      'idle keep-alive answers',
      () => stalled.every((s) => s.kind !== 'idle-keep-alive' || parseResponse(s.received) !== undefined),
      20_000,
    );
    const fdsStalled = openFds(pid);

    const during = await normalRequests(port, key, NORMAL_REQUESTS, started + MEASURE_UNTIL_MS);
    const rssStalled = rssMb(pid);
    const stillOpen = stalled.filter((s) => s.closedAt === undefined).length;

    await until(
      'every stalled socket closed',
      () => stalled.every((s) => s.closedAt !== undefined),
      REQUEST_TIMEOUT_MS + 15_000,
    );
    const allClosedMs = Date.now() - started;
    await until('server fds back to the baseline', () => openFds(pid) <= fdsBefore + 5, 10_000);
    const rssAfter = rssMb(pid);
    const afterwards = await ingestOnce(port, key, -1);

    const sorted = (rows: Array<{ ms: number }>) => rows.map((r) => r.ms).sort((a, b) => a - b);
    const base = sorted(baseline);
    const stall = sorted(during);
    const answered408 = stalled.filter((s) => parseResponse(s.received)?.status === 408);
    const byKind = Object.fromEntries(
      KINDS.map((kind) => [
        kind,
        stalled.filter((s) => s.kind === kind && parseResponse(s.received)?.status === 408).length,
      ]),
    );
    const figures = [
      `stalled sockets: ${STALLED} (${STALLED / KINDS.length} each of ${KINDS.join(', ')}), opened in ${openedMs} ms; ${stillOpen} still open after the normal requests; server fds ${fdsBefore} → ${fdsStalled} → ${openFds(pid)}`,
      `normal ingest (new connection each, ${NORMAL_CONCURRENCY} at a time): before ${base.length} requests p50 ${percentile(base, 50).toFixed(1)} ms p99 ${percentile(base, 99).toFixed(1)} ms; ` +
        `during the stall ${stall.length} requests p50 ${percentile(stall, 50).toFixed(1)} ms p99 ${percentile(stall, 99).toFixed(1)} ms max ${stall.at(-1)!.toFixed(1)} ms`,
      `server RSS: ${rssBefore.toFixed(1)} MB before, ${rssStalled.toFixed(1)} MB with every socket stalled (+${(rssStalled - rssBefore).toFixed(1)}), ${rssAfter.toFixed(1)} MB after all closed`,
      `408 answers: ${JSON.stringify(byKind)}; all stalled sockets closed ${allClosedMs} ms after the first opened (timeouts ${HEADERS_TIMEOUT_MS}/${REQUEST_TIMEOUT_MS}/${KEEP_ALIVE_TIMEOUT_MS} ms)`,
      `load average ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}`,
    ];
    for (const line of figures) t.diagnostic(line);
    console.log(figures.join('\n'));

    assert.equal(stillOpen, STALLED, 'every stalled socket was still open while the normal requests ran');
    assert.ok(stall.length >= 100, `only ${stall.length} normal requests ran during the stall`);
    assert.deepEqual(
      [...new Set([...baseline, ...during].map((r) => r.status))],
      [201],
      'every normal request was stored',
    );
    assert.ok(
      percentile(stall, 99) < 2000,
      `normal requests p99 ${percentile(stall, 99).toFixed(1)} ms during the stall`,
    );
    assert.ok(
      rssStalled - rssBefore < 200,
      `server RSS grew ${(rssStalled - rssBefore).toFixed(1)} MB with ${STALLED} stalled sockets`,
    );
    // Partial headers and partial bodies get their 408; silent and idle keep-alive sockets are closed without one.
    assert.equal(byKind['partial-headers'], STALLED / KINDS.length);
    assert.equal(byKind['partial-body'], STALLED / KINDS.length);
    assert.equal(answered408.length, (STALLED / KINDS.length) * 2);
    assert.ok(stalled.filter((s) => s.kind === 'silent').every((s) => s.received === ''));
    assert.equal(afterwards.status, 201);
  },
);
