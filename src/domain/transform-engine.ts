// Applying a transformation's ordered steps to one document (transformations.md §3–5). Pure apart from the
// enrichers and functions it is handed: the input is never changed (the engine works on a copy), and a
// step that fails leaves the document as it was before that step.
import { createHash, createHmac } from 'node:crypto';
import { boundedMemo } from './bounded-memo.js';
import { HmacSha256 } from './hmac-sha256.js';
import { holds } from './transform-condition.js';
import { adoptReturned, setTopLevel } from './transform-check.js';
import { applyKeyEdits, keyEditRuns, type KeyEditRun } from './transform-key-edits.js';
import { cloneJson, getPath, movePath, removePath, setPath } from './transform-paths.js';
import { isPlainString, stringText } from './shared-json.js';
import type {
  Enrichers,
  FunctionMeta,
  FunctionOutcome,
  RunnableFunction,
  Step,
  StepKind,
  TransformDocument,
} from './transform-types.js';

export const REDACTED = '[redacted]';

/**
 * `mask` `hash` results of one secret: by the path masked, then by the value (PathHashes). One map per path, so that
 * a path whose values never repeat (an order id) cannot push out those of a path whose values do (an e-mail
 * address, which a person sends with each of their events).
 */
export type HashCache = Map<string, PathHashes>;

/**
 * The hashes of one path, and how well they serve. Remembering a value that never comes back costs most of a hash
 * again (the map's growth, its clearing, the garbage): when the map fills with few hits, the path's next values are
 * hashed without it for a while, and then it is tried again.
 */
export class PathHashes {
  /**
   * Strings (nearly every masked value) by themselves, so a hit makes no JSON text; other values in `others`, by
   * their JSON text (the string "1" and the number 1 have different hashes).
   */
  readonly known = new Map<string, string>();
  readonly others = new Map<string, string>();
  /** Values found in `known` or `others` since they were last cleared. */
  hits = 0;
  /** Values still to hash without the maps. */
  bypass = 0;
}

export interface RunContext {
  /** The product's transformation secret: the key of `mask` `hash`. */
  secret: string;
  /** Hashes already made under `secret`, shared by the items of one version (HashCache). */
  hashCache?: HashCache;
  /**
   * The idempotency key as received, or the event's assigned id when it has none (`sample` by `message_id`); a
   * context shared by a batch's items leaves it out and the batch is given each item's id beside it.
   */
  messageId?: string;
  meta: FunctionMeta;
  enrichers: Enrichers;
  /** The compiled function of each `function` step, by step index. */
  functions?: ReadonlyArray<RunnableFunction | undefined>;
  /** Collect the paths each step changed (the test endpoint). */
  trace?: boolean;
  /** The input is the caller's to give away (the accept stage's own draft): no copy is made of it. */
  owned?: boolean;
  /** Seconds spent per step kind, added to (metrics). */
  cpu?: Map<StepKind, number>;
}

/** Per step run, what it did: counted in `inlet_transformation_items_total`. */
export type StepOutcome = 'changed' | 'unchanged' | 'dropped' | 'error';

export interface StepFailure {
  step: number;
  kind: StepKind;
  message: string;
}

export interface TransformResult {
  outcome: 'kept' | 'dropped' | 'error';
  /** The result (kept); as it stood when dropped or when the failing step ran (masks before it applied). */
  document: TransformDocument;
  /** The step that dropped the item. */
  droppedBy?: number;
  error?: StepFailure;
  /** Steps that failed with `on_error: "skip"`. */
  warnings: StepFailure[];
  /** One per step that ran, in order (steps after a drop or an error did not run). */
  outcomes: StepOutcome[];
  trace?: Array<{ step: number; changed: string[] }>;
}

type Applied = 'changed' | 'unchanged' | 'dropped';

/**
 * Fails a kept result that is no longer a valid event (too large to store, say) at the last step that changed it,
 * which left it so (transformations.md §1), so that it is answered, recorded and counted as that step's failure.
 * Undefined, and the result kept, when no step changed it: it is then the item as received, checked already.
 */
