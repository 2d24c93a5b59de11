// What the provider fakes share: a real HTTP server on 127.0.0.1 (port 0), the requests it received,
// and a script of canned failures (429 with Retry-After, 500, …) answered before normal handling.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ScriptedResponse {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface FakeServer {
  readonly url: string;
  readonly requests: ReceivedRequest[];
  /** Resolves when the next request arrives (awaitable instead of sleeping). */
  nextRequest(): Promise<ReceivedRequest>;
  close(): Promise<void>;
}

export type Handler = (request: ReceivedRequest) => ScriptedResponse | Promise<ScriptedResponse>;

export async function startFakeServer(handler: Handler): Promise<FakeServer> {
  const requests: ReceivedRequest[] = [];
  let waiters: Array<(request: ReceivedRequest) => void> = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const received: ReceivedRequest = {
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      requests.push(received);
      const waiting = waiters;
      waiters = [];
      for (const wake of waiting) wake(received);
      Promise.resolve()
        .then(() => handler(received))
        .then(
          (response) => send(res, response),
          (error: unknown) => send(res, { status: 500, body: { error: String(error) } }),
        );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    nextRequest: () => new Promise<ReceivedRequest>((resolve) => waiters.push(resolve)),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function send(res: ServerResponse, response: ScriptedResponse) {
  const body =
    response.body === undefined
      ? ''
      : typeof response.body === 'string'
        ? response.body
        : JSON.stringify(response.body);
  res.writeHead(response.status, { 'content-type': 'application/json; charset=utf-8', ...response.headers });
  res.end(body);
}

export function json(status: number, body: unknown, headers?: Record<string, string>): ScriptedResponse {
  return { status, body, ...(headers ? { headers } : {}) };
}

export function isCalendarDate(value: unknown): value is string {
  return (
    typeof value === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(value) && !Number.isNaN(Date.parse(`${value}T00:00:00Z`))
  );
}
