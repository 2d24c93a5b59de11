/**
 * One user function of a transformation inside QuickJS (compiled to WebAssembly): its own WebAssembly
 * instance, runtime and context, so no two functions share a heap or a global. Runs inside the sandbox's
 * worker thread (sandbox-worker.ts); the host side is sandbox.ts. Everything crosses the boundary as JSON text.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  Lifetime,
  newQuickJSWASMModuleFromVariant,
  newVariant,
  type CustomizeVariantOptions,
  type QuickJSContext,
  type QuickJSHandle,
  type QuickJSRuntime,
  type QuickJSSyncVariant,
  type QuickJSWASMModule,
} from 'quickjs-emscripten-core';
import { ESCAPE_OR_SUSPECT, jsonNestsDeeperThan, MAX_PROPERTY_DEPTH, storableJson } from '../../domain/json-values.js';

export interface FunctionLimits {
  /** CPU time of one call (one item), and of the code's top level at compile. */
  cpuMs: number;
  /** Everything the function's runtime may allocate, array buffers included. */
  memoryBytes: number;
  /** The longest JSON text one item may come back as. */
  maxResultBytes: number;
}

/** What one item became. */
export type ItemOutcome =
  { kind: 'event'; event: Record<string, unknown> } | { kind: 'drop' } | { kind: 'error'; message: string };

/**
 * What a call gives back, to be read on the host thread: JSON text of an array of raw items (the returned
 * document, `null` for a drop or the error's message), so a document is parsed once, where it is used; or
 * one item's error when the call itself ended on a limit. `plain` says the text cannot hold a `__proto__` or
 * `constructor` key, however escaped, so the host parses it without the checks for them: the check runs here, on
 * the sandbox's thread, rather than on the host's, which serves the requests. `storable` says the same of the
 * storage check of the returned events (storableJson).
 */
export type RunChunk = { items: string; plain: boolean; storable: boolean } | { error: string };

/** Told when user code starts on an item (-1: the top level) and when it stops (null), for a watchdog outside. */
export type Watch = (item: number | null) => void;

export type CompileOutcome = { ok: true } | { ok: false; message: string; line: number | null };

/** The interpreter's own stack limit: it must refuse deep recursion before the thread's native stack runs out. */
const MAX_STACK_BYTES = 192 * 1024;
const FILE_NAME = 'transform.js';

type WasmModule = Awaited<NonNullable<CustomizeVariantOptions['wasmModule']>>;
type WasmMemory = Awaited<NonNullable<CustomizeVariantOptions['wasmMemory']>>;
// The package's types describe its CommonJS build, whose variant is `default`; require says so at run time too.
const require = createRequire(import.meta.url);
const releaseSync = (require('@jitl/quickjs-wasmfile-release-sync') as { default: QuickJSSyncVariant }).default;
const { WebAssembly } = globalThis as unknown as {
  WebAssembly: {
    compile(bytes: Uint8Array): Promise<WasmModule>;
    Memory: new (size: { initial: number; maximum: number }) => WasmMemory;
  };
};

let sharedWasm: Promise<WasmModule> | undefined;

/** The QuickJS WebAssembly code, compiled once per thread; each function instantiates it with its own memory. */
function wasmModule(): Promise<WasmModule> {
  sharedWasm ??= WebAssembly.compile(readFileSync(require.resolve('@jitl/quickjs-wasmfile-release-sync/wasm')));
  return sharedWasm;
}

/** What the engine itself takes of its WebAssembly memory (code data, stack, runtime) beside the function's heap. */
const ENGINE_BYTES = 5 * 1048576;
/** The smallest memory this build of QuickJS starts with. */
const MIN_MEMORY_BYTES = 16 * 1048576;
const PAGE_BYTES = 65536;

/**
 * A new QuickJS instance whose WebAssembly memory cannot grow past the limit. QuickJS's own limit
 * (`setMemoryLimit`) only refuses single allocations larger than the limit in this build, so the bound
 * on everything a function allocates, array buffers included, is the size of its memory.
 */
async function newModule(memoryBytes: number): Promise<Instance> {
  const pages = Math.ceil(Math.max(MIN_MEMORY_BYTES, memoryBytes + ENGINE_BYTES) / PAGE_BYTES);
  const memory = new WebAssembly.Memory({ initial: pages, maximum: pages });
  const variant = newVariant(releaseSync, { wasmModule: await wasmModule(), wasmMemory: memory });
  return { module: await newQuickJSWASMModuleFromVariant(variant), memory };
}