export function failLastChange(
  result: TransformResult,
  steps: readonly Step[],
  message: string,
): StepFailure | undefined {
  const step = result.outcomes.lastIndexOf('changed');
  if (result.outcome !== 'kept' || step < 0) return undefined;
  const failure: StepFailure = { step, kind: steps[step]!.kind, message };
  result.outcome = 'error';
  result.error = failure;
  result.outcomes[step] = 'error';
  return failure;
}

/** A deterministic share in [0, 1) of an id: the same id always gets the same answer. */
export function sampleShare(id: string): number {
  return createHash('sha256').update(id).digest().readUIntBE(0, 6) / 2 ** 48;
}

/** `mask` `hash`: lowercase hex HMAC-SHA256 of the value's JSON text under the product's secret. */
export function maskHash(secret: string, value: unknown, cache?: PathHashes): string {
  if (cache === undefined) return hashOf(secret, value);
  if (cache.bypass > 0) {
    cache.bypass--;
    return hashOf(secret, value);
  }
  const isString = typeof value === 'string';
  const key = isString ? value : JSON.stringify(value);
  const map = isString ? cache.known : cache.others;
  const known = map.get(key);
  if (known !== undefined) {
    cache.hits++;
    return known;
  }
  const hash = isString ? hashOf(secret, value) : hmacHex(secret, key);
  // Bounded: the values that repeat (e-mail addresses, ids) stay; a flood of new ones starts it again.
  if (cache.known.size + cache.others.size >= MASK_CACHE_ENTRIES) {
    if (cache.hits < MASK_CACHE_ENTRIES / 4) cache.bypass = MASK_BYPASS_VALUES;
    cache.known.clear();
    cache.others.clear();
    cache.hits = 0;
  }
  if (cache.bypass === 0) map.set(key, hash);
  return hash;
}

/** The hash of a value's JSON text; a string that needs no escape is hashed between quotes without making the text. */
function hashOf(secret: string, value: unknown): string {
  if (typeof value !== 'string') return hmacHex(secret, JSON.stringify(value));
  if (value.length <= MAX_QUOTED_HMAC && isPlainString(value)) return hmacOf(secret).hex(value, true);
  return hmacHex(secret, stringText(value));
}

function hmacHex(secret: string, text: string): string {
  if (text.length > MAX_SCRIPT_HMAC) return createHmac('sha256', secret).update(text).digest('hex');
  return hmacOf(secret).hex(text);
}

const MASK_CACHE_ENTRIES = 10_000;
/** How many values a path whose values seldom repeat is hashed without its cache before it is tried again. */
const MASK_BYPASS_VALUES = 100_000;
/** Strings hashed between quotes straight from their characters: within the HMAC's scratch buffer. */
const MAX_QUOTED_HMAC = 1024;
/** Longer texts (a whole object masked) go through node:crypto, whose per-call cost no longer matters then. */
const MAX_SCRIPT_HMAC = 65_536;

/**
 * Each secret's HMAC, its key's states computed once (HmacSha256): Node's createHmac costs about as much per call as
 * the hashing of a short value itself. Bounded like the hashes: one secret per product.
 */
const hmacOf = boundedMemo(1_000, (secret: string) => new HmacSha256(Buffer.from(secret, 'utf8')));

/** The hashes of one path in the version's cache (made on first use: a version names a bounded set of paths). */
function pathCache(context: RunContext, path: string): PathHashes | undefined {
  const all = context.hashCache;
  if (all === undefined) return undefined;
  let cache = all.get(path);
  if (cache === undefined) {
    cache = new PathHashes();
    all.set(path, cache);
  }
  return cache;
}

function isTopLevel(path: string): boolean {
  return path.indexOf('.') < 0;
}

/** The object a dotted path is read from and written to: the document itself (its objects are fields of it). */
function root(document: TransformDocument): Record<string, unknown> {
  return document as unknown as Record<string, unknown>;
}

