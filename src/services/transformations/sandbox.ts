/**
 * The sandbox for the `function` step of transformations (spec transformations §4): user JavaScript compiled
 * once per version and run in QuickJS (WebAssembly) on a thread of its own, each function in its own engine
 * instance, under a CPU limit per call and a memory limit. A function that loops, allocates without end or
 * recurses too deep costs its own item only; the service and other products' functions go on.
 *
 * Two guards stop a call: QuickJS's interrupt handler ends a call at its CPU limit between instructions, and
 * a watchdog here ends the whole thread when a call outlives that limit inside one long built-in (a string
 * method on megabytes), where the interrupt handler is not reached. The thread is then started again and
 * the functions compiled again in it; calls waiting on it are sent again, so only the item that ran over
 * gets an error.
 */
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads';
import secureJson from 'secure-json-parse';
import { markStorable } from '../../domain/transform-check.js';
import type { CompileOutcome, FunctionLimits, RunChunk } from './quickjs-function.js';

export interface SandboxSettings {
  /** CPU time of one call on one item (INLET_TRANSFORM_FUNCTION_CPU_MS). */
  cpuMs: number;
  /** Memory one function may allocate (INLET_TRANSFORM_FUNCTION_MEMORY_MB). */
  memoryMb: number;
  /** The longest JSON text an event may come back as. */
  maxResultBytes?: number;
  /** How long a call may run past its CPU limit before the thread is ended (default: the CPU limit, at least 200 ms). */
  graceMs?: number;
}

/** What a function gets beside the event (spec §4). */
export interface FunctionMeta {
  product_id: string;
  key_id: string | null;
  route: string;
}

export type FunctionOutcome =
  { kind: 'event'; event: Record<string, unknown> } | { kind: 'drop' } | { kind: 'error'; message: string };

export type CompileResult = { ok: true; fn: SandboxFunction } | { ok: false; message: string; line: number | null };

export interface SandboxFunction {
  /**
   * The same, blocking this thread until the sandbox's thread answers (for a synchronous step engine); the
   * watchdog runs inside the wait, so a built-in that runs over still costs only its item.
   */
  runSync(event: Record<string, unknown>, meta: FunctionMeta): FunctionOutcome;
  runManySync(events: readonly Record<string, unknown>[], meta: FunctionMeta): FunctionOutcome[];
  /** Runs the function on one document: the changed document, a drop (it returned `null`) or an error. */
  run(event: Record<string, unknown>, meta: FunctionMeta): Promise<FunctionOutcome>;
  /** The same on several documents in one crossing of the boundary; each item keeps its own limits and outcome. */
  runMany(events: readonly Record<string, unknown>[], meta: FunctionMeta): Promise<FunctionOutcome[]>;
  /** Frees the function's engine; a later run answers with an error. */
  dispose(): void;
}

export interface Sandbox {
  /** Compiles `source` (which defines `function transform(event, meta)`) and runs its top level under the limits. */
  compile(source: string): Promise<CompileResult>;
  /** Ends the thread; pending calls answer with an error. */
  close(): Promise<void>;
}

export type WorkerRequest =
  | { id: number; type: 'compile'; fn: number; source: string }
  | { id: number; type: 'run'; fn: number; docs: Uint8Array; meta: string; count: number }
  | { id: number; type: 'dispose'; fn: number };

/** A request before the thread gives it an id. */
type Unsent = WorkerRequest extends infer R ? (R extends unknown ? Omit<R, 'id'> : never) : never;

export type WorkerReply =
  | { id: number; type: 'compiled'; outcome: CompileOutcome }
  | { id: number; type: 'ran'; chunks: RunChunk[] }
  | { id: number; type: 'failed'; message: string };

const DEFAULT_MAX_RESULT_BYTES = 1024 * 1024;
const WATCHDOG_TICK_MS = 20;
const MAX_LOSSES = 5;
/** How long a synchronous call waits on a thread that runs no user code and does not answer (it may be starting). */
const SILENT_MS = 15_000;

interface Pending {
  request: WorkerRequest;
  resolve(reply: WorkerReply): void;
}

