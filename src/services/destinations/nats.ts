// The NATS type (events-out §6): its admin fields (`servers`, `subject`, `credentials`), and JetStream
// delivery with the official @nats-io packages: each message published
// with `Nats-Msg-Id` = its id (JetStream drops a duplicate inside the stream's duplicate window), and a
// batch counts as delivered only when every publish was acknowledged. The servers pass the outbound
// guard before every (re)connect made here; the client's own reconnects reuse the checked list.
//
// The publishes of a batch are pipelined, JetStream's asynchronous publish: each goes out on the
// connection with a reply subject under one inbox of the link, and the stream's acknowledgements come
// back there (a JSON PubAck, or an error, or a 503 "no responders" when no stream holds the subject).
// The client's `js.publish` does the same one request at a time, and creates an Error object for every
// acknowledgement it resolves (nats-core's RequestOne.cancel): that alone was 15 % of the deliverer's CPU
// (a profile of 100,000 messages, bench/runs/2026-11-destinations.md).
import { performance } from 'node:perf_hooks';
import { connect, createInbox, headers, type Msg, type NatsConnection } from '@nats-io/transport-node';
import type { FieldError } from '../../domain/errors.js';
import type { DestinationCredentials } from '../../storage/types.js';
import type { OutboundGuard } from '../outbound-guard.js';
import { stringList } from './input.js';
import {
  refusedAs,
  type DestinationDriver,
  type DestinationKind,
  type DriverOptions,
  type SendOutcome,
} from './kind.js';
import { failedSend } from './kind.js';
import { bytesOf, subjectCache } from './messages.js';

export interface NatsPublish {
  subject: string;
  id: string;
  /** The message's JSON, as UTF-8 bytes (the client would otherwise encode a string itself). */
  body: Uint8Array;
}

/** Publishes written between two turns of the event loop. */
const SLICE = 100;

interface Waiting {
  resolve(): void;
  reject(error: Error): void;
}

interface Link {
  key: string;
  connection: NatsConnection;
  inbox: string;
  waiting: Map<string, Waiting>;
  next: number;
}

/** What the stream answered to one publish: undefined when stored (or a duplicate it dropped), else the error. */
export function pubAckError(msg: Pick<Msg, 'data' | 'headers'>): string | undefined {
  if (msg.headers?.code === 503 || msg.data.length === 0)
    return 'no JetStream stream holds the subject (no responders)';
  let ack: { stream?: unknown; error?: { description?: unknown; code?: unknown } };
  try {
    ack = JSON.parse(Buffer.from(msg.data).toString('utf8')) as typeof ack;
  } catch {
    return 'JetStream answered something that is not a publish acknowledgement';
  }
  if (ack.error !== undefined)
    return `JetStream refused the message: ${String(ack.error.description ?? ack.error.code ?? 'unknown error')}`;
  if (typeof ack.stream !== 'string' || ack.stream === '') return 'JetStream answered an invalid acknowledgement';
  return undefined;
}

/** Host names of NATS server URLs (`nats://host:port`, `host:port`, `tls://…`). */
export function natsHosts(servers: string[]): string[] {
  return servers.map((server) => {
    const url = new URL(server.includes('://') ? server : `nats://${server}`);
    return url.hostname;
  });
}

