// Backups of the SQLite file while the server keeps writing (issue 36; docs/operations.md).
//
// The copy is SQLite's online backup API run as ONE step over every page, on a connection of its own in a worker
// thread. One step is one read transaction: in WAL mode that is a snapshot, so the copy holds exactly what was
// committed when it began, and the server's commits go on meanwhile (they append to the WAL; checkpoints stop at
// the snapshot until the copy ends, so the WAL grows by what is written during it). A backup in several steps
// (better-sqlite3's default of 100 pages) starts over whenever another connection commits between two of them,
// and under continuous ingest never ends. `VACUUM INTO` is also one read transaction, but rebuilds every table
// and index instead of copying pages: about three times slower (docs/operations.md has the figures).
// The worker then verifies the copy (`PRAGMA integrity_check`, the schema version, the events' sequence not behind
// the database's when the copy began) and counts its rows; only then is it synced and renamed to the target.
// Everything that can block (the copy, the check) runs in the worker, so the server's event loop never waits.
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { access, link, lstat, open, readFile, rename, rm, stat, statfs, unlink } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { BackupError, temporaryName } from '../../domain/backups.js';
import type { BackupCounts, BackupOptions, BackupResult, DatabaseBackup } from '../backup-types.js';

/** Plain CommonJS run by the worker (eval): no TypeScript loader needed, in dist/ and under tsx alike. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
const Database = require(workerData.driver);
// The copy and the check give way to the server's threads where cores are scarce: on Linux a thread has a nice
// value of its own (setpriority on its thread id); elsewhere this does nothing.
try {
  const threadId = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
  require('node:os').setPriority(threadId, 10);
} catch {}
const fail = (stage, error) =>
  parentPort.postMessage({ error: { stage, code: error && error.code, message: String((error && error.message) || error) } });
const sequenceOf = (db) => {
  try {
    return db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'events'").pluck().get() ?? 0;
  } catch {
    return 0; // no AUTOINCREMENT table yet (a schema before the events' positions)
  }
};
const versionOf = (db) => db.prepare('SELECT coalesce(max(version), 0) FROM inlet_migrations').pluck().get();
(async () => {
  let source;
  let copy;
  let stage = 'source';
  try {
    source = new Database(workerData.source, { readonly: true, fileMustExist: true });
    source.pragma('busy_timeout = 5000');
    const before = { version: versionOf(source), sequence: sequenceOf(source) };
    stage = 'copy';
    const copyStarted = performance.now();
    // The first step copies nothing and reports the page count; the answer makes the next one copy every page.
    await source.backup(workerData.temp, { progress: () => 0x7fffffff });
    const copySeconds = (performance.now() - copyStarted) / 1000;
    source.close();
    source = undefined;
    parentPort.postMessage({ copied: copySeconds });
    stage = 'verify';
    const verifyStarted = performance.now();
    copy = new Database(workerData.temp, { fileMustExist: true });
    // One self-contained file: the copy's header says WAL as the source's does.
    copy.pragma('journal_mode = DELETE');
    const problems = copy.prepare('PRAGMA integrity_check(10)').pluck().all();
    if (problems.length !== 1 || problems[0] !== 'ok') {
      return fail('integrity', { message: 'integrity_check found: ' + problems.join('; ') });
    }
    const count = (table) => copy.prepare('SELECT count(*) FROM ' + table).pluck().get();
    const counts = { events: count('events'), users: count('users'), keys: count('api_keys'), products: count('products') };
    const after = { version: versionOf(copy), sequence: sequenceOf(copy) };
    if (after.version !== before.version) {
      return fail('integrity', { message: 'the copy is at schema version ' + after.version + ', the database at ' + before.version });
    }
    if (after.sequence < before.sequence) {
      return fail('integrity', { message: 'the copy ends at event ' + after.sequence + ', before the database did when the copy began (' + before.sequence + ')' });
    }
    copy.close();
    copy = undefined;
    parentPort.postMessage({
      done: { counts, schemaVersion: after.version, copySeconds, verifySeconds: (performance.now() - verifyStarted) / 1000 },
    });
  } catch (error) {
    fail(stage, error);
  } finally {
    try { source && source.close(); } catch {}
    try { copy && copy.close(); } catch {}
  }
})();
`;

interface WorkerOutcome {
  counts: BackupCounts;
  schemaVersion: number;
  copySeconds: number;
  verifySeconds: number;
}

type WorkerMessage =
  | { copied: number }
  | { done: WorkerOutcome }
  | { error: { stage: 'source' | 'copy' | 'verify' | 'integrity'; code?: string; message: string } };

const MB = 1024 * 1024;
const megabytes = (bytes: number) => `${(bytes / MB).toFixed(bytes < 10 * MB ? 1 : 0)} MiB`;

/** The backup capability of the SQLite file at `path` (storage/connect.ts puts it on the storage). */
export function sqliteBackup(path: string): DatabaseBackup {
  if (path === ':memory:') return { supported: false, reason: 'an in-memory SQLite database has no file to back up' };
  return { supported: true, write: (target, options) => writeBackup(path, target, options) };
}