interface Instance {
  module: QuickJSWASMModule;
  /** Never grows (its maximum is its size), so views of its buffer stay valid. */
  memory: WasmMemory;
}

/** Two numbers no code writes by chance: they mark where the prelude's progress array lies in the memory. */
const MARK = [1.25e-301, -9.75e299] as const;

/** The index of the prelude's progress array in the memory, as 64-bit floats (malloc aligns it to 8 bytes). */
function findProgress(memory: WasmMemory): { view: Float64Array; index: number } {
  const view = new Float64Array((memory as unknown as { buffer: ArrayBuffer }).buffer);
  for (let i = 0; i + 1 < view.length; i++)
    if (view[i] === MARK[0] && view[i + 1] === MARK[1]) return { view, index: i };
  throw new Error('the progress array of the prelude was not found');
}

/**
 * Runs before the user's code and keeps the built-ins it needs in a closure, so that code which replaces
 * `JSON`, `Array.isArray` or a prototype method cannot change how results are read. Each item gets its
 * own CPU deadline: the prelude writes the item's index in `progress`, which the host's interrupt handler reads
 * in the WebAssembly memory (a callback to the host per item cost a third of a call), and its result is checked and turned into JSON text inside the sandbox, so
 * that a cycle, a BigInt or a throwing getter is that item's error. A text starting with `!` tells the host
 * that an item ran out of memory or stack, so the runtime is built again before the next call.
 */
const PRELUDE = `(function (memoryMessage) {
  'use strict';
  var progress = new Float64Array([${MARK[0]}, ${MARK[1]}]);
  var parse = JSON.parse, stringify = JSON.stringify, isArray = Array.isArray, PromiseCtor = Promise;
  var ErrorProto = Error.prototype, isPrototypeOf = Object.prototype.isPrototypeOf;
  var transform, fault = false;
  function describe(thrown) {
    try {
      if (typeof thrown === 'string') return thrown;
      if (thrown !== null && typeof thrown === 'object' && isPrototypeOf.call(ErrorProto, thrown)) {
        var message = thrown.message, name = thrown.name;
        if (name === 'InternalError' && message === 'out of memory') { fault = true; return memoryMessage; }
        if (name === 'InternalError' && message === 'stack overflow') { fault = true; return 'ran out of stack (recursion too deep)'; }
        if (typeof message === 'string') return (typeof name === 'string' && name !== 'Error' ? name + ': ' : '') + message;
      }
      return 'threw a value that is not an Error (' + (thrown === null ? 'null' : typeof thrown) + ')';
    } catch (_) {
      return 'threw a value that cannot be described';
    }
  }
  function one(doc, meta, maxBytes) {
    try {
      var result = transform(doc, meta);
      if (result === null) return 'null';
      if (result === undefined) return '"transform returned undefined: return the event, or null to drop it"';
      if (typeof result !== 'object' || isArray(result)) return '"transform must return an object (the event) or null"';
      if (result instanceof PromiseCtor || typeof result.then === 'function') return '"transform must return the event itself, not a Promise"';
      var text = stringify(result);
      if (typeof text !== 'string' || text.charAt(0) !== '{') return '"transform returned a value that is not a JSON object"';
      if (text.length > maxBytes) return '"the returned event is larger than ' + maxBytes + ' bytes"';
      return text;
    } catch (thrown) {
      return stringify(describe(thrown));
    }
  }
  return {
    bind: function (fn) { transform = fn; },
    run: function (docsText, metaText, from, to, maxBytes) {
      var docs = parse(docsText), meta = Object.freeze(parse(metaText)), out = '[';
      fault = false;
      for (var i = from; i < to; i++) {
        progress[0] = i;
        out += (i > from ? ',' : '') + one(docs[i], meta, maxBytes);
      }
      return (fault ? '!' : '') + out + ']';
    },
  };
})`;

