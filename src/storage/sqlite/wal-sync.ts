// Durable event commits with the fsync off the event loop (issue 11; docs/design.md, "Write path").
//
// better-sqlite3 is synchronous: with synchronous=FULL every COMMIT waits for fdatasync(WAL) on the thread
// that runs it, the server's event loop, so no request is parsed, validated or answered for the ~2 ms (more
// on a busy disk) that the disk takes. The event writer instead commits with synchronous=NORMAL (the frames
// are written to the WAL, not yet synced) and then asks this class for an fdatasync of the WAL file, which
// Node runs on its thread pool; the request is answered only when that sync has finished. A commit is
// therefore acknowledged exactly when it would be with FULL: after its frames are on disk. Meanwhile the
// event loop takes the next requests and writes the next group, and one sync covers every commit written
// before it began (the WAL is appended to in order), so syncs are shared the way commits are.
//
// Why this is safe with WAL: a frame is only ever overwritten after a checkpoint has copied it into the
// database file and SQLite has synced that file (in NORMAL as in FULL), so a transaction whose WAL frames
// were synced, or that was checkpointed before they were, survives a power loss. What changes: another
// connection may read a commit during the moment between its COMMIT and the sync (with FULL, readers see a
// commit only after its sync). A power loss in that moment loses a row that a reader may already have
// seen; it was never acknowledged, so the client sends it again. A process crash (kill -9) loses nothing:
// the frames are in the kernel's page cache.
//
// A failed fdatasync is not retried: after one, the kernel may have dropped the dirty pages it could not
// write, so a second sync that "succeeds" proves nothing (PostgreSQL's fsync lesson). Every later sync
// fails with the first error, and the writer answers 503 until the process is restarted (SQLite then
// recovers from the WAL what reached the disk).
import { fdatasync, fstat, open, close, stat } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import type BetterSqlite3 from 'better-sqlite3';

const openAsync = promisify(open);
const fdatasyncAsync = promisify(fdatasync);
const fstatAsync = promisify(fstat);
const statAsync = promisify(stat);
const closeAsync = promisify(close);

/**
 * Runs a synchronous transaction with synchronous=NORMAL on the connection (written to the WAL, not synced), then
 * sets it back to `restore`, in the same call, so that no other statement of the connection runs in between. For
 * commits whose durability is seen to otherwise: event commits (a WalSync before the answer) and the merges of
 * idempotency keys (rebuilt from the rows after a crash, event-keys.ts).
 */
export function withoutCommitSync(raw: BetterSqlite3.Database, restore: 'FULL' | 'NORMAL'): <T>(work: () => T) => T {
  const relaxed = raw.prepare('PRAGMA synchronous = NORMAL');
  const back = raw.prepare(`PRAGMA synchronous = ${restore}`);
  return (work) => {
    relaxed.run();
    try {
      return work();
    } finally {
      back.run();
    }
  };
}

export class WalSyncError extends Error {
  /** SQLite's own class of I/O failure: the storage treats it as unavailable (503, not a retry per request). */
  readonly code = 'SQLITE_IOERR';
}

export class WalSync {
  private fd: number | undefined;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private failed: WalSyncError | undefined;
  private closed = false;
  private checkedAt = -Infinity;
  /** Syncs run so far (metrics and tests). */
  syncs = 0;

  constructor(private readonly walPath: string) {}

  /** Resolves once an fdatasync of the WAL that began after this call has finished. */
  sync(): Promise<void> {
    if (this.failed !== undefined) return Promise.reject(this.failed);
    if (this.running === undefined) return (this.running = this.run());
    // One is in flight and may have begun before the caller's commit: the caller needs the next one, which
    // every caller arriving meanwhile shares.
    this.queued ??= this.running
      .catch(() => {})
      .then(() => {
        this.queued = undefined;
        return (this.running ??= this.run());
      });
    return this.queued;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.running?.catch(() => {});
    await this.queued?.catch(() => {});
    if (this.fd !== undefined) await closeAsync(this.fd).catch(() => {});
    this.fd = undefined;
  }

  private async run(): Promise<void> {
    try {
      if (this.closed) throw new WalSyncError('the storage is closed');
      this.fd ??= await openAsync(this.walPath, 'r');
      await fdatasyncAsync(this.fd);
      this.syncs++;
      // SQLite keeps the WAL file while a connection is open (a restart rewrites it in place, a size limit
      // truncates it), so this is the same file; should it ever have been replaced, sync the new one too. Looked
      // at once a second, not per sync: two more round trips to the thread pool would lengthen every commit.
      if (performance.now() - this.checkedAt >= 1000) {
        this.checkedAt = performance.now();
        const [held, named] = await Promise.all([fstatAsync(this.fd), statAsync(this.walPath)]);
        if (held.ino !== named.ino || held.dev !== named.dev) {
          const old = this.fd;
          this.fd = await openAsync(this.walPath, 'r');
          await closeAsync(old).catch(() => {});
          await fdatasyncAsync(this.fd);
        }
      }
    } catch (error) {
      // A sync asked for after close fails without poisoning anything: the storage is going away.
      if (this.closed) throw error;
      this.failed ??= new WalSyncError(
        `fdatasync of the SQLite WAL (${this.walPath}) failed: ${(error as Error).message}`,
        { cause: error },
      );
      throw this.failed;
    } finally {
      this.running = undefined;
    }
  }
}
