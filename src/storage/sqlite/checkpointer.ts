// WAL checkpoints off the event loop (issue 11; docs/design.md, "Write path").
//
// By default SQLite checkpoints on the connection that commits, inside the commit that takes the WAL past
// 1,000 pages: on the server's one connection, that is the event loop, and every request waits while pages
// are copied into the database file and it is fsynced. Instead the writer connection runs with
// `wal_autocheckpoint = 0`, and a worker thread with a connection of its own runs
// `PRAGMA wal_checkpoint(PASSIVE)` every `intervalMs`: it copies what is committed, on the other core,
// without blocking the writer (PASSIVE takes no lock a writer waits for). Once the WAL holds `restartFrames`
// the writer runs one short PASSIVE checkpoint itself, so that the WAL starts over and stays bounded (below).
// Durability does not change: a commit is durable once its WAL frames are synced (synchronous=FULL), and a
// checkpoint only copies committed frames; a crash during one is repaired from the WAL at the next open.
// If checkpoints keep failing for 10 s, or the worker dies, the writer goes back to checkpointing itself
// (autocheckpoint 1,000 pages, SQLite's default).
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { statSync } from 'node:fs';
import type BetterSqlite3 from 'better-sqlite3';
import type { CheckpointEvent } from '../types.js';

/** Plain CommonJS run by the worker (eval): no TypeScript loader needed, in dist/ and under tsx alike. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
const Database = require(workerData.driver);
const db = new Database(workerData.path);
db.pragma('busy_timeout = 5000');
db.pragma('synchronous = ' + workerData.synchronous);
let timer;
let again;
let failures = 0;
// While the writer runs its own short checkpoint (below), this thread stays out of its way: two checkpoints
// never run at once, and one that finds another running copies nothing.
let waitingSince = 0;
let lastLog = 0;
let lastCheckpointed = 0;
const checkpoint = () => {
  clearTimeout(again);
  again = undefined;
  if (waitingSince !== 0 && Date.now() - waitingSince < 1000) return;
  waitingSince = 0;
  try {
    const started = performance.now();
    const [{ log, checkpointed }] = db.pragma('wal_checkpoint(PASSIVE)');
    parentPort.postMessage({ pass: { ms: performance.now() - started, log, checkpointed } });
    failures = 0;
    // What this pass copied (backfilled only grows within one generation of the WAL; a smaller log means the
    // WAL started over). \`log\` is the WAL as it was when the pass began, so what was committed during the pass
    // is not in it: a pass that had little to copy was short, and so left little behind.
    const copied = log >= lastLog && checkpointed >= lastCheckpointed ? checkpointed - lastCheckpointed : checkpointed;
    lastLog = log;
    lastCheckpointed = checkpointed;
    // Under continuous writes PASSIVE never lets the WAL start over (the writer appends behind every
    // checkpoint), so the file would grow without end. Once it holds restartFrames, the writer is asked to
    // run one PASSIVE checkpoint itself between two commits: it copies only what this one left, and then its
    // next transaction writes the WAL from its beginning again. (A RESTART from here starves: it waits for a
    // gap between the writer's commits that a busy writer hardly leaves.) The writer's copy runs on the event
    // loop, so it is asked for only once this thread has caught up (a pass that copied at most catchUpFrames);
    // while it is further behind (background deletes dirty pages faster than one pass copies them) it runs
    // again at once. Only a WAL past twice restartFrames has the writer copy the rest regardless: the bound.
    // From half the threshold on, a pass that was behind runs again at once too, so that the thread has
    // caught up when the WAL reaches it (background deletes wait for the restart meanwhile).
    const behind = copied > workerData.catchUpFrames;
    if (log >= workerData.restartFrames && (!behind || log >= 2 * workerData.restartFrames)) {
      waitingSince = Date.now();
      parentPort.postMessage({ restart: true });
    } else if (behind && log >= workerData.restartFrames / 2) {
      again = setTimeout(checkpoint, 0);
    }
  } catch (error) {
    // A full disk or a busy file passes: the WAL only grows until the next checkpoint succeeds. Only a
    // checkpoint that keeps failing hands the job back to the writer.
    if (++failures < workerData.maxFailures) return;
    clearInterval(timer);
    parentPort.postMessage({ error: String(error && error.message || error) });
  }
};
timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on('message', (message) => {
  // The WAL starts over with the writer's next transaction: the next pass reports its new size soon.
  if (message === 'restarted') {
    waitingSince = 0;
    clearTimeout(again);
    again = setTimeout(checkpoint, 10);
  }
  if (message !== 'stop') return;
  clearInterval(timer);
  clearTimeout(again);
  checkpoint();
  db.close();
  parentPort.postMessage({ stopped: true });
});
parentPort.postMessage({ ready: true });
`;

export interface Checkpointer {
  /** Stops the timer, runs a last checkpoint, closes the worker's connection. */
  stop(): Promise<void>;
  /** Calls `listener` after each checkpoint (metrics: how long the event loop waited for one). */
  observe(listener: (event: CheckpointEvent) => void): void;
  /**
   * Resolves at once, or, while the WAL is due to start over and the thread is still catching up, once the
   * writer has copied the WAL's tail (or after `maxMs`). Background deletes (erasure, retention) wait here
   * before a batch: more pages dirtied meanwhile would only keep the thread from catching up.
   */
  roomInWal(maxMs: number): Promise<void>;
}