/** The parts of a context's memory (quickjs-emscripten-core 0.32, private) through which strings cross. */
interface ContextMemory {
  module: { _malloc(bytes: number): number; _free(pointer: number): void; HEAPU8: Uint8Array };
  ffi: { QTS_FreeCString(context: unknown, pointer: number): void };
  ctx: { value: unknown };
  newHeapCharPointer(text: string): Lifetime<{ ptr: number; strlen: number }>;
  consumeJSCharPointer(pointer: number): string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Strings into and out of the engine through the platform's UTF-8 coders instead of the glue's loops over each
 * character in JavaScript, which cost as much as the engine's JSON.parse of the same text. The results are the
 * same for well-formed text, which the documents' JSON text always is (JSON.stringify escapes lone surrogates).
 * Left as it is when the library's insides are not what this expects.
 */
function fastStrings(context: QuickJSContext): void {
  const memory = (context as unknown as { memory?: Partial<ContextMemory> }).memory;
  const { module, ffi, ctx } = memory ?? {};
  if (
    memory === undefined ||
    typeof memory.newHeapCharPointer !== 'function' ||
    typeof memory.consumeJSCharPointer !== 'function' ||
    typeof module?._malloc !== 'function' ||
    typeof module._free !== 'function' ||
    !(module.HEAPU8 instanceof Uint8Array) ||
    typeof ffi?.QTS_FreeCString !== 'function' ||
    ctx === undefined
  )
    return;
  const slow = memory.newHeapCharPointer.bind(memory);
  memory.newHeapCharPointer = (text: string) => {
    // A lone surrogate (in user code, say) keeps the glue's own encoding of it.
    if (!(text as unknown as { isWellFormed(): boolean }).isWellFormed()) return slow(text);
    const bytes = Buffer.byteLength(text, 'utf8');
    const pointer = module._malloc(bytes + 1);
    if (pointer === 0) throw new Error('out of memory');
    // The memory never grows (its maximum is its size), so the glue's view of it stays valid.
    const heap = module.HEAPU8!;
    const { written } = encoder.encodeInto(text, heap.subarray(pointer, pointer + bytes));
    heap[pointer + written] = 0;
    return new Lifetime({ ptr: pointer, strlen: written }, undefined, (value) => module._free!(value.ptr));
  };
  memory.consumeJSCharPointer = (pointer: number) => {
    const heap = module.HEAPU8!;
    const text = decoder.decode(heap.subarray(pointer, heap.indexOf(0, pointer)));
    ffi.QTS_FreeCString!(ctx.value, pointer);
    return text;
  };
}

/**
 * A string in the engine made from UTF-8 bytes (the documents' JSON text, encoded on the host's thread and moved
 * here without a copy) by copying them into its memory: the text is neither copied as a string between the threads
 * nor encoded again here. The bytes hold no NUL (JSON escapes it). Through a string when the library's insides are
 * not what this expects.
 */
function bytesHandle(context: QuickJSContext, bytes: Uint8Array): QuickJSHandle {
  const { memory, ffi, ctx } = context as unknown as {
    memory?: Partial<ContextMemory> & { heapValueHandle?(pointer: number): QuickJSHandle };
    ffi?: { QTS_NewString?(context: unknown, pointer: number): number };
    ctx?: { value: unknown };
  };
  const module = memory?.module;
  if (
    typeof memory?.heapValueHandle !== 'function' ||
    typeof ffi?.QTS_NewString !== 'function' ||
    typeof module?._malloc !== 'function' ||
    typeof module._free !== 'function' ||
    !(module.HEAPU8 instanceof Uint8Array) ||
    ctx === undefined
  )
    return context.newString(decoder.decode(bytes));
  const pointer = module._malloc(bytes.length + 1);
  if (pointer === 0) throw new Error('out of memory');
  try {
    module.HEAPU8.set(bytes, pointer);
    module.HEAPU8[pointer + bytes.length] = 0;
    return memory.heapValueHandle(ffi.QTS_NewString(ctx.value, pointer));
  } finally {
    module._free(pointer);
  }
}

interface Live {
  module: QuickJSWASMModule;
  progress: { view: Float64Array; index: number } | undefined;
  runtime: QuickJSRuntime;
  context: QuickJSContext;
  run: QuickJSHandle;
  api: QuickJSHandle;
}

/**
 * A compiled function. After an item hits a limit its runtime is thrown away and built again (the user's
 * top level runs again) before the next item; after a fault of the WebAssembly instance itself, the instance too.
 */
export class QuickJsFunction {
  private live: Live | undefined;
  private deadline = Infinity;
  private current = -1;

  private constructor(
    private readonly source: string,
    private readonly limits: FunctionLimits,
    private readonly watch: Watch,
  ) {}