async function writeBackup(source: string, target: string, options: BackupOptions = {}): Promise<BackupResult> {
  const started = performance.now();
  const file = resolve(target);
  const dir = dirname(file);
  const totalBytes = await checkTarget(source, file, dir);
  const temp = join(dir, temporaryName(basename(file), randomBytes(4).toString('hex')));
  await createTemporary(temp, dir);
  let published = false;
  try {
    const outcome = await runWorker(source, temp, totalBytes, options);
    const { size } = await syncFile(temp);
    await publish(temp, file);
    published = true;
    await syncDirectory(dir);
    return { file, bytes: size, ...outcome, seconds: (performance.now() - started) / 1000 };
  } catch (error) {
    throw await asBackupError(error, dir, totalBytes);
  } finally {
    await removeLeftovers(temp, published);
  }
}

/** Refuses before anything is written: a target that exists, a directory that does not or is read-only, too little space. */
async function checkTarget(source: string, file: string, dir: string): Promise<number> {
  if (
    await lstat(file).then(
      () => true,
      () => false,
    )
  ) {
    throw new BackupError('target_exists', `${file} already exists: a backup never replaces a file; choose a new name`);
  }
  const directory = await stat(dir).catch(() => undefined);
  if (directory === undefined || !directory.isDirectory()) {
    throw new BackupError('no_directory', `${dir} is not a directory: create it first, or choose another target`);
  }
  const size = await stat(source).then(
    (s) => s.size,
    (error: NodeJS.ErrnoException) => {
      throw new BackupError('no_database', `no database at ${source} (${error.code ?? error.message})`);
    },
  );
  // access() reports a read-only file system even to root, whom permissions do not stop.
  await access(dir, constants.W_OK).catch((error: NodeJS.ErrnoException) => {
    throw new BackupError('not_writable', `cannot write in ${dir} (${error.code ?? error.message})`, { cause: error });
  });
  const space = await statfs(dir).catch(() => undefined);
  if (space !== undefined && space.bavail * space.bsize < size) {
    throw new BackupError(
      'no_space',
      `not enough free space in ${dir}: the copy needs about ${megabytes(size)}, ${megabytes(space.bavail * space.bsize)} are free`,
    );
  }
  return size;
}

async function createTemporary(temp: string, dir: string): Promise<void> {
  try {
    await (await open(temp, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600)).close();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC') throw new BackupError('no_space', `no space left in ${dir}`, { cause: error });
    throw new BackupError('not_writable', `cannot write in ${dir} (${code ?? (error as Error).message})`, {
      cause: error,
    });
  }
}

function runWorker(source: string, temp: string, totalBytes: number, options: BackupOptions): Promise<WorkerOutcome> {
  const { onProgress, progressMs = 250, signal } = options;
  if (signal?.aborted) return Promise.reject(new BackupError('aborted', 'the backup was cancelled'));
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    name: 'inlet-backup',
    workerData: { driver: createRequire(import.meta.url).resolve('better-sqlite3'), source, temp },
  });
  let verifyingSince: number | undefined;
  const progress = setInterval(() => {
    if (verifyingSince !== undefined) {
      onProgress?.({ phase: 'verify', seconds: (performance.now() - verifyingSince) / 1000 });
      return;
    }
    stat(temp).then(
      ({ size }) => verifyingSince === undefined && onProgress?.({ phase: 'copy', copiedBytes: size, totalBytes }),
      () => {},
    );
  }, progressMs);
  progress.unref();
  let abort = () => {};
  return new Promise<WorkerOutcome>((resolvePromise, reject) => {
    abort = () => {
      void worker.terminate();
      // The worker may still be inside the copy's one step: what it writes after this goes nowhere (the file is
      // removed now and again once it has exited).
      worker.once('exit', () => void removeLeftovers(temp, false));
      reject(new BackupError('aborted', 'the backup was cancelled'));
    };
    signal?.addEventListener('abort', abort, { once: true });
    onProgress?.({ phase: 'copy', copiedBytes: 0, totalBytes });
    worker.on('message', (message: WorkerMessage) => {
      if ('copied' in message) {
        verifyingSince = performance.now();
        onProgress?.({ phase: 'verify', seconds: 0 });
      } else if ('done' in message) resolvePromise(message.done);
      else reject(workerError(message.error));
    });
    worker.on('error', reject);
    worker.on('exit', (code) => reject(new BackupError('failed', `the backup thread stopped (exit code ${code})`)));
  }).finally(() => {
    // The signal outlives this backup (the service's, for every scheduled one): no listener may stay on it.
    signal?.removeEventListener('abort', abort);
    clearInterval(progress);
    void worker.terminate();
  });
}

