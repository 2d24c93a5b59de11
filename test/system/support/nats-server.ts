// A NATS server with JetStream of the test's own (clarifications §5): `nats-server -js -sd <tmp>` on a free
// loopback port, stopped and started again on the same port and store. Never the machine's server on 4222.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const NATS_SERVER = process.env.INLET_TEST_NATS_SERVER ?? '/usr/sbin/nats-server';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface TestNatsServer {
  url: string;
  port: number;
  start(): Promise<void>;
  /** SIGKILL: as if the server crashed. */
  kill(): Promise<void>;
  /** Stops it (if running) and removes its store. */
  close(): Promise<void>;
}

export async function startNatsServer(): Promise<TestNatsServer> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-nats-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  let output = '';
  const server: TestNatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    async start() {
      output = '';
      const started = spawn(NATS_SERVER, ['-js', '-sd', dir, '-a', '127.0.0.1', '-p', String(port)], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child = started;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`nats-server did not start:\n${output}`)), 15_000);
        const onData = (chunk: Buffer) => {
          output += chunk.toString();
          if (/Server is ready/.test(output)) {
            clearTimeout(timer);
            resolve();
          }
        };
        started.stdout!.on('data', onData);
        started.stderr!.on('data', onData);
        started.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`nats-server exited with ${code}:\n${output}`));
        });
      });
    },
    async kill() {
      if (child === undefined || child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
      child = undefined;
    },
    async close() {
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}