  /** Compiles `source` and runs its top level; the outcome says why not, with the line where the compiler knows it. */
  static async compile(
    source: string,
    limits: FunctionLimits,
    watch: Watch = () => {},
  ): Promise<{ outcome: CompileOutcome; fn?: QuickJsFunction }> {
    const fn = new QuickJsFunction(source, limits, watch);
    const instance = await newModule(limits.memoryBytes);
    const outcome = fn.start(instance);
    if (!outcome.ok) {
      fn.dispose();
      return { outcome };
    }
    return { outcome, fn };
  }

  /**
   * Runs the function on each of `count` documents (JSON text of an array, or its UTF-8 bytes), each item under
   * its own limits.
   * When a limit ends a call, that item gets the error, and the items before it in that call run again.
   */
  async run(docsText: string | Uint8Array, metaText: string, count: number): Promise<RunChunk[]> {
    const chunks: RunChunk[] = [];
    await this.runSpan(docsText, metaText, 0, count, chunks);
    return chunks;
  }

  private async runSpan(docsText: string | Uint8Array, metaText: string, from: number, to: number, chunks: RunChunk[]) {
    while (from < to) {
      if (!this.live) {
        const outcome = this.start(await newModule(this.limits.memoryBytes));
        if (!outcome.ok) {
          // The code compiled before: only a limit at its top level can fail it now; the rest get that error.
          for (; from < to; from++) chunks.push({ error: outcome.message });
          return;
        }
      }
      const chunk = this.runRange(docsText, metaText, from, to);
      if ('items' in chunk) {
        chunks.push(chunk);
        return;
      }
      const at = Math.min(Math.max(chunk.at, from), to - 1);
      if (at > from) await this.runSpan(docsText, metaText, from, at, chunks);
      chunks.push({ error: chunk.error });
      from = at + 1;
    }
  }

  dispose(): void {
    this.stop();
  }

  private start({ module, memory }: Instance): CompileOutcome {
    const runtime = module.newRuntime();
    runtime.setMemoryLimit(this.limits.memoryBytes);
    runtime.setMaxStackSize(MAX_STACK_BYTES);
    runtime.setInterruptHandler(() => this.interrupt());
    const context = runtime.newContext();
    fastStrings(context);
    const live: Live = {
      module,
      runtime,
      context,
      run: context.undefined,
      api: context.undefined,
      progress: undefined,
    };
    this.live = live;
    try {
      return this.prepare(context, live, memory);
    } catch (error) {
      this.stop();
      return { ok: false, message: `the sandbox failed: ${(error as Error).message}`, line: null };
    }
  }

  /** Polled by QuickJS while user code runs: a new item starts its own CPU time; past the deadline, the call ends. */
  private interrupt(): boolean {
    const progress = this.live?.progress;
    const item = progress ? progress.view[progress.index]! : this.current;
    if (item !== this.current) {
      this.current = item;
      this.deadline = performance.now() + this.limits.cpuMs;
      this.watch(item);
    }
    return performance.now() > this.deadline;
  }

  private prepare(context: QuickJSContext, live: Live, memory: WasmMemory): CompileOutcome {
    const message = context.newString(memoryMessage(this.limits));
    const prelude = context.unwrapResult(context.evalCode(PRELUDE, 'prelude.js'));
    live.api = context.unwrapResult(context.callFunction(prelude, context.undefined, message));
    prelude.dispose();
    message.dispose();
    live.run = context.getProp(live.api, 'run');
    live.progress = findProgress(memory);
    live.progress.view[live.progress.index] = -1;

    this.current = -1;
    this.deadline = performance.now() + this.limits.cpuMs;
    this.watch(-1);
    const evaluated = context.evalCode(this.source, FILE_NAME);
    this.deadline = Infinity;
    this.watch(null);
    if (evaluated.error) {
      const failure = this.describeCompileError(context.dump(evaluated.error));
      evaluated.error.dispose();
      this.stop();
      return failure;
    }
    evaluated.value.dispose();
    const transform = context.getProp(context.global, 'transform');
    if (context.typeof(transform) !== 'function') {
      transform.dispose();
      this.stop();
      return { ok: false, message: 'the code must define function transform(event, meta)', line: null };
    }
    const bind = context.getProp(live.api, 'bind');
    context.unwrapResult(context.callFunction(bind, context.undefined, transform)).dispose();
    bind.dispose();
    transform.dispose();
    return { ok: true };
  }