/**
 * When another connection writes the events (the writer thread, writer-thread.ts), the restart copy must run
 * between that connection's commits, and a fall-back must reach it too.
 */
export interface CheckpointHandOff {
  /** The restart copy on the events' writer, or undefined when the server's connection writes them. */
  copy?: () => Promise<{ log: number; checkpointed: number }> | undefined;
  /** The checkpoint thread gave up: the events' writer checkpoints itself again. */
  fellBack?: () => void;
}

export const CHECKPOINT_INTERVAL_MS = 100;
/** WAL frames (pages) after which the checkpoint thread makes the WAL start over: 8,192 × 4 KiB = 32 MiB. */
export const CHECKPOINT_RESTART_FRAMES = 8192;
/**
 * A pass that copied at most this many frames counts as caught up: what it left for the writer's copy on the
 * event loop is about as much. 64 × 4 KiB = 256 KiB; each frame is a random write into the database file
 * (measured at 10 M events: 86 writer copies of 142 frames on average took 41 ms each, with 256 here).
 */
export const CHECKPOINT_CATCH_UP_FRAMES = 64;
const JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * The writer connection no longer checkpoints by itself (the thread does), and when the WAL starts over, a file
 * that grew past JOURNAL_SIZE_LIMIT_BYTES (an index build, a burst the thread fell behind on) is cut back to it,
 * so the WAL's disk use stays bounded too.
 */
export function leaveCheckpointsToThread(writer: BetterSqlite3.Database): void {
  writer.pragma('wal_autocheckpoint = 0');
  writer.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
}

export function startCheckpointer(
  writer: BetterSqlite3.Database,
  path: string,
  synchronous: 'FULL' | 'NORMAL',
  intervalMs = CHECKPOINT_INTERVAL_MS,
  restartFrames = CHECKPOINT_RESTART_FRAMES,
  catchUpFrames = CHECKPOINT_CATCH_UP_FRAMES,
  syncWal?: () => Promise<void>,
  handOff: CheckpointHandOff = {},
): Checkpointer {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: {
      driver,
      path,
      synchronous,
      intervalMs,
      restartFrames,
      catchUpFrames,
      maxFailures: Math.ceil(10_000 / intervalMs),
    },
  });
  leaveCheckpointsToThread(writer);
  let alive = true;
  const listeners: Array<(event: CheckpointEvent) => void> = [];
  // True from the thread's pass that finds the WAL due to start over until the writer has copied its tail:
  // background deletes wait then (roomInWal). A batch let through once the thread has caught up but before
  // the writer's copy (the two messages come one after the other) would be copied by the writer, on the event
  // loop: measured at 10 M events during an erasure (`npm run bench:erasure -- --events 10000000`), the
  // writer's copies averaged 268 frames and 14 ms, 32 of 88 over 10 ms, where a caught-up thread leaves ≤ 64.
  // If a reader keeps the WAL from starting over, the next pass asks the writer again (a copy of nothing), so
  // a wait lasts about one pass, and at most the caller's maxMs.
  let restartDue = false;
  let waiters: Array<() => void> = [];
  const wake = () => {
    const woken = waiters;
    waiters = [];
    for (const resolve of woken) resolve();
  };
  let threadBackfilled = 0;
  const emit = (event: Omit<CheckpointEvent, 'copied'>) => {
    let copied = 0;
    if (event.backfilled >= 0) {
      // Within one generation of the WAL backfilled only grows; after it started over, it counts from 0.
      copied = event.backfilled >= threadBackfilled ? event.backfilled - threadBackfilled : event.backfilled;
      if (event.by === 'thread') threadBackfilled = event.backfilled;
    }
    if (event.by === 'writer') restartDue = false;
    else if (event.walFrames >= 0) restartDue = event.walFrames >= restartFrames;
    if (!restartDue) wake();
    for (const listener of listeners) listener({ ...event, copied });
  };
  const fallBack = () => {
    if (!alive) return;
    alive = false;
    wake();
    // The writer checkpoints itself again, as SQLite does by default.
    if (writer.open) writer.pragma('wal_autocheckpoint = 1000');
    handOff.fellBack?.();
  };
  worker.on(
    'message',
    (message: { error?: string; restart?: boolean; pass?: { ms: number; log: number; checkpointed: number } }) => {
      if (message.pass !== undefined) {
        emit({
          by: 'thread',
          seconds: message.pass.ms / 1000,
          walFrames: message.pass.log,
          backfilled: message.pass.checkpointed,
        });
      }
      if (message.restart === true && alive && writer.open) void restart();
      if (message.error !== undefined) {
        fallBack();
        void worker.terminate();
      }
    },
  );
  async function restart(): Promise<void> {
    const delegated = handOff.copy?.();
    if (delegated !== undefined) {
      const started = performance.now();
      const result = await delegated.catch(() => ({ log: -1, checkpointed: -1 }));
      emit({
        by: 'writer',
        seconds: (performance.now() - started) / 1000,
        walFrames: result.log,
        backfilled: result.checkpointed,
      });
      worker.postMessage('restarted');
      return;
    }
    // The WAL synced first, off the event loop: the checkpoint below syncs it again before it copies, and that
    // sync would otherwise write out, on the event loop, every commit not yet synced (an erasure batch's pages).
    if (syncWal !== undefined) await syncWal().catch(() => {});
    if (!alive || !writer.open) return;
    const started = performance.now();
    let result = { log: -1, checkpointed: -1 };
    try {
      // Between two commits on this connection (better-sqlite3 is synchronous); inside a transaction held
      // across awaits it reports busy and copies nothing, and the next request comes 100 ms later.
      result = (writer.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number; checkpointed: number }>)[0] ?? result;
    } catch {
      // busy or full: the next request comes with the next pass
    }
    emit({
      by: 'writer',
      seconds: (performance.now() - started) / 1000,
      walFrames: result.log,
      backfilled: result.checkpointed,
    });
    worker.postMessage('restarted');
  }
  worker.on('error', fallBack);
  worker.on('exit', fallBack);
  worker.unref();
  return {
    observe(listener) {
      listeners.push(listener);
    },
    roomInWal(maxMs) {
      if (!alive || !restartDue) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, maxMs);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
    stop() {
      wake();
      if (!alive) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => void worker.terminate(), 10_000);
        worker.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
        worker.on('message', (message: { stopped?: boolean }) => {
          if (message.stopped === true) void worker.terminate();
        });
        worker.postMessage('stop');
      });
    },
  };
}

