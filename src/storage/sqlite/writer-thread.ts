// The writer thread (issue 35; docs/design.md, "A writer thread for SQLite"): a worker thread with a connection of
// its own runs every event commit, so that HTTP, parsing and validation run on one core and the inserts, commits
// and WAL syncs on the other. The server hands it each group commit's rows as one flat array of column values
// and acknowledges the group only when the thread answers, after the commit and the WAL's sync: kill -9 loses
// nothing acknowledged, as before. The thread owns the idempotency keys (event-keys.ts, kind `keys`: only the
// writer looks them up); the subject index stays with the server's connection, where reads and erasures use it,
// and takes each commit's (hash, position) pairs from the answer before the requests are acknowledged.
//
// Off unless asked for (INLET_SQLITE_WRITER_THREAD_AFTER): on the loaded 2-core machine it was measured on it cost
// more CPU per event than it saved. Asked for, it starts on demand, once the in-process writer has stored `after`
// events (a storage that writes little, an `inlet` command, never pays for a thread); from then on every commit
// goes to the thread. Both writers are ordinary SQLite connections: the thread's first transaction takes in the keys of
// every row the in-process writer stored (EventKeys.catchUp). Should the thread die, its commits in flight fail
// as unavailable (503: their outcome is unknown) and the in-process writer takes over again.
import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { EventRow } from '../event-columns.js';
import type { EventInsert, EventKeyStats } from '../types.js';
import { flattenRows, type RowOutcomes } from './event-writer.js';
import type { TuneOptions } from './tune.js';
import { nodeFlagValue } from '../../domain/node-flags.js';

export interface WriterSetup extends TuneOptions {
  path: string;
  /** The checkpoint thread copies the WAL (wal_autocheckpoint 0 on this connection too). */
  checkpointThread: boolean;
  /** Commit with synchronous=NORMAL and sync the WAL off the thread's loop (wal-sync.ts). */
  syncOffLoop: boolean;
  tailKeys?: number;
}

export interface WriterRequest {
  id: number;
  /** Rows as flattenRows made them. */
  write?: Array<string | null>;
  /** A PASSIVE checkpoint between two commits (the checkpoint thread's restart copy), after a sync of the WAL. */
  checkpoint?: true;
  autocheckpoint?: number;
  warm?: true;
  settle?: true;
  stop?: true;
}

export interface WriterReply {
  id: number;
  error?: { message: string; code?: string };
  /** Rows that were duplicates: their index and the stored original. */
  duplicates?: Array<[number, unknown]>;
  /** (subject hash, position) pairs of the stored rows, interleaved, in position order. */
  subjects?: Float64Array;
  last?: number;
  stats?: EventKeyStats;
  checkpoint?: { log: number; checkpointed: number };
}

/** The thread is gone: what it had in flight may or may not be stored. SQLite's class of I/O failure, so the
 *  storage treats it as unavailable (503) rather than retrying each request. */
export class WriterThreadError extends Error {
  readonly code = 'SQLITE_IOERR';
}

/** The thread's young generation: its garbage is each commit's rows, short-lived, so a small one keeps its
 *  isolate's memory small. */
const THREAD_YOUNG_GENERATION_MB = 16;

/** The `--max-semi-space-size` the process was started with (its command line or NODE_OPTIONS), if any. */
export function semiSpaceFlag(argv: readonly string[], nodeOptions = ''): string | undefined {
  const value = nodeFlagValue('max-semi-space-size', argv, nodeOptions);
  return value === undefined || !/^\d+$/.test(value) ? undefined : value;
}

let spawning = 0;

/**
 * V8 sizes every isolate's semi-spaces by `--max-semi-space-size` when the process was given it (as `npm start`
 * does), ahead of a worker's `resourceLimits`: the thread would get the server's large young generation, whose
 * pages its garbage touches in full. The flag is lifted while the thread's isolate is made (it is read only then)
 * and put back once the thread answers; the returned function puts it back.
 */
export function liftSemiSpaceFlag(): () => void {
  const flag = semiSpaceFlag(process.execArgv, process.env.NODE_OPTIONS);
  if (flag === undefined) return () => {};
  if (spawning++ === 0) setFlagsFromString('--max-semi-space-size=0');
  let restored = false;
  return () => {
    if (restored) return;
    restored = true;
    if (--spawning === 0) setFlagsFromString(`--max-semi-space-size=${flag}`);
  };
}

