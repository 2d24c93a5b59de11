// Applying a transformation's ordered steps to one document (transformations.md §3–5). Pure apart from the
// enrichers and functions it is handed: the input is never changed (the engine works on a copy), and a
// step that fails leaves the document as it was before that step.
import { createHash, createHmac } from 'node:crypto';
import { holds } from './transform-condition.js';
import { adoptReturned, setTopLevel } from './transform-check.js';
import { cloneJson, getPath, removePath, setPath } from './transform-paths.js';
import type {
  Enrichers,
  FunctionMeta,
  RunnableFunction,
  Step,
  StepKind,
  TransformDocument,
} from './transform-types.js';

export const REDACTED = '[redacted]';

export interface RunContext {
  /** The product's transformation secret: the key of `mask` `hash`. */
  secret: string;
  /** The idempotency key as received, or the event's assigned id when it has none (`sample` by `message_id`). */
  messageId: string;
  meta: FunctionMeta;
  enrichers: Enrichers;
  /** The compiled function of each `function` step, by step index. */
  functions?: ReadonlyArray<RunnableFunction | undefined>;
  /** Collect the paths each step changed (the test endpoint). */
  trace?: boolean;
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

/** A deterministic share in [0, 1) of an id: the same id always gets the same answer. */
export function sampleShare(id: string): number {
  return createHash('sha256').update(id).digest().readUIntBE(0, 6) / 2 ** 48;
}

/** `mask` `hash`: lowercase hex HMAC-SHA256 of the value's JSON text under the product's secret. */
export function maskHash(secret: string, value: unknown): string {
  return createHmac('sha256', secret).update(JSON.stringify(value)).digest('hex');
}

function isTopLevel(path: string): boolean {
  return path.indexOf('.') < 0;
}

/** The object a dotted path is read from and written to: the document itself (its objects are fields of it). */
function root(document: TransformDocument): Record<string, unknown> {
  return document as unknown as Record<string, unknown>;
}

function applyMask(document: TransformDocument, step: Extract<Step, { kind: 'mask' }>, secret: string): Applied {
  let changed = false;
  for (const path of step.paths) {
    const value = getPath(root(document), path);
    if (value === undefined) continue;
    const masked = step.with === 'redact' ? REDACTED : maskHash(secret, value);
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

function enrich(document: TransformDocument, from: string, to: string, lookup: (input: string) => unknown): Applied {
  const input = getPath(root(document), from);
  if (typeof input !== 'string' || input === '') return 'unchanged';
  const value = lookup(input);
  if (value === undefined) return 'unchanged';
  setPath(root(document), to, value);
  return 'changed';
}

function unavailable(kind: string): never {
  throw new Error(`the ${kind} step is not available on this server`);
}

/** One step on the document (changed in place); throws when the step fails, before changing anything. */
function applyStep(document: TransformDocument, step: Step, index: number, context: RunContext): Applied {
  switch (step.kind) {
    case 'drop':
      return 'dropped';
    case 'sample': {
      const id = step.by === 'subject' ? `${document.subject_type}\u0000${document.subject_id}` : context.messageId;
      return sampleShare(id) < step.rate ? 'unchanged' : 'dropped';
    }
    case 'rename_event':
      if (document.event === step.to) return 'unchanged';
      setTopLevel(document, 'event', step.to);
      return 'changed';
    case 'set':
      if (isTopLevel(step.path)) setTopLevel(document, step.path, step.value);
      else setPath(root(document), step.path, cloneJson(step.value));
      return 'changed';
    case 'remove': {
      let changed = false;
      for (const path of step.paths) if (removePath(root(document), path)) changed = true;
      return changed ? 'changed' : 'unchanged';
    }
    case 'rename_property': {
      const value = getPath(root(document), step.from);
      if (value === undefined || step.from === step.to) return 'unchanged';
      setPath(root(document), step.to, value);
      removePath(root(document), step.from);
      return 'changed';
    }
    case 'mask':
      return applyMask(document, step, context.secret);
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
      return runFunction(document, index, context);
  }
}

function runFunction(document: TransformDocument, index: number, context: RunContext): Applied {
  const fn = context.functions?.[index] ?? unavailable('function');
  const before = JSON.stringify(document);
  const result = fn.run(document, context.meta);
  if (result.kind === 'drop') return 'dropped';
  if (result.kind === 'error') throw new Error(result.message);
  const next = adoptReturned(document, result.event);
  Object.assign(document, next);
  return JSON.stringify(document) === before ? 'unchanged' : 'changed';
}

function addTime(cpu: Map<StepKind, number>, kind: StepKind, started: number): void {
  cpu.set(kind, (cpu.get(kind) ?? 0) + (performance.now() - started) / 1000);
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/**
 * Runs the steps in order on a copy of `input`. A step whose `where` does not hold is `unchanged`; a drop
 * ends the run; a failing step ends it (`on_error: "reject"`) or is skipped with a warning.
 */
export function applySteps(input: TransformDocument, steps: readonly Step[], context: RunContext): TransformResult {
  let document = cloneJson(input);
  const outcomes: StepOutcome[] = [];
  const warnings: StepFailure[] = [];
  const trace: Array<{ step: number; changed: string[] }> | undefined = context.trace ? [] : undefined;
  for (let index = 0; index < steps.length; index++) {
    const step = steps[index]!;
    // A failing step must leave nothing half-done: it works on a copy when its failure would be skipped.
    const working = step.on_error === 'skip' || trace !== undefined ? cloneJson(document) : document;
    let applied: Applied;
    const started = context.cpu === undefined ? 0 : performance.now();
    try {
      applied =
        step.where === undefined || holds(step.where, working) ? applyStep(working, step, index, context) : 'unchanged';
    } catch (error) {
      if (context.cpu !== undefined) addTime(context.cpu, step.kind, started);
      outcomes.push('error');
      const failure = { step: index, kind: step.kind, message: messageOf(error) };
      if (step.on_error === 'skip') {
        warnings.push(failure);
        trace?.push({ step: index, changed: [] });
        continue;
      }
      return { outcome: 'error', document, error: failure, warnings, outcomes, ...(trace ? { trace } : {}) };
    }
    if (context.cpu !== undefined) addTime(context.cpu, step.kind, started);
    outcomes.push(applied);
    if (trace !== undefined) trace.push({ step: index, changed: changedPaths(document, working) });
    document = working;
    if (applied === 'dropped')
      return { outcome: 'dropped', document, droppedBy: index, warnings, outcomes, ...(trace ? { trace } : {}) };
  }
  return { outcome: 'kept', document, warnings, outcomes, ...(trace ? { trace } : {}) };
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
