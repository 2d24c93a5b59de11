// Refuses and counts every outgoing TCP connection to a host that is not loopback, so a test that
// uses a real SDK cannot reach the SDK vendor's servers (clarifications §4).
import net from 'node:net';

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost|::ffff:127\.\d+\.\d+\.\d+)$/;

export interface LoopbackGuard {
  /** Hosts that something tried to reach, in order. */
  readonly refused: string[];
  restore(): void;
}

export function guardLoopback(): LoopbackGuard {
  const refused: string[] = [];
  const original = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function guardedConnect(this: net.Socket, ...args: unknown[]) {
    const first = args[0];
    const options = Array.isArray(first) ? first[0] : first;
    const host =
      typeof options === 'object' && options !== null
        ? (options as { host?: string; path?: string }).path !== undefined
          ? 'localhost'
          : ((options as { host?: string }).host ?? 'localhost')
        : typeof args[1] === 'string'
          ? args[1]
          : 'localhost';
    if (!LOOPBACK.test(host)) {
      refused.push(host);
      process.nextTick(() => this.destroy(new Error(`test guard: connection to non-loopback host ${host} refused`)));
      return this;
    }
    return (original as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof net.Socket.prototype.connect;
  return {
    refused,
    restore() {
      net.Socket.prototype.connect = original;
    },
  };
}