  private describeCompileError(dumped: unknown): CompileOutcome {
    const error = (dumped ?? {}) as { name?: unknown; message?: unknown; lineNumber?: unknown; stack?: unknown };
    const limit = limitMessage(error.message, this.limits);
    const name = typeof error.name === 'string' ? error.name : 'Error';
    const message = limit ?? (typeof error.message === 'string' ? `${name}: ${error.message}` : String(dumped));
    let line = typeof error.lineNumber === 'number' ? error.lineNumber : null;
    if (line === null && typeof error.stack === 'string') {
      const match = new RegExp(`${FILE_NAME.replace('.', '\\.')}:(\\d+)`).exec(error.stack);
      if (match) line = Number(match[1]);
    }
    return { ok: false, message: limit ? `the code's top level ${limit}` : message, line };
  }

  /** One call into the sandbox for items `from` to `to` (excluded); a limit that ends the call says at which item. */
  private runRange(
    docsText: string | Uint8Array,
    metaText: string,
    from: number,
    to: number,
  ): { items: string; plain: boolean; storable: boolean } | { error: string; at: number } {
    const live = this.live!;
    const { context, run } = live;
    const handles = [
      typeof docsText === 'string' ? context.newString(docsText) : bytesHandle(context, docsText),
      context.newString(metaText),
      context.newNumber(from),
      context.newNumber(to),
      context.newNumber(this.limits.maxResultBytes),
    ];
    this.current = from;
    live.progress!.view[live.progress!.index] = from;
    this.deadline = performance.now() + this.limits.cpuMs;
    this.watch(from);
    let result;
    try {
      result = context.callFunction(run, context.undefined, ...handles);
    } catch (error) {
      // The WebAssembly instance itself failed (the thread's stack ran out, a trap): only a new one is safe.
      this.stop();
      return { error: `the function failed: ${(error as Error).message}`, at: this.current };
    } finally {
      this.deadline = Infinity;
      this.watch(null);
      if (this.live) for (const handle of handles) handle.dispose();
    }
    if (result.error) {
      const dumped = context.dump(result.error) as { message?: unknown } | undefined;
      result.error.dispose();
      this.stop();
      // A call ends on an error only at a limit: an exception the sandbox cannot even describe is memory.
      const message = limitMessage(dumped?.message, this.limits) ?? memoryMessage(this.limits);
      return { error: message, at: this.current };
    }
    const text = context.getString(result.value);
    result.value.dispose();
    if (!text.startsWith('!')) return { items: text, ...textFlags(text) };
    this.stop();
    const items = text.slice(1);
    return { items, ...textFlags(items) };
  }

  private stop(): void {
    const live = this.live;
    this.live = undefined;
    this.deadline = Infinity;
    if (!live) return;
    // A runtime stopped mid-call may still hold objects; freeing it then asserts, so after a fault the whole
    // WebAssembly instance is simply dropped for the garbage collector.
    try {
      live.run.dispose();
      live.api.dispose();
      live.context.dispose();
      live.runtime.dispose();
    } catch {
      // Dropped with its instance.
    }
  }
}

/**
 * Whether JSON text holds neither `__proto__` nor `constructor` nor any `\u00` escape (through which either could
 * be written): then no key of it is one secure-json-parse would remove, and plain JSON.parse gives the same.
 */
export function isPlain(text: string): boolean {
  return !text.includes('__proto__') && !text.includes('constructor') && !text.includes('\\u00');
}

/** What isPlain and storableJson look for, in one search (`\\u` covers isPlain's `\\u00`). */
const SUSPECT_TEXT = new RegExp(`__proto__|constructor|${ESCAPE_OR_SUSPECT.source}`);

/**
 * isPlain and storableJson of a call's text. Nearly always the text holds none of the words and characters either
 * looks for: one search says so, and only the depth is left to check, instead of four passes over the text.
 */
export function textFlags(text: string): { plain: boolean; storable: boolean } {
  if (SUSPECT_TEXT.test(text)) return { plain: isPlain(text), storable: storableJson(text) };
  return { plain: true, storable: !jsonNestsDeeperThan(text, MAX_PROPERTY_DEPTH) };
}

/** The sandbox's own messages for a limit, said in the user's terms. */
function limitMessage(message: unknown, limits: FunctionLimits): string | undefined {
  if (message === 'interrupted') return `ran over its CPU limit of ${limits.cpuMs} ms`;
  if (message === 'out of memory') return memoryMessage(limits);
  if (message === 'stack overflow') return 'ran out of stack (recursion too deep)';
  return undefined;
}

function memoryMessage(limits: FunctionLimits): string {
  return `ran over its memory limit of ${Math.round(limits.memoryBytes / 1048576)} MB`;
}
