// A PostgreSQL cluster of a test's own (clarifications §5): initdb into a temp dir, pg_ctl on a free
// port, never the machine's server at 5432. Used by the fault test (stop and start it) and the TLS test
// (its own certificates and pg_hba rules).
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../faults-support.js';

export const BIN = process.env.INLET_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** Why cluster tests cannot run here, or false. */
export function clusterProblem(): string | false {
  return existsSync(join(BIN, 'initdb')) ? false : `no PostgreSQL binaries in ${BIN} (INLET_PG_BIN)`;
}

/** Runs a PostgreSQL binary as the postgres user when we are root (initdb refuses root). */
function pgCommand(binary: string, args: string[]): { command: string; args: string[] } {
  const path = join(BIN, binary);
  return userInfo().uid === 0
    ? { command: 'runuser', args: ['-u', 'postgres', '--', path, ...args] }
    : { command: path, args };
}

function run(binary: string, args: string[]): string {
  const { command, args: full } = pgCommand(binary, args);
  return execFileSync(command, full, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
}

/** The same, without blocking this process's event loop (a load keeps running meanwhile). */
async function runAsync(binary: string, args: string[]): Promise<void> {
  const { command, args: full } = pgCommand(binary, args);
  await promisify(execFile)(command, full, { timeout: 60_000 });
}

/** Makes a path the postgres user's when we are root (the server reads its key files as that user). */
export function giveToPostgres(path: string): void {
  if (userInfo().uid !== 0) return;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  chownSync(path, uid, gid);
}

export interface Cluster {
  dir: string;
  port: number;
  url: string;
  start(): Promise<void>;
  stopImmediately(): Promise<void>;
  remove(): void;
}

export interface ClusterOptions {
  /** Extra `-c name=value` settings. */
  settings?: Record<string, string>;
  /** pg_hba.conf lines put before initdb's own (first match wins). */
  hba?: string[];
  /** Runs after initdb, before the first start, with the cluster's directory (certificates, say). */
  prepare?: (dir: string) => void;
}

export async function createCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-pg-cluster-'));
  giveToPostgres(dir);
  const data = join(dir, 'data');
  const port = await freePort();
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-instructions']);
  if (options.hba !== undefined) {
    const path = join(data, 'pg_hba.conf');
    writeFileSync(path, `${options.hba.join('\n')}\n${readFileSync(path, 'utf8')}`);
  }
  options.prepare?.(dir);
  const extra = Object.entries(options.settings ?? {}).map(([name, value]) => `-c ${name}=${value}`);
  const serverOptions = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    '-c max_connections=50',
    '-c shared_buffers=16MB',
    ...extra,
  ].join(' ');
  const cluster: Cluster = {
    dir,
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      // -w waits until it accepts connections.
      await runAsync('pg_ctl', ['-D', data, '-o', serverOptions, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
    },
    async stopImmediately() {
      // Immediate: like a crash (no shutdown checkpoint); what was committed must survive it.
      await runAsync('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
    remove() {
      if (existsSync(join(data, 'postmaster.pid'))) {
        const { command, args } = pgCommand('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']);
        spawnSync(command, args, { stdio: 'ignore' });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await cluster.start();
  } catch (error) {
    const log = existsSync(join(dir, 'log')) ? readFileSync(join(dir, 'log'), 'utf8').slice(-2000) : '';
    cluster.remove();
    throw new Error(`${(error as Error).message}\n${log}`);
  }
  return cluster;
}
