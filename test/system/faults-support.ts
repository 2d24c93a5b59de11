// Shared by the fault tests (faults-*.test.ts): sustained ingest against a server process that
// records every answer, and the check that every acknowledged event is stored.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { createServices } from '../../src/services.js';
import { testConfig } from '../helpers.js';
import type { ServerProcess } from '../support/server-process.js';

export interface Answer {
  /** When the request was sent and answered (Date.now()). */
  sentAt: number;
  answeredAt: number;
  /** HTTP status, or 0 when the connection failed. */
  status: number;
  contentType: string;
  code?: string;
  requestId?: string;
  error?: string;
}

export interface SimpleResponse {
  status: number;
  contentType: string;
  text: string;
}

/**
 * One request on a connection of its own (no keep-alive pool): an idle pooled connection that the
 * server closes just as it is reused would fail the request for a reason that has nothing to do
 * with the fault under test.
 */
export function send(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string; timeoutMs?: number } = {},
): Promise<SimpleResponse> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: options.method ?? 'GET',
        headers: { connection: 'close', ...options.headers },
        agent: false,
        timeout: options.timeoutMs ?? 10_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: String(res.headers['content-type'] ?? ''),
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeoutMs ?? 10_000} ms`)));
    req.on('error', reject);
    req.end(options.body);
  });
}

export interface Load {
  answers: Answer[];
  /** external_id → uuid of every event answered 201. */
  acknowledged: Map<string, string>;
  /** Resolves once `count` more events were acknowledged after the call, or rejects after timeoutMs. */
  untilAcknowledged(count: number, timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

/** `workers` loops sending one event each, with a unique external_id, until stop(). */
export function sustainedIngest(
  server: ServerProcess,
  key: string,
  options: { workers: number; propertyBytes?: number; prefix: string },
): Load {
  const answers: Answer[] = [];
  const acknowledged = new Map<string, string>();
  const padding = 'p'.repeat(options.propertyBytes ?? 0);
  let stopped = false;
  let sequence = 0;
  const loops = Array.from({ length: options.workers }, async () => {
    while (!stopped) {
      const externalId = `${options.prefix}-${sequence++}`;
      const sentAt = Date.now();
      try {
        const response = await send(`${server.url}/api/v2/events`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            event: 'fault.checked',
            subject_type: 'user',
            subject_id: 'u1',
            external_id: externalId,
            properties: { padding },
          }),
        });
        let body: { data?: { uuid?: string }; code?: string; request_id?: string } = {};
        try {
          body = JSON.parse(response.text) as typeof body;
        } catch {
          // Recorded below: an answer that is not JSON fails the test's checks.
        }
        const answer: Answer = {
          sentAt,
          answeredAt: Date.now(),
          status: response.status,
          contentType: response.contentType,
        };
        if (body.code !== undefined) answer.code = body.code;
        if (body.request_id !== undefined) answer.requestId = body.request_id;
        answers.push(answer);
        if (response.status === 201 && body.data?.uuid !== undefined) acknowledged.set(externalId, body.data.uuid);
        // While refused, do not spin: a real client backs off too (and the machine is shared).
        if (response.status !== 201) await new Promise((resolve) => setTimeout(resolve, 20));
      } catch (error) {
        answers.push({ sentAt, answeredAt: Date.now(), status: 0, contentType: '', error: (error as Error).message });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  });
  return {
    answers,
    acknowledged,
    async untilAcknowledged(count, timeoutMs) {
      const target = acknowledged.size + count;
      const deadline = Date.now() + timeoutMs;
      while (acknowledged.size < target) {
        if (Date.now() > deadline)
          throw new Error(
            `only ${acknowledged.size - (target - count)} of ${count} events acknowledged within ${timeoutMs} ms`,
          );
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** Every answer that is neither 201 nor a 503 problem+json with code "unavailable" and a request_id. */
export function unexpectedAnswers(answers: Answer[]): Answer[] {
  return answers.filter(
    (a) =>
      a.status !== 201 &&
      !(
        a.status === 503 &&
        a.contentType.startsWith('application/problem+json') &&
        a.code === 'unavailable' &&
        typeof a.requestId === 'string'
      ),
  );
}

/** Counts answers by status, for messages. */
export function statusCounts(answers: Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return counts;
}

/** Opens the database after the server has stopped and checks that each acknowledged event is there. */
export async function assertAllStored(
  databaseUrl: string,
  productId: string,
  acknowledged: Map<string, string>,
): Promise<void> {
  const services = await createServices(testConfig(databaseUrl), { defaultMetrics: false });
  try {
    const missing: string[] = [];
    for (const [externalId, uuid] of acknowledged) {
      const event = await services.storage.events.get(productId, uuid);
      if (event?.externalId !== externalId) missing.push(externalId);
    }
    assert.deepEqual(
      missing.slice(0, 20),
      [],
      `${missing.length} of ${acknowledged.size} acknowledged events are missing`,
    );
  } finally {
    await services.close();
  }
}

/** A TCP port nobody listens on right now (127.0.0.1). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

/** Resolves with the process's exit once SIGTERM has stopped it (SIGKILL after timeoutMs). */
export async function stopServer(
  server: ServerProcess,
  timeoutMs = 15_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  server.child.kill('SIGTERM');
  const timer = setTimeout(() => server.child.kill('SIGKILL'), timeoutMs);
  try {
    return await server.exited;
  } finally {
    clearTimeout(timer);
  }
}