function applyMask(document: TransformDocument, step: Extract<Step, { kind: 'mask' }>, context: RunContext): Applied {
  let changed = false;
  for (const path of step.paths) {
    const value = getPath(root(document), path);
    if (value === undefined) continue;
    const masked = step.with === 'redact' ? REDACTED : maskHash(context.secret, value, pathCache(context, path));
    if (isTopLevel(path)) setTopLevel(document, path, masked);
    else setPath(root(document), path, masked);
    changed = true;
  }
  return changed ? 'changed' : 'unchanged';
}

function applyAllow(document: TransformDocument, paths: string[]): Applied {
  let changed = false;
  for (const field of ['properties', 'traits'] as const) {
    const current = document[field];
    if (current === undefined) continue;
    const kept: Record<string, unknown> = {};
    const holder = { [field]: kept };
    for (const path of paths) {
      if (!path.startsWith(`${field}.`)) continue;
      const value = getPath(root(document), path);
      if (value !== undefined) setPath(holder, path, value);
    }
    if (JSON.stringify(kept) !== JSON.stringify(current)) changed = true;
    document[field] = kept;
  }
  return changed ? 'changed' : 'unchanged';
}

/**
 * Refuses a write under `traits.` on an item that has no traits (transformations.md §2: only identify and group
 * items do). Creating them would make a document no item has, and its traits would then be stored in place of
 * its properties; the step fails instead (`on_error` decides), before it changes anything.
 */
function refuseTraitsWithout(document: TransformDocument, path: string): void {
  if (document.traits === undefined && path.startsWith('traits.'))
    throw new Error(`${path}: only identify and group items have traits; this ${document.type} item has none`);
}

function enrich(document: TransformDocument, from: string, to: string, lookup: (input: string) => unknown): Applied {
  const input = getPath(root(document), from);
  if (typeof input !== 'string' || input === '') return 'unchanged';
  const value = lookup(input);
  if (value === undefined) return 'unchanged';
  refuseTraitsWithout(document, to);
  setPath(root(document), to, value);
  return 'changed';
}

function unavailable(kind: string): never {
  throw new Error(`the ${kind} step is not available on this server`);
}

/** One step on the document (changed in place); throws when the step fails, before changing anything. */
function applyStep(document: TransformDocument, step: Step, context: RunContext, messageId: string): Applied {
  switch (step.kind) {
    case 'drop':
      return 'dropped';
    case 'sample': {
      const id = step.by === 'subject' ? `${document.subject_type}\u0000${document.subject_id}` : messageId;
      return sampleShare(id) < step.rate ? 'unchanged' : 'dropped';
    }
    case 'rename_event':
      if (document.event === step.to) return 'unchanged';
      setTopLevel(document, 'event', step.to);
      return 'changed';
    case 'set':
      if (isTopLevel(step.path)) setTopLevel(document, step.path, step.value);
      else {
        refuseTraitsWithout(document, step.path);
        setPath(root(document), step.path, cloneJson(step.value));
      }
      return 'changed';
    case 'remove': {
      let changed = false;
      for (const path of step.paths) if (removePath(root(document), path)) changed = true;
      return changed ? 'changed' : 'unchanged';
    }
    case 'rename_property': {
      const value = getPath(root(document), step.from);
      if (value === undefined || step.from === step.to) return 'unchanged';
      refuseTraitsWithout(document, step.to);
      movePath(root(document), step.from, step.to, value);
      return 'changed';
    }
    case 'mask':
      return applyMask(document, step, context);
    case 'allow_properties':
      return applyAllow(document, step.paths);
    case 'user_agent': {
      const parse = context.enrichers.userAgent ?? unavailable('user_agent');
      return enrich(document, step.from, step.to, parse);
    }
    case 'bot': {
      const isBot = context.enrichers.isBot ?? unavailable('bot');
      const userAgent = getPath(root(document), step.from);
      if (typeof userAgent !== 'string') return 'unchanged';
      const bot = isBot(userAgent);
      if (step.action === 'drop') return bot ? 'dropped' : 'unchanged';
      setPath(root(document), 'context.bot', bot);
      return 'changed';
    }
    case 'geoip': {
      const lookup = context.enrichers.geoip ?? unavailable('geoip');
      return enrich(document, step.from, step.to, lookup);
    }
    case 'function':
      // Functions run through applyStepsToBatch, which calls the sandbox once for the whole batch.
      throw new Error('a function step runs only in a batch');
  }
}

