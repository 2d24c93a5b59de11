// A pg_auto_failover formation of our own for tests: a monitor, a primary and a synchronous standby,
// all on 127.0.0.1 on free ports, in a temp dir (shared/recipes/pg-failover.md). The machine's own
// PostgreSQL is never touched. Every process runs in a process group of its own so a node can be
// killed whole (kill -9 -- -pgid), and destroy() kills every group and removes the dir, even after a
// failure.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, appendFileSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const PG_BIN = '/usr/lib/postgresql/15/bin';

/** Why the drill cannot run here, or undefined. Installs Debian's package when missing and root. */
export function failoverToolsProblem(): string | undefined {
  const has = () => spawnSync('sh', ['-c', 'command -v pg_autoctl'], { encoding: 'utf8' }).status === 0;
  if (!has()) {
    if (process.getuid?.() !== 0)
      return 'pg_autoctl is not installed (apt-get install postgresql-15-auto-failover) and this is not root';
    const install = spawnSync('apt-get', ['install', '-y', '-q', 'postgresql-15-auto-failover'], {
      encoding: 'utf8',
      timeout: 300_000,
    });
    if (!has())
      return `could not install postgresql-15-auto-failover: ${install.stderr?.slice(-500) ?? install.error?.message}`;
  }
  if (!existsSync(join(PG_BIN, 'postgres'))) return `PostgreSQL 15 binaries not found in ${PG_BIN}`;
  if (spawnSync('id', ['postgres']).status !== 0) return 'no "postgres" system user to run pg_autoctl as';
  return undefined;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface NodeState {
  name: string;
  port: number;
  assigned: string;
  reported: string;
}

/** A row of the monitor's event log (pgautofailover.event): each state assigned or reported. */
export interface FormationEvent {
  at: Date;
  node: string;
  reported: string;
  goal: string;
  /** The replication state the node reported (sync, quorum, async, …). */
  replication: string | null;
  lsn: string;
  description: string;
}

/** What a primary says of its replication: its synchronous_standby_names and its standbys. */
export interface ReplicationFacts {
  synchronousStandbyNames: string;
  standbys: Array<{ name: string; state: string; syncState: string }>;
}

export interface Formation {
  dir: string;
  monitorPort: number;
  ports: { node1: number; node2: number };
  /** `pg_autoctl show uri` of the formation, with the postgres user added. */
  uri: string;
  /** kill -9 of the node's whole process group (its pg_autoctl, keeper and postgres). */
  killNode(name: 'node1' | 'node2'): void;
  /** Runs the node again (after killNode): it rejoins as a standby. */
  runNode(name: 'node1' | 'node2'): void;
  states(): Promise<NodeState[]>;
  waitFor(predicate: (states: NodeState[]) => boolean, what: string, timeoutMs: number): Promise<NodeState[]>;
  switchover(): Promise<void>;
  log(name: string): string;
  /** The monitor's event log since `since`, oldest first. */
  events(since: Date): Promise<FormationEvent[]>;
  /** The replication facts of the server on `port` (a primary). */
  replication(port: number): Promise<ReplicationFacts>;
  /**
   * Has the monitor send the primary its replication settings again (`pg_autoctl set node
   * replication-quorum true` on the standby: the monitor assigns apply_settings to the primary, which
   * fetches synchronous_standby_names anew).
   */
  applySettings(standby: 'node1' | 'node2'): void;
  destroy(): void;
}

const SHORT_TIMEOUTS = `
listen_addresses = '127.0.0.1'
shared_buffers = '128MB'
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 2500
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 4000
pgautofailover.primary_demote_timeout = 6000
`;

export async function startFormation(): Promise<Formation> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-failover-'));
  mkdirSync(join(dir, 'run'));
  const children = new Map<string, ChildProcess>();
  const logs = new Map<string, string>();
  const groups = new Set<number>();
  const env = [
    'env',
    '-i',
    `HOME=${dir}`,
    `PATH=${PG_BIN}:/usr/bin:/bin`,
    `XDG_CONFIG_HOME=${dir}/config`,
    `XDG_DATA_HOME=${dir}/share`,
    `XDG_RUNTIME_DIR=${dir}/run`,
  ];
  const chown = () => execFileSync('chown', ['-R', 'postgres:', dir]);
  chown();
  const asPostgres = (args: string[], timeoutMs = 120_000) => {
    const result = spawnSync('runuser', ['-u', 'postgres', '--', ...env, ...args], {
      encoding: 'utf8',
      timeout: timeoutMs,
      cwd: dir,
    });
    if (result.status !== 0)
      throw new Error(
        `${args.join(' ')} failed (${result.status ?? result.error?.message}):\n${result.stdout}\n${result.stderr}`,
      );
    return result.stdout;
  };
  const run = (name: string) => {
    const child = spawn('runuser', ['-u', 'postgres', '--', ...env, 'pg_autoctl', 'run', '--pgdata', join(dir, name)], {
      detached: true, // a process group of its own: killNode kills it whole
      stdio: ['ignore', 'pipe', 'pipe'],
      cwd: dir,
    });
    children.set(name, child);
    if (child.pid !== undefined) groups.add(child.pid);
    const append = (chunk: Buffer) => logs.set(name, ((logs.get(name) ?? '') + chunk.toString()).slice(-200_000));
    child.stdout!.on('data', append);
    child.stderr!.on('data', append);
    child.unref();
  };
  const killGroup = (pid: number | undefined) => {
    if (pid === undefined) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };

  const monitorPort = await freePort();
  const ports = { node1: await freePort(), node2: await freePort() };
  const monitorUri = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;

  let destroyed = false;
  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    for (const pid of groups) killGroup(pid);
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => destroy();
  process.once('exit', onExit);
  // 'exit' does not run when the test process is stopped by a signal (a runner's timeout, Ctrl-C): the
  // formation's servers would outlive it. Clean up, then die of the same signal.
  const onSignal = (signal: NodeJS.Signals) => {
    destroy();
    process.kill(process.pid, signal);
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(signal, onSignal);

  const states = async (): Promise<NodeState[]> => {
    const out = asPostgres(['pg_autoctl', 'show', 'state', '--pgdata', join(dir, 'monitor'), '--json'], 15_000);
    const parsed = JSON.parse(out) as Array<Record<string, unknown>>;
    // pg_autoctl 2.0's keys (older versions spelt some differently).
    return parsed.map((n) => ({
      name: String(n.nodename ?? n.node_name),
      port: Number(n.nodeport ?? n.node_port),
      assigned: String(n.assigned_group_state),
      reported: String(n.current_group_state ?? n.reported_group_state),
    }));
  };
  const waitFor = async (predicate: (s: NodeState[]) => boolean, what: string, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    let last: NodeState[] = [];
    let lastError: unknown;
    while (Date.now() < deadline) {
      try {
        last = await states();
        if (predicate(last)) return last;
      } catch (error) {
        lastError = error;
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    throw new Error(
      `formation: not ${what} within ${timeoutMs} ms; last state ${JSON.stringify(last)} ${lastError ?? ''}`,
    );
  };
  const is = (s: NodeState[], name: string, state: string) =>
    s.some((n) => n.name === name && n.assigned === state && n.reported === state);

  try {
    asPostgres([
      'pg_autoctl',
      'create',
      'monitor',
      '--pgdata',
      join(dir, 'monitor'),
      '--pgport',
      String(monitorPort),
      '--listen',
      '127.0.0.1',
      '--hostname',
      '127.0.0.1',
      '--auth',
      'trust',
      '--no-ssl',
    ]);
    appendFileSync(join(dir, 'monitor', 'postgresql.conf'), SHORT_TIMEOUTS);
    run('monitor');
    const createNode = (name: 'node1' | 'node2') => {
      asPostgres([
        'pg_autoctl',
        'create',
        'postgres',
        '--pgdata',
        join(dir, name),
        '--pgport',
        String(ports[name]),
        '--listen',
        '127.0.0.1',
        '--hostname',
        '127.0.0.1',
        '--name',
        name,
        '--auth',
        'trust',
        '--no-ssl',
        '--dbname',
        'events',
        '--monitor',
        monitorUri,
      ]);
      asPostgres([
        'pg_autoctl',
        'config',
        'set',
        '--pgdata',
        join(dir, name),
        'timeout.network_partition_timeout',
        '4',
      ]);
      appendFileSync(join(dir, name, 'postgresql.conf'), "shared_buffers = '128MB'\n");
      chown();
      run(name);
    };
    // The monitor needs a moment before nodes can register: retry the first create briefly.
    for (let attempt = 0; ; attempt++) {
      try {
        createNode('node1');
        break;
      } catch (error) {
        if (attempt >= 20) throw error;
        rmSync(join(dir, 'node1'), { recursive: true, force: true });
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    await waitFor((s) => is(s, 'node1', 'single'), 'node1 single', 60_000);
    createNode('node2');
    await waitFor(
      (s) => is(s, 'node1', 'primary') && is(s, 'node2', 'secondary'),
      'node1 primary and node2 secondary',
      90_000,
    );
  } catch (error) {
    const detail = [...logs].map(([name, log]) => `--- ${name}\n${log.slice(-3000)}`).join('\n');
    destroy();
    process.removeListener('exit', onExit);
    throw new Error(`${(error as Error).message}\n${detail}`);
  }
  const shown = asPostgres([
    'pg_autoctl',
    'show',
    'uri',
    '--pgdata',
    join(dir, 'monitor'),
    '--formation',
    'default',
  ]).trim();
  const uri = shown.replace(/^postgres(ql)?:\/\//, 'postgres://postgres@');

  return {
    dir,
    monitorPort,
    ports,
    uri,
    killNode(name) {
      killGroup(children.get(name)?.pid);
    },
    runNode(name) {
      chown();
      run(name);
    },
    states,
    waitFor,
    async switchover() {
      // Asynchronous: the test's load and probes keep running meanwhile.
      const child = spawn(
        'runuser',
        [
          '-u',
          'postgres',
          '--',
          ...env,
          'pg_autoctl',
          'perform',
          'switchover',
          '--pgdata',
          join(dir, 'monitor'),
          '--wait',
          '90',
        ],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
          cwd: dir,
        },
      );
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const [code] = (await once(child, 'exit')) as [number | null];
      if (code !== 0) throw new Error(`pg_autoctl perform switchover exited with ${code}:\n${output.slice(-3000)}`);
    },
    log: (name) => logs.get(name) ?? '',
    async events(since) {
      const client = new pg.Client({
        host: '127.0.0.1',
        port: monitorPort,
        user: 'autoctl_node',
        database: 'pg_auto_failover',
        connectionTimeoutMillis: 5000,
      });
      await client.connect();
      try {
        const { rows } = await client.query<{
          at: Date;
          node: string;
          reported: string;
          goal: string;
          replication: string | null;
          lsn: string;
          description: string;
        }>(
          'SELECT eventtime AS at, nodename AS node, reportedstate::text AS reported, goalstate::text AS goal, reportedrepstate AS replication, ' +
            'reportedlsn::text AS lsn, description FROM pgautofailover.event WHERE eventtime >= $1 ORDER BY eventid',
          [since],
        );
        return rows;
      } finally {
        await client.end().catch(() => {});
      }
    },
    applySettings(standby) {
      asPostgres(['pg_autoctl', 'set', 'node', 'replication-quorum', 'true', '--pgdata', join(dir, standby)], 60_000);
    },
    async replication(port) {
      const client = new pg.Client({
        host: '127.0.0.1',
        port,
        user: 'postgres',
        database: 'postgres',
        connectionTimeoutMillis: 5000,
      });
      await client.connect();
      try {
        const names = await client.query<{ value: string }>(
          "SELECT current_setting('synchronous_standby_names') AS value",
        );
        const standbys = await client.query<{ name: string; state: string; sync_state: string }>(
          'SELECT application_name AS name, state, sync_state FROM pg_stat_replication ORDER BY application_name',
        );
        return {
          synchronousStandbyNames: names.rows[0]!.value,
          standbys: standbys.rows.map((r) => ({ name: r.name, state: r.state, syncState: r.sync_state })),
        };
      } finally {
        await client.end().catch(() => {});
      }
    },
    destroy() {
      destroy();
      process.removeListener('exit', onExit);
    },
  };
}
