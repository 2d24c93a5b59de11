// Fault test (issue 9): PostgreSQL stops for a few seconds under sustained ingest, then comes back.
// The cluster is the test's own (initdb into a temp dir, pg_ctl on a free port, clarifications §5);
// the machine's PostgreSQL at 5432 is never touched. Runs in the PostgreSQL pass of the system tier.
//   - while it is down, every answer is 503 problem+json (code unavailable), nothing else;
//   - ingest resumes by itself within 1 s of the database accepting connections again;
//   - every acknowledged (201) event is stored; the server process never exits.
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import { createServices } from '../../src/services.js';
import { dialect, testConfig } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { assertAllStored, freePort, send, statusCounts, stopServer, sustainedIngest, unexpectedAnswers, type Answer } from './faults-support.js';

const BIN = process.env.INLET_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const OUTAGE_MS = 3000;

/** Runs a PostgreSQL binary as the postgres user when we are root (initdb refuses root). */
function pgCommand(binary: string, args: string[]): { command: string; args: string[] } {
  const path = join(BIN, binary);
  return userInfo().uid === 0 ? { command: 'runuser', args: ['-u', 'postgres', '--', path, ...args] } : { command: path, args };
}

function run(binary: string, args: string[]): string {
  const { command, args: full } = pgCommand(binary, args);
  return execFileSync(command, full, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
}

/** The same, without blocking this process's event loop (the load keeps running meanwhile). */
async function runAsync(binary: string, args: string[]): Promise<void> {
  const { command, args: full } = pgCommand(binary, args);
  await promisify(execFile)(command, full, { timeout: 60_000 });
}

interface Cluster {
  dir: string;
  port: number;
  url: string;
  start(): Promise<void>;
  stopImmediately(): Promise<void>;
  remove(): void;
}

async function createCluster(): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-pg-fault-'));
  if (userInfo().uid === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, 'data');
  const port = await freePort();
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-instructions']);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=50 -c shared_buffers=16MB`;
  const cluster: Cluster = {
    dir,
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      // -w waits until it accepts connections; the test measures that moment itself as well.
      await runAsync('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
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
  await cluster.start();
  return cluster;
}

/** When PostgreSQL answers SELECT 1 again (polled every 10 ms). */
async function acceptingAt(url: string, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 500 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return Date.now();
    } catch {
      if (Date.now() > deadline) throw new Error(`PostgreSQL did not come back within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    } finally {
      await client.end().catch(() => {});
    }
  }
}

const skip = dialect !== 'postgres' ? 'runs in the PostgreSQL pass' : !existsSync(join(BIN, 'initdb')) ? `no PostgreSQL binaries in ${BIN} (INLET_PG_BIN)` : false;

let cluster: Cluster | undefined;
let server: ServerProcess | undefined;
after(async () => {
  if (server !== undefined && server.child.exitCode === null) server.child.kill('SIGKILL');
  cluster?.remove();
});

test('PostgreSQL stopped for 3 s under sustained ingest: 503 problem+json only while down, back within 1 s, nothing acknowledged lost', { skip, timeout: 180_000 }, async () => {
  cluster = await createCluster();
  const seeded = await createServices(testConfig(cluster.url), { defaultMetrics: false });
  const product = await seeded.keys.createProduct('Outage');
  const { key } = await seeded.keys.createKey(product.id, { kind: 'events' });
  await seeded.close();

  server = await startServerProcess({ INLET_DATABASE_URL: cluster.url, INLET_RATE_LIMIT_RPS: '0', INLET_KEY_CACHE_TTL_MS: '1000' });
  const load = sustainedIngest(server, key, { workers: 8, prefix: 'pg' });
  try {
    await load.untilAcknowledged(100, 30_000);

    const stoppingAt = Date.now();
    await cluster.stopImmediately();
    const downAt = Date.now();
    await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));
    const healthWhileDown = await send(`${server.url}/healthz`);
    assert.equal(healthWhileDown.status, 200, '/healthz answers while PostgreSQL is down');
    const readyWhileDown = await send(`${server.url}/readyz`);
    assert.equal(readyWhileDown.status, 503, '/readyz says not ready while PostgreSQL is down');

    const starting = cluster.start();
    const upAt = await acceptingAt(cluster.url, 60_000);
    await starting;
    await load.untilAcknowledged(100, 30_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await load.stop();

    const answers = load.answers;
    const during = answers.filter((a) => a.sentAt >= downAt && a.answeredAt <= upAt);
    const firstBack = answers.filter((a) => a.status === 201 && a.answeredAt >= upAt).sort((a, b) => a.answeredAt - b.answeredAt)[0];
    const lateRefusals = answers.filter((a) => a.sentAt >= upAt + 1000 && a.status !== 201);
    const describe = (list: Answer[]) => JSON.stringify(list.slice(0, 5));

    assert.equal(server.child.exitCode, null, `the server process exited:\n${server.output().slice(-3000)}`);
    assert.deepEqual(unexpectedAnswers(answers), [], `answers other than 201 and 503 problem+json: ${describe(unexpectedAnswers(answers))}`);
    assert.ok(during.length > 0, 'requests were answered while PostgreSQL was down');
    assert.deepEqual(
      during.filter((a) => a.status !== 503),
      [],
      `while down (${downAt - stoppingAt} ms to stop, ${OUTAGE_MS} ms out) every answer is 503: ${JSON.stringify(statusCounts(during))}`,
    );
    assert.ok(firstBack !== undefined, 'ingest resumed');
    assert.ok(firstBack.answeredAt - upAt <= 1000, `ingest resumed ${firstBack.answeredAt - upAt} ms after PostgreSQL accepted connections again (limit 1000 ms)`);
    assert.deepEqual(lateRefusals, [], `refused more than 1 s after PostgreSQL was back: ${describe(lateRefusals)}`);

    const exit = await stopServer(server);
    assert.equal(exit.code, 0, `the server stops cleanly after the outage:\n${server.output().slice(-2000)}`);
    await assertAllStored(cluster.url, product.id, load.acknowledged);
    console.log(
      `PostgreSQL outage: ${answers.length} answers ${JSON.stringify(statusCounts(answers))}; ${during.length} while down; ` +
        `first 201 ${firstBack.answeredAt - upAt} ms after PostgreSQL was back; ${load.acknowledged.size} acknowledged, all stored`,
    );
  } finally {
    await load.stop();
  }
});