export function createNatsSender(options: { timeoutMs: number; guard: OutboundGuard }) {
  const links = new Map<string, Link>();

  function fail(link: Link, error: Error): void {
    const all = [...link.waiting.values()];
    link.waiting.clear();
    for (const w of all) w.reject(error);
  }

  async function link(
    destinationId: string,
    servers: string[],
    credentials: DestinationCredentials | null,
  ): Promise<Link> {
    const key = JSON.stringify([servers, credentials]);
    const existing = links.get(destinationId);
    if (existing !== undefined && existing.key === key && !existing.connection.isClosed()) return existing;
    if (existing !== undefined) {
      links.delete(destinationId);
      fail(existing, new Error('connection replaced'));
      await existing.connection.close().catch(() => {});
    }
    for (const host of natsHosts(servers)) await options.guard.checkHost(host);
    const connection = await connect({
      servers,
      timeout: options.timeoutMs,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      noAsyncTraces: true,
      ...(credentials?.user === undefined ? {} : { user: credentials.user }),
      ...(credentials?.pass === undefined ? {} : { pass: credentials.pass }),
      ...(credentials?.token === undefined ? {} : { token: credentials.token }),
    });
    const inbox = createInbox();
    const waiting = new Map<string, Waiting>();
    // Closed with the connection.
    connection.subscribe(`${inbox}.*`, {
      callback: (error, msg) => {
        if (error !== null) {
          fail(created, error);
          return;
        }
        const token = msg.subject.slice(inbox.length + 1);
        const w = waiting.get(token);
        if (w === undefined) return; // an acknowledgement after its batch timed out
        waiting.delete(token);
        const refused = pubAckError(msg);
        if (refused === undefined) w.resolve();
        else w.reject(new Error(refused));
      },
    });
    const created: Link = { key, connection, inbox, waiting, next: 0 };
    links.set(destinationId, created);
    return created;
  }

  return {
    /**
     * Publishes `count` messages (`message(i)` makes the i-th, when it is its turn) in order on the link and
     * waits for every acknowledgement. The publishes go out in slices of SLICE with a turn of the event loop
     * between them: a cycle's thousand messages formatted and written in one go held the delivery worker's
     * loop for tens of milliseconds, and a webhook's answer waited behind them (its batches are sequential).
     */
    async send(
      destinationId: string,
      servers: string[],
      credentials: DestinationCredentials | null,
      count: number,
      message: (i: number) => NatsPublish,
    ): Promise<SendOutcome> {
      if (count === 0) return { ok: true, status: null, error: null };
      let current: Link | undefined;
      const tokens: string[] = [];
      let timer: NodeJS.Timeout | undefined;
      try {
        current = await link(destinationId, servers, credentials);
        const l = current;
        // One promise for all acknowledgements, handled from the start: one refused during a yield below
        // must not be an unhandled rejection.
        let remaining = count;
        let settle!: (error?: Error) => void;
        const acked = new Promise<void>((resolve, reject) => {
          settle = (error) => (error === undefined ? resolve() : reject(error));
        });
        acked.catch(() => {});
        const waiter: Waiting = {
          resolve: () => {
            if (--remaining === 0) settle();
          },
          reject: (error) => settle(error),
        };
        // Published in order on one connection (the server stores them in that order); all acks awaited.
        for (let i = 0; i < count; i++) {
          if (i > 0 && i % SLICE === 0) {
            await new Promise<void>((resolve) => setImmediate(resolve));
            if (l.connection.isClosed()) throw new Error('connection closed');
          }
          const m = message(i);
          const token = String(l.next++);
          tokens.push(token);
          l.waiting.set(token, waiter);
          const h = headers();
          h.set('Nats-Msg-Id', m.id);
          l.connection.publish(m.subject, m.body, { reply: `${l.inbox}.${token}`, headers: h });
        }
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no acknowledgement within ${options.timeoutMs} ms`)),
            options.timeoutMs,
          );
        });
        await Promise.race([acked, timeout]);
        return { ok: true, status: null, error: null };
      } catch (error) {
        return failedSend('NATS: ', error);
      } finally {
        clearTimeout(timer);
        // Acknowledgements still awaited belong to a failed batch: nobody waits for them any more.
        if (current !== undefined) for (const token of tokens) current.waiting.delete(token);
      }
    },
    /** The destinations with an open link. */
    linked(): string[] {
      return [...links.keys()];
    },
    async closeOne(destinationId: string): Promise<void> {
      const existing = links.get(destinationId);
      links.delete(destinationId);
      if (existing !== undefined) fail(existing, new Error('closed'));
      await existing?.connection.close().catch(() => {});
    },
    async close(): Promise<void> {
      const all = [...links.values()];
      links.clear();
      for (const l of all) fail(l, new Error('closed'));
      await Promise.all(all.map((l) => l.connection.close().catch(() => {})));
    },
  };
}

export type NatsSender = ReturnType<typeof createNatsSender>;

function parseCredentials(value: unknown, errors: FieldError[]): DestinationCredentials | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/credentials', message: 'must be an object with user and pass, or token' });
    return null;
  }
  const raw = value as Record<string, unknown>;
  const credentials: DestinationCredentials = {};
  for (const key of Object.keys(raw)) {
    if (!['user', 'pass', 'token'].includes(key) || typeof raw[key] !== 'string')
      errors.push({ pointer: `/credentials/${key}`, message: 'must be user, pass or token, a string' });
    else credentials[key as 'user' | 'pass' | 'token'] = raw[key] as string;
  }
  return credentials;
}

/** Every message of a cycle in one delivery: all publishes pipelined, every acknowledgement awaited. */
function natsDriver(options: DriverOptions): DestinationDriver {
  const sender = createNatsSender(options);
  const subjects = subjectCache();
  return {
    batchSize: () => undefined,
    async deliver(d, messages, context) {
      const started = performance.now();
      // Each message formatted as it is published.
      const outcome = await sender.send(d.id, d.config.servers!, d.credentials, messages.length, (i) => {
        const message = messages[i]!;
        const w = context.format(message);
        return { subject: subjects.of(d.config.subject!, d.productId, message), id: w.id, body: bytesOf(w) };
      });
      context.sent(messages.map(context.format), outcome, performance.now() - started);
      return outcome.ok ? { accepted: messages.length } : { accepted: 0, failure: outcome };
    },
    // A deleted destination's connection (the delete may have run in another thread or instance).
    async prune(present) {
      for (const id of sender.linked()) if (!present.has(id)) await sender.closeOne(id);
    },
    forget: (id) => sender.closeOne(id),
    close: () => sender.close(),
  };
}

export const natsKind: DestinationKind = {
  label: 'NATS',
  fields: ['servers', 'subject', 'credentials'],
  editable: [],
  parse(input, errors) {
    const servers = stringList(input.servers, '/servers', errors);
    if (servers !== undefined) {
      try {
        natsHosts(servers);
      } catch {
        errors.push({ pointer: '/servers', message: 'must be NATS server URLs such as nats://host:4222' });
      }
    }
    if (
      typeof input.subject !== 'string' ||
      input.subject.trim() === '' ||
      input.subject.length > 255 ||
      /\s/.test(input.subject)
    ) {
      errors.push({
        pointer: '/subject',
        message: 'must be a subject template such as inlet.{product_id}.{canonical_name}',
      });
    }
    const config = { servers: servers ?? [], subject: String(input.subject) };
    return { config, credentials: parseCredentials(input.credentials, errors) };
  },
  edit: () => undefined,
  async check(config, { guard }) {
    for (const host of natsHosts(config.servers!)) await refusedAs('/servers', () => guard.checkHost(host));
  },
  driver: natsDriver,
};
