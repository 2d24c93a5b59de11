// Backups (issue 36; docs/operations.md): `inlet backup <file>` writes a verified copy of the live SQLite database
// (what was acknowledged before it began is in it, and a server opened on it has the events: the restore), refuses
// bad targets without leaving anything behind, and on PostgreSQL exits 2 pointing to PostgreSQL's own tools. The
// server's scheduled backups are named by time, rotated, counted in metrics, and a failure never stops ingest.
// The real server under ingest, full disks and read-only directories: test/system/backup.test.ts.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { getEventListeners } from 'node:events';
import { basename, join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { buildApp } from '../src/http/app.js';
import { BackupError, backupTimeOf } from '../src/domain/backups.js';
import { ConfigError } from '../src/config.js';
import {
  adminHeaders,
  bearer,
  createTestApp,
  createTestServices,
  dialect,
  testDatabase,
  testTempDir,
  type TestContext,
} from './helpers.js';
import { cliEnv, inlet } from './support/cli.js';

const sqliteOnly = dialect === 'sqlite' ? false : 'SQLite only: PostgreSQL is backed up with its own tools';
const postgresOnly = dialect === 'postgres' ? false : 'PostgreSQL only';
const HOUR = 3_600_000;

function tempDir(): string {
  return mkdtempSync(join(testTempDir(), 'inlet-backups-'));
}

async function sendEvents(ctx: TestContext, key: string, prefix: string, count: number): Promise<string[]> {
  const res = await ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events/batch',
    headers: bearer(key),
    payload: {
      events: Array.from({ length: count }, (_, i) => ({
        event_type: 'backup',
        action: 'checked',
        subject_type: 'user',
        subject_id: 'u-backup',
        external_id: `${prefix}-${i}`,
      })),
    },
  });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json().data as Array<{ event: { uuid: string } }>).map((item) => item.event.uuid);
}