/** A thread running `entry`: compiled JavaScript, or under tsx (tests, `npm run dev`) the TypeScript source. */
function spawn(setup: WriterSetup): Worker {
  const entry = new URL(`./writer-worker.${import.meta.url.endsWith('.ts') ? 'ts' : 'js'}`, import.meta.url);
  const options = {
    workerData: setup,
    name: 'inlet-sqlite-writer',
    resourceLimits: { maxYoungGenerationSizeMb: THREAD_YOUNG_GENERATION_MB },
  };
  if (!entry.pathname.endsWith('.ts')) return new Worker(entry, options);
  // A worker thread does not inherit tsx's loader hooks (Node 20): it registers them itself first.
  const source = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(source, { ...options, eval: true });
}

export class WriterThread {
  private next = 1;
  private readonly pending = new Map<number, { resolve: (reply: WriterReply) => void; reject: (e: Error) => void }>();
  private gone: WriterThreadError | undefined;
  /** The thread's key index figures, as of its last answer. */
  stats: EventKeyStats | undefined;

  private constructor(
    private readonly worker: Worker,
    onGone: () => void,
  ) {
    worker.on('message', (reply: WriterReply) => {
      if (reply.stats !== undefined) this.stats = reply.stats;
      const waiting = this.pending.get(reply.id);
      if (waiting === undefined) return;
      this.pending.delete(reply.id);
      if (reply.error === undefined) waiting.resolve(reply);
      else waiting.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code }));
    });
    const fail = (error: unknown) => {
      this.gone ??= new WriterThreadError(`the SQLite writer thread stopped: ${(error as Error)?.message ?? error}`);
      for (const waiting of this.pending.values()) waiting.reject(this.gone);
      this.pending.clear();
      onGone();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`exit code ${code}`)));
  }

  /** Resolves once the thread has opened its connection. */
  static start(setup: WriterSetup, onGone: () => void): Promise<WriterThread> {
    const restore = liftSemiSpaceFlag();
    let thread: WriterThread;
    try {
      thread = new WriterThread(spawn(setup), onGone);
    } catch (error) {
      restore();
      throw error;
    }
    // Its isolate exists once it answers (or is gone).
    return thread.ask({ id: 0 }, 0).then(
      () => (restore(), thread),
      (error: unknown) => {
        restore();
        throw error;
      },
    );
  }

  get alive(): boolean {
    return this.gone === undefined;
  }

  /** One group commit: resolves after the commit and its WAL sync, with each row's outcome. */
  async write(rows: EventInsert[]): Promise<{ outcomes: RowOutcomes; subjects: Float64Array; last: number }> {
    const reply = await this.ask({ id: this.next++, write: flattenRows(rows) });
    const outcomes: RowOutcomes = new Array<EventRow | undefined>(rows.length);
    for (const [i, stored] of reply.duplicates ?? []) outcomes[i] = stored as EventRow;
    return { outcomes, subjects: reply.subjects ?? new Float64Array(0), last: reply.last ?? 0 };
  }

  async checkpoint(): Promise<{ log: number; checkpointed: number }> {
    return (await this.ask({ id: this.next++, checkpoint: true })).checkpoint ?? { log: -1, checkpointed: -1 };
  }

  async request(what: 'warm' | 'settle'): Promise<void> {
    await this.ask({ id: this.next++, [what]: true });
  }

  async autocheckpoint(pages: number): Promise<void> {
    await this.ask({ id: this.next++, autocheckpoint: pages });
  }

  /** Waits for the commits in flight, stops the key index's background work and closes the connection. */
  async stop(): Promise<void> {
    if (!this.alive) return;
    const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    await this.ask({ id: this.next++, stop: true }).catch(() => {});
    const timer = setTimeout(() => void this.worker.terminate(), 10_000);
    await exited;
    clearTimeout(timer);
  }

  /** Ends the thread at once, as a crash would (tests). */
  async terminate(): Promise<void> {
    await this.worker.terminate();
  }

  private ask(request: WriterRequest, id = request.id): Promise<WriterReply> {
    if (this.gone !== undefined) return Promise.reject(this.gone);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (id !== 0) this.worker.postMessage(request);
    });
  }
}