/** A function's outcome (from the sandbox) taken into the document; throws when it is not a valid event. */
function adoptOutcome(document: TransformDocument, result: FunctionOutcome): Applied {
  if (result.kind === 'drop') return 'dropped';
  if (result.kind === 'error') throw new Error(result.message);
  const next = adoptReturned(document, result.event);
  const same = sameJson(document, next);
  Object.assign(document, next);
  return same ? 'unchanged' : 'changed';
}

/**
 * Whether two JSON values would serialise to the same text (keys in the same order included), without making the
 * texts: a function nearly always changes its event, and the walk stops at the first difference.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as unknown[];
    if (a.length !== other.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i] ?? null, other[i] ?? null)) return false;
    return true;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left).filter((key) => left[key] !== undefined);
  const otherKeys = Object.keys(right).filter((key) => right[key] !== undefined);
  if (keys.length !== otherKeys.length) return false;
  for (let i = 0; i < keys.length; i++) {
    if (keys[i] !== otherKeys[i]) return false;
    if (!sameJson(left[keys[i]!], right[keys[i]!])) return false;
  }
  return true;
}

function addTime(cpu: Map<StepKind, number> | undefined, kind: StepKind, started: number): void {
  if (cpu !== undefined) cpu.set(kind, (cpu.get(kind) ?? 0) + (performance.now() - started) / 1000);
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** The warnings of an item none of whose steps was skipped (nearly all): one frozen array, not one per item. */
const NO_WARNINGS: StepFailure[] = Object.freeze([]) as unknown as StepFailure[];

/** One item on its way through the steps: its document as it stands, and what each step did. */
class ItemRun {
  document: TransformDocument;
  /**
   * Made with room for every step (an empty array grows to 17 slots at its first push); `ran` of them are written,
   * and the array is cut to those when the run ends.
   */
  readonly outcomes: StepOutcome[];
  private ran = 0;
  /** NO_WARNINGS until a step is skipped: then the item's own array. */
  warnings: StepFailure[] = NO_WARNINGS;
  readonly trace: Array<{ step: number; changed: string[] }> | undefined;
  result: TransformResult | undefined;

  constructor(
    input: TransformDocument,
    readonly context: RunContext,
    readonly messageId: string,
    steps: number,
  ) {
    this.outcomes = new Array<StepOutcome>(steps);
    this.document = context.owned === true ? input : cloneJson(input);
    this.trace = context.trace === true ? [] : undefined;
  }

  /**
   * Starts a step: the document it works on, or undefined when its `where` does not hold (counted unchanged)
   * or fails. A step whose failure would be skipped (or traced) works on a copy, so it leaves nothing half-done.
   */
  open(step: Step, index: number): TransformDocument | undefined {
    const working = step.on_error === 'skip' || this.trace !== undefined ? cloneJson(this.document) : this.document;
    if (step.where === undefined) return working;
    try {
      if (holds(step.where, working)) return working;
    } catch (error) {
      this.fail(step, index, error);
      return undefined;
    }
    this.close(index, working, 'unchanged');
    return undefined;
  }

  close(index: number, working: TransformDocument, applied: Applied): void {
    this.outcomes[this.ran++] = applied;
    this.trace?.push({ step: index, changed: changedPaths(this.document, working) });
    this.document = working;
    if (applied === 'dropped') this.result = this.end('dropped', { droppedBy: index });
  }

  fail(step: Step, index: number, error: unknown): void {
    this.outcomes[this.ran++] = 'error';
    const failure = { step: index, kind: step.kind, message: messageOf(error) };
    if (step.on_error === 'skip') {
      if (this.warnings === NO_WARNINGS) this.warnings = [];
      this.warnings.push(failure);
      this.trace?.push({ step: index, changed: [] });
    } else this.result = this.end('error', { error: failure });
  }

