// Child processes and clean-up: every server the bench starts is registered here and stopped at the
// end, on error, on Ctrl-C and on the overall time limit.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

type Cleanup = () => Promise<void> | void;
const cleanups: Cleanup[] = [];
let cleaning: Promise<void> | undefined;

/** Registers work to undo at exit; undone in reverse order. */
export function onCleanup(cleanup: Cleanup): void {
  cleanups.push(cleanup);
}

export function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch (error) {
        process.stderr.write(
          `bench: clean-up step failed: ${error instanceof Error ? error.message : String(error)}\n`,
        );
      }
    }
  })();
  return cleaning;
}

/** Ctrl-C, SIGTERM and the overall time limit all end the same way: stop children, remove temp data. */
export function installExitHandlers(limitSeconds: number): void {
  let aborting = false;
  const abort = (why: string, code: number) => {
    // A terminal's Ctrl-C reaches this process twice (from the tty and relayed by tsx): a second
    // signal must not kill the process half-way through the clean-up.
    if (aborting) return;
    aborting = true;
    process.stderr.write(`\nbench: ${why}; cleaning up…\n`);
    void cleanUp().finally(() => process.exit(code));
  };
  process.on('SIGINT', () => abort('interrupted', 130));
  process.on('SIGTERM', () => abort('terminated', 143));
  setTimeout(() => abort(`time limit of ${limitSeconds} s reached`, 124), limitSeconds * 1000).unref();
}

/** A free TCP port on 127.0.0.1 (closed again before use: a small race, fine for a bench). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
}

/**
 * The environment of a bench's Inlet server: loopback, its database and admin token, and the rate limiter on as
 * in production with a budget too large to refuse (2000/s by default would cap a run). `outbound`: destinations
 * on loopback allowed, as an operator with local targets would set it. `extra` adds to it or overrides it.
 */
export function serverEnv(
  server: { port: number; databaseUrl: string; adminToken: string; logLevel?: string; outbound?: boolean },
  extra: NodeJS.ProcessEnv = {},
): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOST: '127.0.0.1',
    PORT: String(server.port),
    INLET_DATABASE_URL: server.databaseUrl,
    INLET_ADMIN_TOKEN: server.adminToken,
    INLET_LOG_LEVEL: server.logLevel ?? 'warn',
    INLET_RATE_LIMIT_RPS: '10000000',
    ...(server.outbound === true
      ? { INLET_OUTBOUND_ALLOW_PRIVATE: 'true', INLET_OUTBOUND_ALLOW: '127.0.0.0/8,::1' }
      : {}),
    // An INLET_ setting in the bench's own environment reaches the server (a before/after of one setting).
    ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith('INLET_'))),
    ...extra,
  };
}

export function startChild(
  name: string,
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  logFile: string,
): Child {
  const log = openSync(logFile, 'a');
  const child = spawn(command, args, { env, stdio: ['ignore', log, log] });
  closeSync(log);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let stopping: Promise<number | null> | undefined;
  const handle: Child = {
    name,
    process: child,
    stop(graceMs = 15_000) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        const code = await exited;
        clearTimeout(timer);
        return code;
      })();
      return stopping;
    },
  };
  onCleanup(() => handle.stop(5000).then(() => undefined));
  return handle;
}

/** Polls `url` until it answers 2xx; fails if the child exits first or after `timeoutMs`. */
export async function waitUntilReady(child: Child, url: string, logFile: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.process.exitCode !== null)
      throw new Error(`${child.name} exited with code ${child.process.exitCode}; see ${logFile}`);
    try {
      const response = await fetch(url);
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${child.name} did not answer ${url} within ${timeoutMs} ms; see ${logFile}`);
}

/**
 * CPU seconds (user + system) a process, or one thread `tid` of it, has used so far, from /proc (Linux); undefined
 * elsewhere.
 */
export function cpuSeconds(pid: number | undefined, tid?: number): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15 (1-based).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/**
 * The machine's CPU seconds from /proc/stat (all cores): `busy` (neither idle nor waiting on I/O; what the
 * hypervisor stole counts as busy), `steal` of those, and `all`.
 */
export function machineSeconds(): { busy: number; steal: number; all: number } {
  try {
    const [, ...values] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
    const n = values.slice(0, 8).map(Number);
    const all = n.reduce((a, b) => a + b, 0);
    return { busy: (all - n[3]! - n[4]!) / CLOCK_TICKS, steal: (n[7] ?? 0) / CLOCK_TICKS, all: all / CLOCK_TICKS };
  } catch {
    return { busy: 0, steal: 0, all: 0 };
  }
}

/** USER_HZ: 100 on every mainstream Linux build. */
const CLOCK_TICKS = 100;

/** CPU seconds used so far by every process whose command name is `comm` (e.g. every PostgreSQL backend). */
export function cpuSecondsOfCommand(comm: string): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      if (name !== comm) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime, stime, and cutime, cstime (children that exited: a backend's own children, rare)
      total += (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}

/** The server's own background processes, whose work is shared by every database (WAL, checkpoints, vacuum). */
const POSTGRES_BACKGROUND =
  /^postgres: (?:[^:]+: )?(?:checkpointer|background writer|walwriter|autovacuum (?:launcher|worker)|logical replication launcher)\b/;

/**
 * CPU seconds so far of each PostgreSQL process working for `database`: its backends, and with `background` the
 * server's background processes.
 */
function postgresProcessCpu(database: string, background: boolean): Map<number, number> {
  const seen = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== 'postgres') continue;
      const command = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!command.includes(` ${database} `) && !(background && POSTGRES_BACKGROUND.test(command))) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      seen.set(Number(entry), (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS);
    } catch {
      // the process ended meanwhile
    }
  }
  return seen;
}

/**
 * A meter of the CPU PostgreSQL spends for `database`: its backends (their command line names the database) and,
 * unless `background` is false, the server's background processes; not the postmaster, whose counters collect every exited backend of every
 * database (on a machine shared with other test suites `cpuSecondsOfCommand('postgres')` counts their work too).
 * It samples every 100 ms, so a backend that starts and ends within the interval (a baseline's own connection)
 * is counted up to its last sample.
 */
export function postgresCpuMeter(database: string, { background = true } = {}): { read(): number; stop(): number } {
  const first = postgresProcessCpu(database, background);
  const last = new Map(first);
  const sample = () => {
    for (const [pid, seconds] of postgresProcessCpu(database, background)) last.set(pid, seconds);
  };
  const total = () => {
    let seconds = 0;
    for (const [pid, now] of last) seconds += now - (first.get(pid) ?? 0);
    return seconds;
  };
  const timer = setInterval(sample, 100);
  return {
    /** The CPU seconds so far (a sample taken now). */
    read() {
      sample();
      return total();
    },
    stop() {
      clearInterval(timer);
      sample();
      return total();
    },
  };
}

/** Compiles the server into dist/ (tsc with tsconfig.build.json), as `npm run build` does for it; a bench runs
 *  dist/main.js, so this comes first unless it was given --no-build. */
export function buildServer(): void {
  const root = new URL('..', import.meta.url).pathname;
  const result = spawnSync(
    process.execPath,
    [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')],
    { stdio: 'inherit' },
  );
  if (result.status !== 0) throw new Error('the build (tsc -p tsconfig.build.json) failed');
}

/** Runs a bench's `main`, then cleans up and exits: 0 when it finished, 1 (its error on stderr) when it threw. */
export function runBench(main: () => Promise<void>): void {
  main().then(
    async () => {
      await cleanUp();
      process.exit(0);
    },
    async (error: unknown) => {
      process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      await cleanUp();
      process.exit(1);
    },
  );
}
