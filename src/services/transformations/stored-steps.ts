// A stored version's steps made ready on this instance, whatever this instance lacks (transformations.md §1, §8).
// A version was checked where it was PUT, but this instance may not be able to run all of it: no
// INLET_GEOIP_DATABASE here, a function whose code does not compile here (a top level that runs over its limits on
// a busy instance, other limits), a step of a release this one does not know. Such a step is kept in its place and
// fails wherever it would run, as a step error that its `on_error` decides: `reject` refuses the item as the steps
// before it left it (masks applied), `skip` records a warning. Keeping the older version, or none, would store
// events without the masks the new version added.
import { parseSteps } from '../../domain/transform-validate.js';
import type { Enrichers, FunctionOutcome, Step } from '../../domain/transform-types.js';
import { compileFailure, unavailableKind, type TransformRuntime } from './runtime.js';
import type { PreparedFunction } from './service.js';

/** A step of the version held here that cannot run on this instance, and why. */
export interface UnavailableStep {
  step: number;
  /** The kind as stored (a kind this release does not know included). */
  kind: string;
  reason: string;
  /** A function that did not compile here: the next refresh compiles it again, since that may pass. */
  retry: boolean;
}

export interface StoredSteps {
  steps: Step[];
  functions: Array<PreparedFunction | undefined>;
  /** What the steps call: the runtime's modules, a missing one replaced by one that fails with its reason. */
  enrichers: Enrichers;
  unavailable: UnavailableStep[];
}

/**
 * The place of a stored step this release cannot read: a function step whose every call fails (it keeps its
 * index; the failure names the kind as stored). Never a `where`, so that it fails on every item.
 */
const UNREADABLE: Step = { kind: 'function', code: '', on_error: 'reject' };

/** A compiled function in name only: every item it is given fails with `reason`. */
function failing(reason: string): PreparedFunction {
  return {
    runMany: (documents) => Promise.resolve(documents.map((): FunctionOutcome => ({ kind: 'error', message: reason }))),
    dispose() {},
  };
}

function kindOf(input: unknown): string {
  const kind = (input as { kind?: unknown } | null)?.kind;
  return typeof kind === 'string' ? kind.slice(0, 50) : 'unknown';
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** One stored step made ready here; or, when it cannot run here, the step that fails in its place and why. */
async function storedStep(
  input: unknown,
  runtime: TransformRuntime,
): Promise<{ step: Step; fn?: PreparedFunction; reason?: string; retry?: boolean }> {
  // Whether this instance has a GeoIP database is asked below, like every module: here only the step's shape.
  const parsed = parseSteps({ steps: [input] }, { geoip: true });
  if (!parsed.ok) {
    const problems = parsed.errors.map((e) => `${e.pointer.replace(/^\/steps\/0/, '') || '/'} ${e.message}`);
    const reason = `this instance cannot read the stored ${kindOf(input)} step: ${problems.join('; ')}`;
    return { step: UNREADABLE, fn: failing(reason), reason };
  }
  const step = parsed.steps[0]!;
  const missing = unavailableKind(step.kind, runtime);
  if (missing !== undefined) {
    const reason = `not available on this instance: ${missing}`;
    return step.kind === 'function' ? { step, fn: failing(reason), reason } : { step, reason };
  }
  if (step.kind !== 'function') return { step };
  let message: string;
  try {
    const compiled = await runtime.functions!.compile(step.code);
    if (compiled.ok) return { step, fn: compiled.fn };
    message = compileFailure(compiled);
  } catch (error) {
    message = messageOf(error);
  }
  const reason = `the function did not compile on this instance: ${message}`;
  return { step, fn: failing(reason), reason, retry: true };
}

/** Enrichers whose missing modules fail with their reason, where the step would look something up. */
function enrichersFor(runtime: TransformRuntime, steps: readonly Step[], reasons: ReadonlyMap<number, string>) {
  const enrichers: Enrichers = { ...runtime.enrichers };
  for (const [index, reason] of reasons) {
    const fail = (): never => {
      throw new Error(reason);
    };
    const kind = steps[index]!.kind;
    if (kind === 'user_agent') enrichers.userAgent ??= fail;
    else if (kind === 'bot') enrichers.isBot ??= fail;
    else if (kind === 'geoip') enrichers.geoip ??= fail;
  }
  return enrichers;
}

/** Every step of a stored version, in its place: those this instance cannot run fail as step errors. */
export async function prepareStoredSteps(stored: readonly unknown[], runtime: TransformRuntime): Promise<StoredSteps> {
  const steps: Step[] = [];
  const functions: Array<PreparedFunction | undefined> = [];
  const unavailable: UnavailableStep[] = [];
  const reasons = new Map<number, string>();
  for (const [index, input] of stored.entries()) {
    const ready = await storedStep(input, runtime);
    steps.push(ready.step);
    if (ready.fn !== undefined) functions[index] = ready.fn;
    if (ready.reason === undefined) continue;
    reasons.set(index, ready.reason);
    unavailable.push({ step: index, kind: kindOf(input), reason: ready.reason, retry: ready.retry === true });
  }
  return { steps, functions, enrichers: enrichersFor(runtime, steps, reasons), unavailable };
}