/** The thread and what it holds, started again after the watchdog ends it. */
class SandboxThread {
  private worker: Worker | undefined;
  private progress = new Float64Array(new SharedArrayBuffer(3 * 8));
  private pending = new Map<number, Pending>();
  /** The port of synchronous calls, and the counter the thread bumps after each answer on it. */
  private syncPort: MessagePort | undefined;
  private readonly answered = new Int32Array(new SharedArrayBuffer(4));
  private nextId = 1;
  private watchdog: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  /**
   * Threads that ended by themselves in a row with no reply between (not those the watchdog ended): past a few,
   * the sandbox answers with errors instead of starting threads in a loop.
   */
  private losses = 0;
  /** Bumped at each new thread: a function compiled in an older one is compiled again before it runs. */
  generation = 0;

  constructor(
    private readonly limits: FunctionLimits,
    private readonly graceMs: number,
  ) {}

  /** Sends a request and waits for its reply; `failed` with `lost` when the thread ended under another call. */
  call(request: Unsent): Promise<WorkerReply> {
    if (this.closed) return Promise.resolve({ id: 0, type: 'failed', message: 'the sandbox is closed' });
    if (this.losses >= MAX_LOSSES)
      return Promise.resolve({ id: 0, type: 'failed', message: 'the sandbox thread cannot start' });
    const worker = this.ensure();
    const id = this.nextId++;
    const full = { ...request, id } as WorkerRequest;
    return new Promise((resolve) => {
      if (full.type !== 'dispose') this.pending.set(id, { request: full, resolve });
      worker.postMessage(full, transferOf(full));
      if (full.type === 'dispose') resolve({ id, type: 'failed', message: 'disposed' });
      this.watch();
    });
  }

  /** The same as `call`, blocking until the answer; the watchdog's check runs between waits. */
  callSync(request: Unsent): WorkerReply {
    if (this.closed) return { id: 0, type: 'failed', message: 'the sandbox is closed' };
    if (this.losses >= MAX_LOSSES) return { id: 0, type: 'failed', message: 'the sandbox thread cannot start' };
    const worker = this.ensure();
    const port = this.syncPort!;
    const id = this.nextId++;
    const seen = Atomics.load(this.answered, 0);
    const full = { ...request, id } as WorkerRequest;
    port.postMessage(full, transferOf(full));
    let quietSince = Date.now();
    for (;;) {
      Atomics.wait(this.answered, 0, seen, WATCHDOG_TICK_MS);
      const received = receiveMessageOnPort(port);
      if (received) {
        this.losses = 0;
        return received.message as WorkerReply;
      }
      const started = this.progress[0]!;
      if (started > 0) quietSince = Date.now();
      const overrun = started > 0 && Date.now() - started > this.limits.cpuMs + this.graceMs;
      if (!overrun && Date.now() - quietSince < SILENT_MS) continue;
      const running = started > 0 ? this.progress[1]! : -1;
      const item = this.progress[2]!;
      const message = overrun
        ? `ran over its CPU limit of ${this.limits.cpuMs} ms`
        : 'the sandbox thread does not answer';
      this.lose(worker, message, !overrun);
      return { id, type: 'failed', message: running === id ? `${message}@${item}` : 'lost' };
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stopWatch();
    const worker = this.worker;
    this.worker = undefined;
    this.syncPort?.close();
    for (const [id, pending] of this.pending) pending.resolve({ id, type: 'failed', message: 'the sandbox is closed' });
    this.pending.clear();
    if (worker) {
      worker.ref(); // an unref'd thread would let the loop end while close() awaits its exit
      await worker.terminate();
    }
  }

  private ensure(): Worker {
    if (this.worker) return this.worker;
    this.progress = new Float64Array(new SharedArrayBuffer(3 * 8));
    const { port1, port2 } = new MessageChannel();
    port1.unref();
    this.syncPort = port1;
    const worker = spawn({
      progress: this.progress.buffer,
      limits: this.limits,
      sync: port2,
      answered: this.answered.buffer,
    });
    worker.unref();
    worker.on('message', (reply: WorkerReply) => {
      this.losses = 0;
      const pending = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      pending?.resolve(reply);
      if (this.pending.size === 0) this.stopWatch();
    });
    worker.on('error', () => this.lose(worker, 'the sandbox thread failed', true));
    worker.on('exit', () => this.lose(worker, 'the sandbox thread ended', true));
    this.worker = worker;
    return worker;
  }

  private watch(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => {
      const started = this.progress[0]!;
      if (started > 0 && Date.now() - started > this.limits.cpuMs + this.graceMs) {
        this.lose(this.worker, `ran over its CPU limit of ${this.limits.cpuMs} ms`, false);
      }
    }, WATCHDOG_TICK_MS);
    this.watchdog.unref();
  }