  /** Runs a declarative step on this item; its time is added to the metrics unless the caller times several. */
  apply(step: Step, index: number, timed = true): void {
    const working = this.open(step, index);
    if (working === undefined) return;
    const started = !timed || this.context.cpu === undefined ? 0 : performance.now();
    try {
      this.close(index, working, applyStep(working, step, this.context, this.messageId));
    } catch (error) {
      this.fail(step, index, error);
    }
    if (timed) addTime(this.context.cpu, step.kind, started);
  }

  /**
   * Runs the steps of a key edit run on this item (`changed`: scratch for their outcomes). With a trace, step by
   * step, each traced.
   */
  applyKeyEdits(steps: readonly Step[], run: KeyEditRun, changed: boolean[]): void {
    if (this.trace !== undefined) {
      for (let index = run.first; index <= run.last && this.result === undefined; index++)
        this.apply(steps[index]!, index, false);
      return;
    }
    applyKeyEdits(root(this.document), run, changed);
    for (let i = 0; i < run.edits.length; i++) this.outcomes[this.ran++] = changed[i] ? 'changed' : 'unchanged';
  }

  /** The result, made field by field: spreads of the optional parts cost more than the rest of a small step. */
  end(outcome: TransformResult['outcome'], extra?: { droppedBy?: number; error?: StepFailure }): TransformResult {
    if (this.outcomes.length !== this.ran) this.outcomes.length = this.ran;
    const result: TransformResult = {
      outcome,
      document: this.document,
      warnings: this.warnings,
      outcomes: this.outcomes,
    };
    if (this.trace !== undefined) result.trace = this.trace;
    if (extra?.droppedBy !== undefined) result.droppedBy = extra.droppedBy;
    if (extra?.error !== undefined) result.error = extra.error;
    return result;
  }

  finish(): TransformResult {
    return this.result ?? this.end('kept');
  }
}

/**
 * Runs steps without a `function` in order on a copy of `input`. A step whose `where` does not hold is
 * `unchanged`; a drop ends the run; a failing step ends it (`on_error: "reject"`) or is skipped with a warning.
 */
export function applySteps(input: TransformDocument, steps: readonly Step[], context: RunContext): TransformResult {
  const run = new ItemRun(input, context, messageIdOf(context), steps.length);
  for (let index = 0; index < steps.length && run.result === undefined; index++) run.apply(steps[index]!, index);
  return run.finish();
}

/**
 * A declarative step on each item still running, timed once for them all: the contexts of one batch share their
 * metrics (`cpu`), and a clock read per item and step cost as much as a small step.
 */
function applyToEach(runs: readonly ItemRun[], step: Step, index: number, cpu: RunContext['cpu']): void {
  const started = cpu === undefined ? 0 : performance.now();
  for (const run of runs) if (run.result === undefined) run.apply(step, index, false);
  addTime(cpu, step.kind, started);
}

/** A key edit run on each item still running, timed once, the time shared equally by its steps' kinds. */
function applyKeyEditsToEach(
  runs: readonly ItemRun[],
  steps: readonly Step[],
  run: KeyEditRun,
  cpu: RunContext['cpu'],
) {
  const started = cpu === undefined ? 0 : performance.now();
  const changed: boolean[] = [];
  for (const item of runs) if (item.result === undefined) item.applyKeyEdits(steps, run, changed);
  if (cpu === undefined) return;
  const share = (performance.now() - started) / 1000 / (run.last - run.first + 1);
  for (let index = run.first; index <= run.last; index++) {
    const kind = steps[index]!.kind;
    cpu.set(kind, (cpu.get(kind) ?? 0) + share);
  }
}

/** The declarative step at `index` (or the key edit run starting there) on each item; the index of the next step. */
function applyDeclarative(
  runs: readonly ItemRun[],
  steps: readonly Step[],
  index: number,
  cpu: RunContext['cpu'],
): number {
  const run = keyEditRuns(steps)[index];
  if (run === undefined) {
    applyToEach(runs, steps[index]!, index, cpu);
    return index + 1;
  }
  applyKeyEditsToEach(runs, steps, run, cpu);
  return run.last + 1;
}

/** A context's message id, required of a context not shared by a batch. */
function messageIdOf(context: RunContext): string {
  if (context.messageId === undefined) throw new Error("a run context without a message id needs the items' ids");
  return context.messageId;
}