function workerError(error: { stage: string; code?: string; message: string }): Error {
  if (error.stage === 'integrity')
    return new BackupError('verify_failed', `the copy failed verification: ${error.message}`);
  if (error.stage === 'source') return new BackupError('no_database', `cannot read the database: ${error.message}`);
  return Object.assign(new Error(error.message), { code: error.code, stage: error.stage });
}

/** What went wrong, said so that the operator knows what to do: a full disk, a file size limit, permissions. */
async function asBackupError(error: unknown, dir: string, totalBytes: number): Promise<BackupError> {
  if (error instanceof BackupError) return error;
  const code = (error as { code?: string }).code ?? '';
  const message = (error as Error).message ?? String(error);
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS' || /^SQLITE_(CANTOPEN|READONLY|PERM)/.test(code)) {
    return new BackupError('not_writable', `cannot write in ${dir} (${code}: ${message})`, { cause: error });
  }
  if (!/^(SQLITE_FULL|SQLITE_IOERR|ENOSPC|EFBIG)/.test(code)) {
    return new BackupError('failed', `the backup failed: ${message}${code === '' ? '' : ` (${code})`}`, {
      cause: error,
    });
  }
  // SQLite reports a short write as SQLITE_FULL and a refused one as SQLITE_IOERR, without the reason: look.
  const space = await statfs(dir).catch(() => undefined);
  const free = space === undefined ? Infinity : space.bavail * space.bsize;
  const fileLimit = await maxFileSize();
  if (fileLimit < totalBytes && free > fileLimit) {
    return new BackupError(
      'no_space',
      `this process may not write a file larger than ${megabytes(fileLimit)} (ulimit -f), and the copy needs about ${megabytes(totalBytes)}; nothing was kept`,
      { cause: error },
    );
  }
  if (code === 'SQLITE_FULL' || code === 'ENOSPC' || free < totalBytes) {
    return new BackupError(
      'no_space',
      `the disk of ${dir} filled up during the copy (it needs about ${megabytes(totalBytes)}); nothing was kept`,
      { cause: error },
    );
  }
  return new BackupError('failed', `writing the copy in ${dir} failed: ${message} (${code}); nothing was kept`, {
    cause: error,
  });
}

/** The soft limit on the size of a file this process writes (RLIMIT_FSIZE; Linux), Infinity when none or unknown. */
async function maxFileSize(): Promise<number> {
  const limits = await readFile('/proc/self/limits', 'utf8').catch(() => '');
  const soft = /^Max file size\s+(\S+)/m.exec(limits)?.[1];
  return soft === undefined || soft === 'unlimited' ? Infinity : Number(soft);
}

async function syncFile(path: string): Promise<{ size: number }> {
  const handle = await open(path, 'r+');
  try {
    await handle.sync();
    return { size: (await handle.stat()).size };
  } finally {
    await handle.close();
  }
}

/** The directory entry of a renamed file is durable once the directory is synced. */
async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } catch {
    // not every file system syncs a directory (the file itself is synced already)
  } finally {
    await handle.close();
  }
}

/** Gives the copy its name, never replacing a file that appeared meanwhile (link fails with EEXIST where rename would replace). */
async function publish(temp: string, file: string): Promise<void> {
  try {
    await link(temp, file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      throw new BackupError(
        'target_exists',
        `${file} appeared while the backup ran: it was kept, and the copy dropped`,
      );
    }
    // A file system without hard links: rename, after checking once more that nothing is in the way.
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw error;
    if (
      await lstat(file).then(
        () => true,
        () => false,
      )
    ) {
      throw new BackupError(
        'target_exists',
        `${file} appeared while the backup ran: it was kept, and the copy dropped`,
      );
    }
    await rename(temp, file);
  }
}

async function removeLeftovers(temp: string, published: boolean): Promise<void> {
  const paths = ['-journal', '-wal', '-shm'].map((suffix) => `${temp}${suffix}`);
  await Promise.all(paths.map((path) => rm(path, { force: true })));
  // Once linked, the temporary name is a second name of the backup: only the name goes.
  await (published ? unlink(temp).catch(() => {}) : rm(temp, { force: true }));
}