  private stopWatch(): void {
    if (this.watchdog) clearInterval(this.watchdog);
    this.watchdog = undefined;
  }

  /**
   * The thread ended or is being ended: the request that was running (and its item) gets `message`; every
   * other pending request is answered `lost`, so its caller sends it again to the next thread.
   */
  private lose(worker: Worker | undefined, message: string, byItself: boolean): void {
    if (!worker || worker !== this.worker) return;
    this.worker = undefined;
    this.syncPort?.close();
    this.syncPort = undefined;
    this.generation++;
    if (byItself) this.losses++;
    this.stopWatch();
    const running = this.progress[0]! > 0 ? this.progress[1]! : -1;
    const item = this.progress[2]!;
    void worker.terminate();
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const { request, resolve } of pending) {
      if (request.id === running) resolve({ id: request.id, type: 'failed', message: `${message}@${item}` });
      else resolve({ id: request.id, type: 'failed', message: 'lost' });
    }
  }
}

const encoder = new TextEncoder();

/** What a request moves to the thread rather than copies: a run's documents. */
function transferOf(request: WorkerRequest): ArrayBuffer[] {
  return request.type === 'run' ? [request.docs.buffer as ArrayBuffer] : [];
}

/** A thread running the worker: compiled JavaScript, or under tsx (tests, `npm run dev`) the TypeScript source. */
function spawn(workerData: {
  progress: ArrayBufferLike;
  limits: FunctionLimits;
  sync: MessagePort;
  answered: ArrayBufferLike;
}): Worker {
  const entry = new URL(`./sandbox-worker.${import.meta.url.endsWith('.ts') ? 'ts' : 'js'}`, import.meta.url);
  const options = { workerData, transferList: [workerData.sync], name: 'inlet-sandbox' };
  if (!entry.pathname.endsWith('.ts')) return new Worker(entry, options);
  // A worker thread does not inherit tsx's loader hooks (Node 20): it registers them itself first.
  const source = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(source, { ...options, eval: true });
}

export function createSandbox(settings: SandboxSettings): Sandbox {
  const limits: FunctionLimits = {
    cpuMs: settings.cpuMs,
    memoryBytes: settings.memoryMb * 1048576,
    maxResultBytes: settings.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
  };
  const thread = new SandboxThread(limits, settings.graceMs ?? Math.max(settings.cpuMs, 200));
  let nextFunction = 1;

  async function compileIn(fn: number, source: string): Promise<CompileOutcome> {
    for (;;) {
      const reply = await thread.call({ type: 'compile', fn, source });
      if (reply.type === 'compiled') return reply.outcome;
      if (reply.type === 'failed' && reply.message === 'lost') continue;
      const message = reply.type === 'failed' ? reply.message.replace(/@-?\d+$/, '') : 'unexpected reply';
      return { ok: false, message: `the code's top level ${message}`, line: null };
    }
  }

  function compileSync(fn: number, source: string): CompileOutcome {
    for (;;) {
      const reply = thread.callSync({ type: 'compile', fn, source });
      if (reply.type === 'compiled') return reply.outcome;
      if (reply.type === 'failed' && reply.message === 'lost') continue;
      const message = reply.type === 'failed' ? reply.message.replace(/@-?\d+$/, '') : 'unexpected reply';
      return { ok: false, message: `the code's top level ${message}`, line: null };
    }
  }

  return {
    async compile(source) {
      const fn = nextFunction++;
      const outcome = await compileIn(fn, source);
      if (!outcome.ok) return outcome;
      return { ok: true, fn: new CompiledFunction(thread, fn, source, thread.generation, compileIn, compileSync) };
    },
    close: () => thread.close(),
  };
}

class CompiledFunction implements SandboxFunction {
  private disposed = false;

  constructor(
    private readonly thread: SandboxThread,
    private readonly id: number,
    private readonly source: string,
    private generation: number,
    private readonly compileIn: (fn: number, source: string) => Promise<CompileOutcome>,
    private readonly compileSync: (fn: number, source: string) => CompileOutcome,
  ) {}