/**
 * The batch's item runs: each item with its own context, or all with one shared context (one object for the
 * request rather than one per item) and `messageIds`, one per item.
 */
function itemRuns(
  inputs: readonly TransformDocument[],
  contexts: RunContext | readonly RunContext[],
  messageIds: readonly string[] | undefined,
  steps: number,
): ItemRun[] {
  if (!Array.isArray(contexts)) {
    const shared = contexts as RunContext;
    return inputs.map((input, i) => new ItemRun(input, shared, messageIds?.[i] ?? messageIdOf(shared), steps));
  }
  return inputs.map((input, i) => {
    const context = (contexts as readonly RunContext[])[i]!;
    return new ItemRun(input, context, messageIds?.[i] ?? messageIdOf(context), steps);
  });
}

function firstContext(contexts: RunContext | readonly RunContext[]): RunContext | undefined {
  return Array.isArray(contexts) ? (contexts as readonly RunContext[])[0] : (contexts as RunContext);
}

/** applySteps on several items whose contexts share their metrics, step by step (no `function` step). */
export function applyStepsToEach(
  inputs: readonly TransformDocument[],
  steps: readonly Step[],
  contexts: RunContext | readonly RunContext[],
  messageIds?: readonly string[],
): TransformResult[] {
  const runs = itemRuns(inputs, contexts, messageIds, steps.length);
  const cpu = firstContext(contexts)?.cpu;
  for (let index = 0; index < steps.length;) index = applyDeclarative(runs, steps, index, cpu);
  return runs.map((run) => run.finish());
}

/** Calls a function step on the items whose `where` holds, in one crossing into the sandbox; applies each outcome. */
async function callFunction(runs: ItemRun[], step: Step, index: number, context: RunContext): Promise<void> {
  const calls: Array<{ run: ItemRun; working: TransformDocument }> = [];
  for (const run of runs) {
    const working = run.open(step, index);
    if (working !== undefined) calls.push({ run, working });
  }
  if (calls.length === 0) return;
  const fn = context.functions?.[index];
  const started = performance.now();
  let outcomes: FunctionOutcome[];
  try {
    if (fn === undefined) throw new Error('the function step is not available on this server');
    outcomes = await fn.runMany(
      calls.map((call) => call.working),
      context.meta,
    );
  } catch (error) {
    outcomes = calls.map(() => ({ kind: 'error', message: messageOf(error) }));
  }
  addTime(context.cpu, 'function', started);
  calls.forEach(({ run, working }, i) => {
    try {
      run.close(index, working, adoptOutcome(working, outcomes[i] ?? { kind: 'error', message: 'no outcome' }));
    } catch (error) {
      run.fail(step, index, error);
    }
  });
}

/**
 * The same on several items, `function` steps included: a function is called once per step for every item still
 * running whose `where` holds, its outcome then applied per item. The contexts share the functions, meta and metrics.
 */
export async function applyStepsToBatch(
  inputs: readonly TransformDocument[],
  steps: readonly Step[],
  contexts: RunContext | readonly RunContext[],
  messageIds?: readonly string[],
): Promise<TransformResult[]> {
  const runs = itemRuns(inputs, contexts, messageIds, steps.length);
  const first = firstContext(contexts);
  for (let index = 0; index < steps.length && runs.length > 0;) {
    const step = steps[index]!;
    const live = runs.filter((run) => run.result === undefined);
    if (step.kind === 'function') await callFunction(live, step, index++, first!);
    else index = applyDeclarative(live, steps, index, first!.cpu);
  }
  return runs.map((run) => run.finish());
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Dotted paths whose values differ between two documents (leaves, and objects added or removed whole). */
export function changedPaths(before: unknown, after: unknown, prefix = '', out: string[] = []): string[] {
  if (isObject(before) && isObject(after)) {
    const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
    for (const key of keys) changedPaths(before[key], after[key], prefix === '' ? key : `${prefix}.${key}`, out);
    return out;
  }
  if (JSON.stringify(before) !== JSON.stringify(after)) out.push(prefix);
  return out;
}