/**
 * The WAL size at which the checkpoint thread is started: 1 MiB (256 frames of 4 KiB), well below the
 * 4 MiB at which SQLite itself would checkpoint. A storage that never writes that much (an `inlet` command,
 * a small installation's quiet hours, the test suites' hundreds of short-lived apps) never pays for a
 * thread: starting one costs ~60 ms of CPU (a Node isolate, better-sqlite3 loaded again).
 */
export const CHECKPOINT_THREAD_START_BYTES = 1024 * 1024;

/**
 * startCheckpointer, once the WAL first holds `startBytes`. Until then the writer does not checkpoint either
 * (`wal_autocheckpoint = 0` from the start): the WAL is looked at every `intervalMs` (one stat of its file),
 * so it is at most one interval's writes past `startBytes` when the thread starts and copies it.
 */
export function startCheckpointerOnDemand(
  writer: BetterSqlite3.Database,
  path: string,
  synchronous: 'FULL' | 'NORMAL',
  options: {
    /** WAL bytes that start the thread (default CHECKPOINT_THREAD_START_BYTES). */
    startBytes?: number;
    intervalMs?: number;
    /** An fdatasync of the WAL off the event loop, awaited before the writer's restart copy (startCheckpointer). */
    syncWal?: () => Promise<void>;
    handOff?: CheckpointHandOff;
  } = {},
): Checkpointer & { readonly started: boolean } {
  const { startBytes = CHECKPOINT_THREAD_START_BYTES, intervalMs = CHECKPOINT_INTERVAL_MS, syncWal, handOff } = options;
  leaveCheckpointsToThread(writer);
  let running: Checkpointer | undefined;
  let stopped = false;
  const listeners: Array<(event: CheckpointEvent) => void> = [];
  const start = () => {
    running = startCheckpointer(
      writer,
      path,
      synchronous,
      intervalMs,
      CHECKPOINT_RESTART_FRAMES,
      CHECKPOINT_CATCH_UP_FRAMES,
      syncWal,
      handOff,
    );
    for (const listener of listeners) running.observe(listener);
  };
  const poll = setInterval(() => {
    let size = 0;
    try {
      size = statSync(`${path}-wal`).size;
    } catch {
      return; // no WAL yet
    }
    if (size < startBytes || stopped || !writer.open) return;
    clearInterval(poll);
    start();
  }, intervalMs);
  poll.unref();
  return {
    get started() {
      return running !== undefined;
    },
    observe(listener) {
      listeners.push(listener);
      running?.observe(listener);
    },
    roomInWal(maxMs) {
      return running?.roomInWal(maxMs) ?? Promise.resolve();
    },
    async stop() {
      stopped = true;
      clearInterval(poll);
      await running?.stop();
    },
  };
}
