// Checking a transformation's steps before they are stored (transformations.md §3): every field of every
// kind, the JSON Logic conditions and the paths, with a JSON pointer into the body for each problem.
// Function code is compiled by the sandbox (a service); here only its size is checked.
import type { FieldError } from './errors.js';
import { rejectUnstorable } from './json-values.js';
import { conditionProblems } from './transform-condition.js';
import { isUnderWritableRoot, pathProblem, SETTABLE_FIELDS } from './transform-paths.js';
import { STEP_KINDS, type Step, type StepKind } from './transform-types.js';

export const MAX_STEPS = 50;
export const MAX_PATHS_PER_STEP = 100;
export const MAX_SET_VALUE_BYTES = 8 * 1024;
export const MAX_FUNCTION_BYTES = 64 * 1024;
/** A unified event name (transformations.md §3, `rename_event`). */
export const RENAME_TO_PATTERN = /^[a-z][a-z0-9_]*[._:][a-z][a-z0-9_]*$/;

const FIELDS: Record<StepKind, readonly string[]> = {
  drop: [],
  sample: ['rate', 'by'],
  rename_event: ['to'],
  set: ['path', 'value'],
  remove: ['paths'],
  rename_property: ['from', 'to'],
  mask: ['paths', 'with'],
  allow_properties: ['paths'],
  user_agent: ['from', 'to'],
  bot: ['from', 'action'],
  geoip: ['from', 'to'],
  function: ['code'],
};
const COMMON = ['kind', 'where', 'on_error'];

export interface ValidateOptions {
  /** Whether a MaxMind database is configured (`INLET_GEOIP_DATABASE`): a geoip step is refused without one. */
  geoip: boolean;
}

export type StepsResult = { ok: true; steps: Step[] } | { ok: false; errors: FieldError[] };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Where a step may write: under properties./traits./context., or (`set`, `mask`) a top-level field. */
type PathUse = 'read' | 'write' | 'set' | 'mask' | 'allow';

function checkPath(value: unknown, pointer: string, use: PathUse, errors: FieldError[]): value is string {
  const problem = pathProblem(value);
  if (problem !== undefined) {
    errors.push({ pointer, message: problem });
    return false;
  }
  const path = value as string;
  if (use === 'read' || isUnderWritableRoot(path)) {
    if (use === 'allow' && !path.startsWith('properties.') && !path.startsWith('traits.')) {
      errors.push({ pointer, message: `"${path}" must start with properties. or traits.` });
      return false;
    }
    return true;
  }
  const settable: readonly string[] = use === 'set' ? SETTABLE_FIELDS : use === 'mask' ? ['subject_id'] : [];
  if (settable.includes(path)) return true;
  const also = settable.length === 0 ? '' : ` or be one of ${settable.join(', ')}`;
  errors.push({
    pointer,
    message: `"${path}" may not be changed: a path must start with properties., traits. or context.${also}`,
  });
  return false;
}

function checkPaths(value: unknown, pointer: string, use: PathUse, errors: FieldError[]): void {
  if (!Array.isArray(value) || value.length === 0) {
    errors.push({ pointer, message: 'must be a non-empty array of paths' });
    return;
  }
  if (value.length > MAX_PATHS_PER_STEP) {
    errors.push({ pointer, message: `must have at most ${MAX_PATHS_PER_STEP} paths` });
    return;
  }
  value.forEach((path, i) => checkPath(path, `${pointer}/${i}`, use, errors));
}

function oneOf(value: unknown, allowed: readonly string[], pointer: string, errors: FieldError[]): void {
  if (!allowed.includes(value as string))
    errors.push({ pointer, message: `must be one of ${allowed.map((a) => `"${a}"`).join(', ')}` });
}

