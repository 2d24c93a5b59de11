// Backups on a real server (issue 36; docs/operations.md). SQLite pass of the system tier (PostgreSQL is backed up
// with its own tools: test/backup.test.ts checks that `inlet backup` says so).
//   - `inlet backup` (the CLI as its own process) while events stream in: the copy holds every event acknowledged
//     before it began and passes integrity_check; ingest answers only 201 (its p99 before and during is printed);
//   - the documented restore: stop, copy the backup over the file, remove -wal/-shm, start: the events are there;
//   - scheduled backups on the server: rotated to INLET_BACKUP_KEEP, each verified, metrics;
//   - bad settings stop the server naming them; a full disk (RLIMIT_FSIZE, and a small tmpfs where mounting is
//     allowed) and a read-only directory fail with a clear message and leave no file behind.
// INLET_BACKUP_TEST_EVENTS=N prefills N events first (default 100,000); the figures are printed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, copyFileSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { prefillSqlite } from '../../bench/prefill.js';
import { backupTimeOf } from '../../src/domain/backups.js';
import { createServices } from '../../src/services.js';
import { ADMIN_TOKEN, dialect, testConfig } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { send, statusCounts, stopServer, sustainedIngest, type Answer } from './faults-support.js';

const skip = dialect === 'sqlite' ? false : 'SQLite only: PostgreSQL is backed up with its own tools';
const PREFILL = Number(process.env.INLET_BACKUP_TEST_EVENTS ?? 100_000);
const binPath = fileURLToPath(new URL('../../src/cli/bin.ts', import.meta.url));
const mainPath = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

interface Run {
  code: number | null;
  out: string;
  err: string;
  startedAt: number;
  /** When it said it began copying (its first line on stderr), or undefined. */
  copyingAt: number | undefined;
  endedAt: number;
}

