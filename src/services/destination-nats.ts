// NATS JetStream delivery (events-out §6) with the official @nats-io packages: each message published
// with `Nats-Msg-Id` = its id (JetStream drops a duplicate inside the stream's duplicate window), and a
// batch counts as delivered only when every publish was acknowledged. The servers pass the outbound
// guard before every (re)connect made here; the client's own reconnects reuse the checked list.
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import type { DestinationCredentials } from '../storage/types.js';
import type { OutboundGuard } from './outbound-guard.js';
import type { SendOutcome } from './destination-webhook.js';

export interface NatsPublish {
  subject: string;
  id: string;
  body: string;
}

interface Link {
  key: string;
  connection: NatsConnection;
  js: JetStreamClient;
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

  async function link(destinationId: string, servers: string[], credentials: DestinationCredentials | null): Promise<Link> {
    const key = JSON.stringify([servers, credentials]);
    const existing = links.get(destinationId);
    if (existing !== undefined && existing.key === key && !existing.connection.isClosed()) return existing;
    if (existing !== undefined) {
      links.delete(destinationId);
      await existing.connection.close().catch(() => {});
    }
    for (const host of natsHosts(servers)) await options.guard.checkHost(host);
    const connection = await connect({
      servers,
      timeout: options.timeoutMs,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      ...(credentials?.user === undefined ? {} : { user: credentials.user }),
      ...(credentials?.pass === undefined ? {} : { pass: credentials.pass }),
      ...(credentials?.token === undefined ? {} : { token: credentials.token }),
    });
    const created = { key, connection, js: jetstream(connection, { timeout: options.timeoutMs }) };
    links.set(destinationId, created);
    return created;
  }

  return {
    async send(destinationId: string, servers: string[], credentials: DestinationCredentials | null, messages: NatsPublish[]): Promise<SendOutcome> {
      let current: Link | undefined;
      try {
        current = await link(destinationId, servers, credentials);
        const js = current.js;
        // Published in order on one connection (the server stores them in that order); all acks awaited.
        await Promise.all(messages.map((m) => js.publish(m.subject, m.body, { msgID: m.id, timeout: options.timeoutMs })));
        return { ok: true, status: null, error: null };
      } catch (error) {
        return { ok: false, status: null, error: `NATS: ${(error as Error).message}`.slice(0, 500) };
      }
    },
    async closeOne(destinationId: string): Promise<void> {
      const existing = links.get(destinationId);
      links.delete(destinationId);
      await existing?.connection.close().catch(() => {});
    },
    async close(): Promise<void> {
      const all = [...links.values()];
      links.clear();
      await Promise.all(all.map((l) => l.connection.close().catch(() => {})));
    },
  };
}

export type NatsSender = ReturnType<typeof createNatsSender>;