/** The kind's own fields, with defaults filled in; problems pushed to `errors`. */
function checkKindFields(
  step: Record<string, unknown>,
  at: string,
  options: ValidateOptions,
  errors: FieldError[],
): void {
  const kind = step.kind as StepKind;
  switch (kind) {
    case 'drop':
      return;
    case 'sample':
      if (typeof step.rate !== 'number' || !(step.rate >= 0 && step.rate <= 1))
        errors.push({ pointer: `${at}/rate`, message: 'must be a number from 0 to 1' });
      step.by ??= 'message_id';
      oneOf(step.by, ['message_id', 'subject'], `${at}/by`, errors);
      return;
    case 'rename_event':
      if (typeof step.to !== 'string' || step.to.length > 129 || !RENAME_TO_PATTERN.test(step.to))
        errors.push({ pointer: `${at}/to`, message: `must be a unified name matching ${RENAME_TO_PATTERN.source}` });
      return;
    case 'set': {
      checkPath(step.path, `${at}/path`, 'set', errors);
      const text = JSON.stringify(step.value);
      if (!Object.hasOwn(step, 'value') || text === undefined)
        errors.push({ pointer: `${at}/value`, message: 'is required (any JSON value)' });
      else if (text.length > MAX_SET_VALUE_BYTES)
        errors.push({ pointer: `${at}/value`, message: `must be at most ${MAX_SET_VALUE_BYTES} bytes of JSON` });
      else rejectUnstorable(step.value, `${at}/value`, errors);
      return;
    }
    case 'remove':
      return checkPaths(step.paths, `${at}/paths`, 'write', errors);
    case 'rename_property':
      checkPath(step.from, `${at}/from`, 'write', errors);
      checkPath(step.to, `${at}/to`, 'write', errors);
      return;
    case 'mask':
      checkPaths(step.paths, `${at}/paths`, 'mask', errors);
      oneOf(step.with, ['redact', 'hash'], `${at}/with`, errors);
      return;
    case 'allow_properties':
      return checkPaths(step.paths, `${at}/paths`, 'allow', errors);
    case 'user_agent':
    case 'geoip':
      if (kind === 'geoip' && !options.geoip)
        errors.push({
          pointer: `${at}/kind`,
          message: 'a geoip step needs a MaxMind database: set INLET_GEOIP_DATABASE on the server',
        });
      step.from ??= kind === 'geoip' ? 'context.ip' : 'context.userAgent';
      step.to ??= kind === 'geoip' ? 'context.geo' : 'context.user_agent';
      checkPath(step.from, `${at}/from`, 'read', errors);
      checkPath(step.to, `${at}/to`, 'write', errors);
      return;
    case 'bot':
      step.from ??= 'context.userAgent';
      step.action ??= 'flag';
      checkPath(step.from, `${at}/from`, 'read', errors);
      oneOf(step.action, ['flag', 'drop'], `${at}/action`, errors);
      return;
    case 'function':
      if (typeof step.code !== 'string' || step.code.trim() === '')
        errors.push({ pointer: `${at}/code`, message: 'must be the source of function transform(event, meta)' });
      else if (Buffer.byteLength(step.code) > MAX_FUNCTION_BYTES)
        errors.push({ pointer: `${at}/code`, message: `must be at most ${MAX_FUNCTION_BYTES} bytes` });
      return;
  }
}

function checkStep(input: unknown, at: string, options: ValidateOptions, errors: FieldError[]): Step | undefined {
  if (!isObject(input)) {
    errors.push({ pointer: at, message: 'a step must be an object' });
    return undefined;
  }
  if (!(STEP_KINDS as readonly unknown[]).includes(input.kind)) {
    errors.push({ pointer: `${at}/kind`, message: `must be one of ${STEP_KINDS.join(', ')}` });
    return undefined;
  }
  const kind = input.kind as StepKind;
  const before = errors.length;
  for (const key of Object.keys(input))
    if (!COMMON.includes(key) && !FIELDS[kind].includes(key))
      errors.push({ pointer: `${at}/${key}`, message: `is not a field of a ${kind} step` });
  const step: Record<string, unknown> = { ...input };
  step.on_error ??= 'reject';
  oneOf(step.on_error, ['reject', 'skip'], `${at}/on_error`, errors);
  if (Object.hasOwn(input, 'where')) errors.push(...conditionProblems(input.where, `${at}/where`));
  checkKindFields(step, at, options, errors);
  return errors.length === before ? (step as unknown as Step) : undefined;
}

/** The steps of a `{ "steps": [..] }` body, defaults filled in; or every problem found, with pointers. */
export function parseSteps(body: unknown, options: ValidateOptions, base = ''): StepsResult {
  if (!isObject(body)) return { ok: false, errors: [{ pointer: base, message: 'must be an object with "steps"' }] };
  const errors: FieldError[] = [];
  for (const key of Object.keys(body))
    if (key !== 'steps') errors.push({ pointer: `${base}/${key}`, message: 'is not a field of a transformation' });
  const input = body.steps;
  if (!Array.isArray(input)) {
    errors.push({ pointer: `${base}/steps`, message: 'must be an array of steps' });
    return { ok: false, errors };
  }
  if (input.length > MAX_STEPS) {
    errors.push({ pointer: `${base}/steps`, message: `must have at most ${MAX_STEPS} steps` });
    return { ok: false, errors };
  }
  const steps: Step[] = [];
  input.forEach((item, i) => {
    const step = checkStep(item, `${base}/steps/${i}`, options, errors);
    if (step !== undefined) steps.push(step);
  });
  return errors.length === 0 ? { ok: true, steps } : { ok: false, errors };
}