/** `inlet …argv` as its own process (under tsx), as an operator runs it beside the server; `wrap` prefixes it (prlimit). */
async function inletProcess(env: Record<string, string>, argv: string[], wrap: string[] = []): Promise<Run> {
  const command = [...wrap, process.execPath, '--import', 'tsx', binPath, ...argv];
  const startedAt = Date.now();
  const child = spawn(command[0]!, command.slice(1), {
    env: { ...process.env, INLET_LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let copyingAt: number | undefined;
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
    if (copyingAt === undefined && err.includes('copying')) copyingAt = Date.now();
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, out, err, startedAt, copyingAt, endedAt: Date.now() };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

const latency = (answers: Answer[]) => answers.map((a) => a.answeredAt - a.sentAt);

function inspect(file: string) {
  const db = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
  try {
    return {
      integrity: db.prepare('PRAGMA integrity_check').pluck().all(),
      // SQLite stores an event id as its 16 bytes (migration 853).
      uuids: new Set(
        db
          .prepare(
            `SELECT lower(substr(hex(id), 1, 8) || '-' || substr(hex(id), 9, 4) || '-' || substr(hex(id), 13, 4) || '-' || substr(hex(id), 17, 4) || '-' || substr(hex(id), 21)) FROM events`,
          )
          .pluck()
          .all() as string[],
      ),
    };
  } finally {
    db.close();
  }
}

/** A small tmpfs of our own on a fresh directory (root only), or why not. */
function mountTmpfs(options: string): { dir: string } | { reason: string } {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-backup-mount-'));
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { encoding: 'utf8' });
  if (result.status === 0) return { dir };
  rmSync(dir, { recursive: true, force: true });
  return { reason: `cannot mount a tmpfs here (${(result.stderr || result.error?.message || '').trim()})` };
}

function unmount(mounted: { dir: string } | { reason: string } | undefined): void {
  if (mounted === undefined || !('dir' in mounted)) return;
  spawnSync('umount', [mounted.dir]);
  rmSync(mounted.dir, { recursive: true, force: true });
}

/** Writes zeros into `path` until the file system refuses (ENOSPC). */
function fillDisk(path: string): void {
  const fd = openSync(path, 'w');
  try {
    for (const size of [1024 * 1024, 4096, 1]) {
      const chunk = Buffer.alloc(size);
      for (;;) {
        try {
          writeSync(fd, chunk);
        } catch {
          break;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}

describe('backups of a live SQLite server', { skip }, () => {
  let dir: string;
  let databaseUrl: string;
  let env: Record<string, string>;
  let productId: string;
  let key: string;
  let server: ServerProcess | undefined;
  /** From the first test: the events acknowledged before and after its backup began. */
  let inBackup: Map<string, string>;
  let afterBackup: string[];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'inlet-backup-system-'));
    databaseUrl = `sqlite:${join(dir, 'inlet.db')}`;
    env = { INLET_DATABASE_URL: databaseUrl };
    const seeded = await createServices(testConfig(databaseUrl), { defaultMetrics: false });
    const product = await seeded.keys.createProduct('Backed up live');
    const created = await seeded.keys.createKey(product.id, { kind: 'events' });
    await seeded.close();
    productId = product.id;
    key = created.key;
    const started = Date.now();
    prefillSqlite(join(dir, 'inlet.db'), PREFILL, 'v7', { productId, apiKeyId: created.record.id }, true);
    console.log(
      `prefilled ${PREFILL.toLocaleString('en-US')} events in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  });
  after(async () => {
    if (server !== undefined && server.child.exitCode === null) server.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it(
    'inlet backup under ingest: the copy holds every event acknowledged before it began and passes integrity_check; only 201s (p99 measured)',
    { timeout: 600_000 },
    async () => {
      server = await startServerProcess({ ...env, INLET_RATE_LIMIT_RPS: '0', INLET_ADMIN_TOKEN: ADMIN_TOKEN });
      const load = sustainedIngest(server, key, { workers: 4, prefix: 'live' });
      let run: Run;
      let acknowledgedBefore: Map<string, string>;
      try {
        await load.untilAcknowledged(200, 60_000);
        await new Promise((resolve) => setTimeout(resolve, 5000));
        acknowledgedBefore = new Map(load.acknowledged);
        run = await inletProcess(env, ['backup', join(dir, 'live.db')]);
        await load.untilAcknowledged(100, 30_000);
      } finally {
        await load.stop();
      }
      assert.equal(run.code, 0, `${run.out}\n${run.err}`);
      const answers = load.answers;
      assert.deepEqual(statusCounts(answers.filter((a) => a.status !== 201)), {}, 'every answer was 201');
      const before = answers.filter((a) => a.sentAt >= run.startedAt - 5000 && a.answeredAt < run.startedAt);
      // From the copy's start (the CLI's own start-up under tsx is not the backup) to the CLI's exit.
      const during = answers.filter((a) => a.sentAt >= run.copyingAt! && a.answeredAt <= run.endedAt);
      const p99Before = percentile(latency(before), 99);
      const p99During = percentile(latency(during), 99);
      const copy = inspect(join(dir, 'live.db'));
      assert.deepEqual(copy.integrity, ['ok']);
      const missing = [...acknowledgedBefore.values()].filter((uuid) => !copy.uuids.has(uuid));
      assert.deepEqual(
        missing.slice(0, 10),
        [],
        `${missing.length} of ${acknowledgedBefore.size} events acknowledged before the backup are not in it`,
      );
      assert.ok(copy.uuids.size >= PREFILL + acknowledgedBefore.size);
      inBackup = acknowledgedBefore;
      afterBackup = [...load.acknowledged.values()].filter((uuid) => !copy.uuids.has(uuid));
      console.log(
        `backup of ${PREFILL.toLocaleString('en-US')} prefilled events under ingest: ${run.out.trim().replace(/\n\s*/g, '; ')} ` +
          `(the CLI process ${((run.endedAt - run.startedAt) / 1000).toFixed(1)} s); ingest p99 ${p99Before} ms before ` +
          `(${before.length} requests), ${p99During} ms during (${during.length}); p50 ${percentile(latency(before), 50)} / ${percentile(latency(during), 50)} ms`,
      );
      assert.ok(during.length > 0, 'requests were answered while the backup ran');
      // The latency target (p99 within 3× of before) is measured here, not asserted: it depends on the machine's
      // disk and cores, and bench/README.md ("Other targets") says where it stands, with this test as its command.
      const ratio = p99During / Math.max(p99Before, 10);
      console.log(
        `backup latency target, p99 during ≤ 3× before: ${ratio <= 3 ? 'PASS' : 'FAIL'} (${ratio.toFixed(2)}×)`,
      );
    },
  );
  it('restore as documented: stop, copy the backup over the file, remove -wal/-shm, start: the events are there', async () => {
    assert.ok(server !== undefined && inBackup !== undefined, 'runs after the backup under ingest');
    assert.equal((await stopServer(server)).code, 0, server.output().slice(-2000));
    const file = join(dir, 'inlet.db');
    copyFileSync(join(dir, 'live.db'), file);
    rmSync(`${file}-wal`, { force: true });
    rmSync(`${file}-shm`, { force: true });
    server = await startServerProcess({ ...env, INLET_ADMIN_TOKEN: ADMIN_TOKEN });
    const event = (uuid: string) =>
      send(`${server!.url}/admin/v1/products/${productId}/events/${uuid}`, {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
    const sample = [...inBackup.values()].filter((_, i) => i % Math.ceil(inBackup.size / 25) === 0);
    for (const uuid of sample) assert.equal((await event(uuid)).status, 200, uuid);
    // The restore goes back to when the backup began: what came later is not there.
    assert.ok(afterBackup.length > 0);
    assert.equal((await event(afterBackup[afterBackup.length - 1]!)).status, 404);
    const [externalId, uuid] = [...inBackup.entries()][0]!;
    const replay = await send(`${server.url}/api/v2/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'fault.checked', subject_type: 'user', subject_id: 'u1', external_id: externalId }),
    });
    assert.equal(replay.status, 200, replay.text);
    assert.equal(JSON.parse(replay.text).data.uuid, uuid, 'its idempotency keys came back with it');
    assert.equal((await stopServer(server)).code, 0);
  });

  it('scheduled backups: one per interval, each verified, the newest INLET_BACKUP_KEEP kept; after a restart the next one waits for its time', async () => {
    const backups = join(dir, 'scheduled');
    server = await startServerProcess({
      ...env,
      INLET_BACKUP_DIR: backups,
      INLET_BACKUP_INTERVAL: '1s',
      INLET_BACKUP_KEEP: '2',
    });
    const load = sustainedIngest(server, key, { workers: 2, prefix: 'scheduled' });
    const successes = async () => {
      const text = (await send(`${server!.url}/metrics`)).text;
      return Number(/^inlet_backups_total\{outcome="success"\} (\d+)$/m.exec(text)?.[1] ?? 0);
    };
    try {
      const deadline = Date.now() + 240_000;
      while ((await successes()) < 4) {
        assert.ok(Date.now() < deadline, `fewer than 4 scheduled backups in 240 s:\n${server.output().slice(-3000)}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    } finally {
      await load.stop();
    }
    assert.equal((await stopServer(server)).code, 0, server.output().slice(-2000));
    assert.match(server.output(), /backup written and verified/);
    assert.doesNotMatch(server.output(), /backup failed/);
    const names = readdirSync(backups).sort();
    assert.equal(names.length, 2, `only the newest 2 kept, nothing else left: ${names.join(', ')}`);
    for (const name of names) {
      assert.ok(backupTimeOf(name) !== undefined, name);
      assert.deepEqual(inspect(join(backups, name)).integrity, ['ok']);
    }

    server = await startServerProcess({ ...env, INLET_BACKUP_DIR: backups, INLET_BACKUP_INTERVAL: '1h' });
    const text = (await send(`${server.url}/metrics`)).text;
    const last = Number(/^inlet_backup_last_success_timestamp_seconds (\S+)$/m.exec(text)?.[1]);
    assert.equal(last * 1000, backupTimeOf(names[1]!), 'the last success is the newest backup kept');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    assert.deepEqual(readdirSync(backups).sort(), names, 'not due for an hour');
    assert.equal((await stopServer(server)).code, 0);
  });

  it('a write refused in the middle of the copy (RLIMIT_FSIZE, no root needed): a clear message, no file left', async () => {
    const target = join(dir, 'limited', 'x.db');
    mkdirSync(join(dir, 'limited'));
    const run = await inletProcess(env, ['backup', target], ['prlimit', `--fsize=${4 * 1024 * 1024}`]);
    assert.equal(run.code, 1, `${run.out}\n${run.err}`);
    assert.match(run.err, /backup failed: this process may not write a file larger than 4\.0 MiB \(ulimit -f\)/);
    assert.deepEqual(readdirSync(join(dir, 'limited')), []);
  });

  it('the disk fills up during the copy (a tmpfs of its own, filled once the copy has begun): a clear message, no file left', async (t) => {
    const mounted = mountTmpfs('size=160m');
    if ('reason' in mounted) return t.skip(mounted.reason);
    try {
      const running = inletProcess(env, ['backup', join(mounted.dir, 'x.db')]);
      const deadline = Date.now() + 60_000;
      while (!readdirSync(mounted.dir).some((name) => name.endsWith('.partial'))) {
        assert.ok(Date.now() < deadline, 'the copy did not begin within 60 s');
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      fillDisk(join(mounted.dir, 'filler'));
      const run = await running;
      assert.equal(run.code, 1, `${run.out}\n${run.err}`);
      assert.match(
        run.err,
        /backup failed: the disk of .* filled up during the copy \(it needs about \d+ MiB\); nothing was kept/,
      );
      assert.deepEqual(readdirSync(mounted.dir), ['filler']);
    } finally {
      unmount(mounted);
    }
  });

  it('a full disk (a small tmpfs): refused before anything is written', async (t) => {
    const mounted = mountTmpfs('size=4m');
    if ('reason' in mounted) return t.skip(mounted.reason);
    try {
      const run = await inletProcess(env, ['backup', join(mounted.dir, 'x.db')]);
      assert.equal(run.code, 1, `${run.out}\n${run.err}`);
      assert.match(
        run.err,
        /backup failed: not enough free space in .*: the copy needs about \d+ MiB, [\d.]+ MiB are free/,
      );
      assert.deepEqual(readdirSync(mounted.dir), []);
    } finally {
      unmount(mounted);
    }
  });

  it('a directory that cannot be written (a read-only mount): a clear message, no file', async (t) => {
    const mounted = mountTmpfs('ro,size=1m');
    if ('reason' in mounted) return t.skip(mounted.reason);
    try {
      const run = await inletProcess(env, ['backup', join(mounted.dir, 'x.db')]);
      assert.equal(run.code, 1, `${run.out}\n${run.err}`);
      assert.match(run.err, /backup failed: cannot write in .* \(EROFS\)/);
      assert.deepEqual(readdirSync(mounted.dir), []);
    } finally {
      unmount(mounted);
    }
  });
});

describe('bad backup settings stop the server, naming the setting', { skip }, () => {
  for (const [env, name] of [
    [{ INLET_BACKUP_DIR: '/tmp/inlet-never', INLET_BACKUP_INTERVAL: 'often' }, 'INLET_BACKUP_INTERVAL'],
    [
      { INLET_BACKUP_DIR: '/tmp/inlet-never', INLET_BACKUP_INTERVAL: '6h', INLET_BACKUP_KEEP: '0' },
      'INLET_BACKUP_KEEP',
    ],
    [{ INLET_BACKUP_INTERVAL: '6h' }, 'INLET_BACKUP_DIR'],
  ] as const) {
    it(`${JSON.stringify(env)}: exit 2 naming ${name}`, async () => {
      const child = spawn(process.execPath, ['--import', 'tsx', mainPath], {
        env: { ...process.env, INLET_DATABASE_URL: 'sqlite::memory:', PORT: '0', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const [code] = await once(child, 'exit');
      assert.equal(code, 2, output);
      assert.match(output, new RegExp(`configuration error: .*${name}`));
      assert.doesNotMatch(output, /\n\s+at /, 'no stack trace');
    });
  }
});