  runSync(event: Record<string, unknown>, meta: FunctionMeta): FunctionOutcome {
    return this.runManySync([event], meta)[0]!;
  }

  runManySync(events: readonly Record<string, unknown>[], meta: FunctionMeta): FunctionOutcome[] {
    if (events.length === 0) return [];
    if (this.disposed) return events.map(() => ({ kind: 'error', message: 'the function was replaced' }));
    if (this.generation !== this.thread.generation) {
      this.generation = this.thread.generation;
      const outcome = this.compileSync(this.id, this.source);
      if (!outcome.ok) return events.map(() => ({ kind: 'error', message: outcome.message }));
    }
    const reply = this.thread.callSync(this.request(events, meta));
    if (reply.type === 'ran') return readChunks(reply.chunks);
    if (reply.type !== 'failed') return events.map(() => ({ kind: 'error', message: 'unexpected reply' }));
    if (reply.message === 'lost') return this.runManySync(events, meta);
    // As in runMany: after the watchdog, each item alone again names the one that runs over.
    if (events.length === 1) return [{ kind: 'error', message: reply.message.replace(/@-?\d+$/, '') }];
    return events.map((event) => this.runSync(event, meta));
  }

  private request(events: readonly Record<string, unknown>[], meta: FunctionMeta) {
    return {
      type: 'run' as const,
      fn: this.id,
      // As UTF-8 bytes, moved to the thread (not copied) and copied there into the engine as they are.
      docs: encoder.encode(JSON.stringify(events)),
      meta: JSON.stringify(meta),
      count: events.length,
    };
  }

  async run(event: Record<string, unknown>, meta: FunctionMeta): Promise<FunctionOutcome> {
    return (await this.runMany([event], meta))[0]!;
  }

  async runMany(events: readonly Record<string, unknown>[], meta: FunctionMeta): Promise<FunctionOutcome[]> {
    if (events.length === 0) return [];
    if (this.disposed) return events.map(() => ({ kind: 'error', message: 'the function was replaced' }));
    if (this.generation !== this.thread.generation) {
      // The thread was started again: this function is compiled in the new one first.
      this.generation = this.thread.generation;
      const outcome = await this.compileIn(this.id, this.source);
      if (!outcome.ok) return events.map(() => ({ kind: 'error', message: outcome.message }));
    }
    const reply = await this.thread.call(this.request(events, meta));
    if (reply.type === 'ran') return readChunks(reply.chunks);
    if (reply.type !== 'failed') return events.map(() => ({ kind: 'error', message: 'unexpected reply' }));
    if (reply.message === 'lost') return this.runMany(events, meta);
    // This call ran over inside a built-in. Which item ran is known only to within one poll of the interrupt
    // handler, so each item of the call runs alone again: the one that runs over again is then known exactly.
    const message = reply.message.replace(/@-?\d+$/, '');
    if (events.length === 1) return [{ kind: 'error', message }];
    const outcomes: FunctionOutcome[] = [];
    for (const event of events) outcomes.push(await this.run(event, meta));
    return outcomes;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    void this.thread.call({ type: 'dispose', fn: this.id });
  }
}

/** One item as the sandbox's text gives it: the returned event, null for a drop, or the error's message. */
type RawItem = Record<string, unknown> | null | string;

function readChunks(chunks: RunChunk[]): FunctionOutcome[] {
  const outcomes: FunctionOutcome[] = [];
  for (const chunk of chunks) {
    if ('error' in chunk) {
      outcomes.push({ kind: 'error', message: chunk.error });
      continue;
    }
    // A function may write a `__proto__` key; it is dropped, as the routes refuse it in what clients send. The
    // sandbox's thread has looked for such keys already: text without any is parsed as it is.
    const items = chunk.plain
      ? (JSON.parse(chunk.items) as unknown)
      : secureJson.parse(chunk.items, undefined, { protoAction: 'remove', constructorAction: 'remove' });
    for (const raw of items as RawItem[]) {
      if (raw === null) outcomes.push({ kind: 'drop' });
      else if (typeof raw === 'string') outcomes.push({ kind: 'error', message: raw });
      else {
        if (chunk.storable) markStorable(raw);
        outcomes.push({ kind: 'event', event: raw });
      }
    }
  }
  return outcomes;
}