/** The copy's rows and state, read the way an operator would check it (sqlite3 on the file). */
function inspect(file: string) {
  const db = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
  try {
    return {
      integrity: db.prepare('PRAGMA integrity_check').pluck().all(),
      journalMode: db.pragma('journal_mode', { simple: true }),
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

describe('inlet backup on SQLite', { skip: sqliteOnly }, () => {
  let ctx: TestContext;
  let key: string;
  let productId: string;
  let dir: string;
  let written: string[];
  before(async () => {
    ctx = await createTestApp();
    const product = await ctx.product('Backed up');
    key = product.eventsKey;
    productId = product.id;
    written = await sendEvents(ctx, key, 'first', 50);
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(key),
      payload: { external_id: 'u-backup', traits: { plan: 'pro' } },
    });
    assert.equal(identify.statusCode, 201, identify.body);
    dir = tempDir();
  });
  after(async () => {
    await ctx?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });
  const cli = (...argv: string[]) => inlet(cliEnv(ctx.database), ...argv);

  it('writes a verified, self-contained copy and prints what it copied', async () => {
    const target = join(dir, 'first.db');
    const res = await cli('backup', target);
    assert.equal(res.code, 0, res.err);
    assert.match(res.out, new RegExp(`^backup written: ${target} \\(`));
    assert.match(res.out, /integrity_check ok, schema version \d+: events 50, users 1, keys 2, products 1$/m);
    // Not a terminal: one plain line per phase on stderr.
    assert.deepEqual(res.err.split('\n'), [
      `copying the database (about ${res.err.match(/about ([\d.]+ MiB)/)?.[1]}) to ${target}`,
      'verifying the copy (integrity_check)',
    ]);
    const copy = inspect(target);
    assert.deepEqual(copy.integrity, ['ok']);
    assert.equal(copy.journalMode, 'delete', 'one file, no -wal beside it');
    assert.deepEqual(
      written.filter((uuid) => !copy.uuids.has(uuid)),
      [],
    );
    assert.deepEqual(readdirSync(dir), ['first.db'], 'no temporary file or journal left');
  });

  it('--json prints the file, the counts and the timings', async () => {
    const target = join(dir, 'json.db');
    const res = await cli('backup', target, '--json');
    assert.equal(res.code, 0, res.err);
    const { data } = JSON.parse(res.out);
    assert.equal(data.file, target);
    assert.deepEqual(data.counts, { events: 50, users: 1, keys: 2, products: 1 });
    assert.equal(data.integrity_check, 'ok');
    assert.ok(data.bytes > 0 && data.seconds > 0 && data.schema_version > 0, res.out);
  });

  it('the copy holds every event acknowledged before it began, while writes go on', async () => {
    const acknowledged: string[] = [];
    let writing = true;
    let round = 0;
    const writer = (async () => {
      while (writing) acknowledged.push(...(await sendEvents(ctx, key, `during-${round++}`, 20)));
    })();
    while (acknowledged.length < 100) await new Promise((resolve) => setTimeout(resolve, 5));
    const before = [...acknowledged];
    const target = join(dir, 'during.db');
    const res = await cli('backup', target);
    writing = false;
    await writer;
    assert.equal(res.code, 0, res.err);
    const copy = inspect(target);
    assert.deepEqual(copy.integrity, ['ok']);
    assert.deepEqual(
      [...written, ...before].filter((uuid) => !copy.uuids.has(uuid)),
      [],
    );
    assert.ok(acknowledged.length > before.length, 'events were acknowledged while the backup ran');
  });

  it('restores: a server started on the copy has the events, and takes new ones', async () => {
    const restored = tempDir();
    copyFileSync(join(dir, 'first.db'), join(restored, 'inlet.db'));
    const opened = await createTestServices(
      {},
      { databaseUrl: `sqlite:${join(restored, 'inlet.db')}`, drop: async () => rmSync(restored, { recursive: true }) },
    );
    const app = await buildApp(opened.services, { logger: false });
    try {
      for (const uuid of written.slice(0, 5)) {
        const res = await app.inject({
          method: 'GET',
          url: `/admin/v1/products/${productId}/events/${uuid}`,
          headers: adminHeaders(),
        });
        assert.equal(res.statusCode, 200, res.body);
      }
      const replay = await app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(key),
        payload: {
          event_type: 'backup',
          action: 'checked',
          subject_type: 'user',
          subject_id: 'u',
          external_id: 'first-0',
        },
      });
      assert.equal(replay.statusCode, 200, 'the idempotency keys came along');
      assert.equal(replay.json().data.uuid, written[0]);
    } finally {
      await app.close();
      await opened.close();
    }
  });

  it('refuses a target that exists and leaves it as it was', async () => {
    const target = join(dir, 'taken.db');
    writeFileSync(target, 'not a backup');
    const before = readdirSync(dir).sort();
    const res = await cli('backup', target);
    assert.equal(res.code, 1);
    assert.match(
      res.err,
      /backup failed: .*taken\.db already exists: a backup never replaces a file; choose a new name/,
    );
    assert.equal(readFileSync(target, 'utf8'), 'not a backup');
    assert.deepEqual(readdirSync(dir).sort(), before);
  });

  it('refuses a directory that does not exist', async () => {
    const res = await cli('backup', join(dir, 'missing', 'x.db'));
    assert.equal(res.code, 1);
    assert.match(res.err, /missing is not a directory: create it first/);
  });

  it(
    'refuses a directory it may not write in, and leaves nothing there',
    { skip: process.getuid?.() === 0 ? 'root writes anywhere: the system test uses a read-only mount' : false },
    async () => {
      const locked = tempDir();
      chmodSync(locked, 0o555);
      try {
        const res = await cli('backup', join(locked, 'x.db'));
        assert.equal(res.code, 1);
        assert.match(res.err, /cannot write in .* \(EACCES\)/);
        assert.deepEqual(readdirSync(locked), []);
      } finally {
        chmodSync(locked, 0o755);
        rmSync(locked, { recursive: true, force: true });
      }
    },
  );

  it('a cancelled backup rejects and leaves nothing behind; a finished one leaves no listener on the signal', async () => {
    const backup = ctx.services.storage.capabilities.backup;
    assert.ok(backup?.supported === true);
    const cancelled = tempDir();
    try {
      const controller = new AbortController();
      await backup.write(join(cancelled, 'done.db'), { signal: controller.signal });
      assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
      await assert.rejects(
        backup.write(join(cancelled, 'cancelled.db'), {
          signal: controller.signal,
          progressMs: 1,
          onProgress: () => controller.abort(),
        }),
        (error: unknown) => error instanceof BackupError && error.reason === 'aborted',
      );
      const deadline = Date.now() + 10_000;
      while (readdirSync(cancelled).length > 1 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.deepEqual(readdirSync(cancelled), ['done.db']);
    } finally {
      rmSync(cancelled, { recursive: true, force: true });
    }
  });

  it('needs exactly one file (usage error, exit 2)', async () => {
    const res = await cli('backup');
    assert.equal(res.code, 2);
    assert.match(res.err, /give the one file to write/);
  });
});

