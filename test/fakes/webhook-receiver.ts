// A fake webhook receiver (events-out §7): verifies every request with the official `standardwebhooks`
// package, answers what the test asks for (2xx, 500, 429 with Retry-After, 410, a redirect, or never:
// a timeout), and counts messages by id. Listens on loopback, port 0.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';

export type Answer = { status: number; retryAfter?: string; location?: string } | 'timeout';

export interface ReceivedMessage {
  id: string;
  type: string;
  timestamp: string;
  data: Record<string, unknown>;
}

export interface ReceivedRequest {
  webhookId: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Which of the receiver's secrets verified the request (by index). */
  verifiedBy: number[];
  messages: ReceivedMessage[];
  answered: number | 'timeout';
}

export interface WebhookReceiver {
  url: string;
  port: number;
  requests: ReceivedRequest[];
  /** Messages of answered-2xx requests, in arrival order (re-deliveries included). */
  accepted: ReceivedMessage[];
  /** How often each message id arrived (any answer). */
  countById: Map<string, number>;
  /** TCP connections accepted. */
  connections: number;
  /** Requests whose signature did not verify with any secret. */
  unverified: number;
  /** The secrets requests are verified with (set after creating the destination). */
  secrets: string[];
  /** Answers for the next requests, in order; when empty, `fallback`. */
  script: Answer[];
  fallback: Answer;
  /** Resolves once `n` messages were accepted. */
  waitForAccepted(n: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(port = 0): Promise<WebhookReceiver> {
  const sockets = new Set<Socket>();
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const receiver: WebhookReceiver = {
    url: '',
    port: 0,
    requests: [],
    accepted: [],
    countById: new Map(),
    connections: 0,
    unverified: 0,
    secrets: [],
    script: [],
    fallback: { status: 204 },
    waitForAccepted(n, timeoutMs = 10_000) {
      if (receiver.accepted.length >= n) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(new Error(`receiver: ${receiver.accepted.length} of ${n} messages accepted after ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiters.push({
          n,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const verifiedBy: number[] = [];
      receiver.secrets.forEach((secret, index) => {
        try {
          new Webhook(secret).verify(body, req.headers as Record<string, string>);
          verifiedBy.push(index);
        } catch {
          // not this secret
        }
      });
      if (verifiedBy.length === 0) receiver.unverified++;
      let messages: ReceivedMessage[] = [];
      try {
        const parsed = JSON.parse(body) as { type: string; data: unknown };
        messages = parsed.type === 'batch' ? (parsed.data as ReceivedMessage[]) : [parsed as ReceivedMessage];
      } catch {
        messages = [];
      }
      for (const m of messages) receiver.countById.set(m.id, (receiver.countById.get(m.id) ?? 0) + 1);
      const answer = receiver.script.shift() ?? receiver.fallback;
      const request: ReceivedRequest = {
        webhookId: String(req.headers['webhook-id']),
        headers: req.headers,
        body,
        verifiedBy,
        messages,
        answered: answer === 'timeout' ? 'timeout' : answer.status,
      };
      receiver.requests.push(request);
      if (answer === 'timeout') return; // never answered; the socket is destroyed on close
      const headers: Record<string, string> = {};
      if (answer.retryAfter !== undefined) headers['retry-after'] = answer.retryAfter;
      if (answer.location !== undefined) headers.location = answer.location;
      res.writeHead(answer.status, headers).end();
      if (answer.status >= 200 && answer.status < 300 && verifiedBy.length > 0) {
        receiver.accepted.push(...messages);
        for (const waiter of [...waiters]) {
          if (receiver.accepted.length >= waiter.n) {
            waiters.splice(waiters.indexOf(waiter), 1);
            waiter.resolve();
          }
        }
      }
    });
  });
  server.on('connection', (socket: Socket) => {
    receiver.connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  receiver.port = (server.address() as AddressInfo).port;
  receiver.url = `http://127.0.0.1:${receiver.port}/hook`;
  return receiver;
}