describe('inlet backup on PostgreSQL', { skip: postgresOnly }, () => {
  it("exits 2: PostgreSQL's own tools back it up, and the docs show how", async () => {
    const ctx = await createTestApp();
    try {
      const target = join(tempDir(), 'x.db');
      const res = await inlet(cliEnv(ctx.database), 'backup', target);
      assert.equal(res.code, 2);
      assert.match(res.err, /^inlet: PostgreSQL is backed up with its own tools, not by Inlet: pg_dump/);
      assert.match(res.err, /docs\/operations\.md, "Backing up PostgreSQL"/);
    } finally {
      await ctx.close();
    }
  });

  it('the server refuses a backup schedule, naming INLET_BACKUP_INTERVAL', async () => {
    const database = testDatabase();
    try {
      await assert.rejects(
        createTestServices({ backupSchedule: { dir: tempDir(), intervalMs: HOUR, keep: 7 } }, database),
        (error: unknown) =>
          error instanceof ConfigError && /^INLET_BACKUP_INTERVAL is set, but .*pg_dump/.test(error.message),
      );
    } finally {
      await database.drop();
    }
  });
});

describe('scheduled backups', { skip: sqliteOnly }, () => {
  it('each run writes a verified backup named by time, keeps the newest KEEP and reports metrics', async () => {
    const dir = tempDir();
    const opened = await createTestServices({ backupSchedule: { dir, intervalMs: HOUR, keep: 2 } });
    try {
      writeFileSync(join(dir, 'notes.txt'), 'not ours');
      writeFileSync(join(dir, '.inlet-20261101T000000.000Z.db.0a1b2c3d.partial'), 'left by a crash');
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await opened.services.backups.runScheduled());
      const names = readdirSync(dir).sort();
      // The two newest kept, the oldest removed, the crashed run's partial file cleaned up, other files left alone.
      assert.deepEqual(names, [...runs.slice(1).map((run) => basename(run.file)), 'notes.txt'].sort());
      assert.equal(names.filter((name) => backupTimeOf(name) !== undefined).length, 2);
      assert.deepEqual(runs[2]!.removed, [basename(runs[0]!.file)]);
      for (const run of runs.slice(1)) assert.deepEqual(inspect(run.file).integrity, ['ok']);
      const text = await opened.services.metrics.registry.metrics();
      assert.match(text, /^inlet_backups_total\{outcome="success"\} 3$/m);
      const last = Number(/^inlet_backup_last_success_timestamp_seconds (\S+)$/m.exec(text)?.[1]);
      assert.ok(Math.abs(last - Date.now() / 1000) < 60, text);
      assert.ok(Number(/^inlet_backup_last_duration_seconds (\S+)$/m.exec(text)?.[1]) > 0, text);
    } finally {
      await opened.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a failed run is logged and counted, and ingest goes on', async () => {
    const parent = tempDir();
    const notADirectory = join(parent, 'file');
    writeFileSync(notADirectory, '');
    const ctx = await createTestApp({ backupSchedule: { dir: notADirectory, intervalMs: HOUR, keep: 2 } });
    try {
      const errors: Array<{ details: object; message: string }> = [];
      ctx.services.backups.start({ info() {}, error: (details, message) => errors.push({ details, message }) });
      const deadline = Date.now() + 10_000;
      while (errors.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      assert.equal(errors.length, 1);
      assert.match(errors[0]!.message, /^backup failed: /);
      assert.equal((errors[0]!.details as { retryInSeconds: number }).retryInSeconds, 60);
      assert.match(await ctx.services.metrics.registry.metrics(), /^inlet_backups_total\{outcome="failure"\} 1$/m);
      const { eventsKey } = await ctx.product('Still ingesting');
      assert.equal((await sendEvents(ctx, eventsKey, 'after-failure', 3)).length, 3);
    } finally {
      await ctx.close();
      rmSync(parent, { recursive: true, force: true });
    }
  });
});
