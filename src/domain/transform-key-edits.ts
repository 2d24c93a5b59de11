// Consecutive `remove` and `rename_property` steps on the keys of one object of the document (`properties.debug`,
// then `properties.amt` to `properties.amount`): each step alone replaces that object by a copy (removePath,
// movePath), so that it keeps a fast shape. A run of them is applied to one list of the object's keys and then
// copied once, with each step's outcome what it would have been alone. Neither kind can fail on such paths, so the
// run has nothing to leave half-done; a step with a `where` or `on_error: "skip"` is never part of one.
import type { Step } from './transform-types.js';

type Edit = { remove: readonly string[] } | { from: string; to: string };

/** Steps `first` to `last` (at least two), all on keys of the document's field `field`. */
export interface KeyEditRun {
  first: number;
  last: number;
  field: string;
  edits: readonly Edit[];
}

/** The edit of one step when it is a remove or rename of keys right under one top-level field; else undefined. */
function editOf(step: Step): { field: string; edit: Edit } | undefined {
  if (step.where !== undefined || step.on_error === 'skip') return undefined;
  if (step.kind === 'remove') {
    let field: string | undefined;
    const keys: string[] = [];
    for (const path of step.paths) {
      const segments = path.split('.');
      if (segments.length !== 2 || (field !== undefined && segments[0] !== field)) return undefined;
      field = segments[0]!;
      keys.push(segments[1]!);
    }
    return field === undefined ? undefined : { field, edit: { remove: keys } };
  }
  if (step.kind === 'rename_property') {
    const from = step.from.split('.');
    const to = step.to.split('.');
    if (from.length !== 2 || to.length !== 2 || from[0] !== to[0]) return undefined;
    return { field: from[0]!, edit: { from: from[1]!, to: to[1]! } };
  }
  return undefined;
}

function runsOf(steps: readonly Step[]): ReadonlyArray<KeyEditRun | undefined> {
  const byFirst: Array<KeyEditRun | undefined> = new Array(steps.length).fill(undefined);
  let index = 0;
  while (index < steps.length) {
    const head = editOf(steps[index]!);
    if (head === undefined) {
      index++;
      continue;
    }
    const edits: Edit[] = [head.edit];
    let next = index + 1;
    for (; next < steps.length; next++) {
      const more = editOf(steps[next]!);
      if (more === undefined || more.field !== head.field) break;
      edits.push(more.edit);
    }
    if (edits.length > 1) byFirst[index] = { first: index, last: next - 1, field: head.field, edits };
    index = next;
  }
  return byFirst;
}

/** The runs of a version's steps, by their first step's index; found once per steps array. */
const plans = new WeakMap<readonly Step[], ReadonlyArray<KeyEditRun | undefined>>();

export function keyEditRuns(steps: readonly Step[]): ReadonlyArray<KeyEditRun | undefined> {
  let plan = plans.get(steps);
  if (plan === undefined) {
    plan = runsOf(steps);
    plans.set(steps, plan);
  }
  return plan;
}

/** `array.splice(at, 1)` without the array of what it removed. */
function removeAt(array: unknown[], at: number): void {
  for (let i = at; i < array.length - 1; i++) array[i] = array[i + 1];
  array.length--;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Applies a run to `document` (its field replaced by one copy when any step changed it; the object it held is
 * left as it was) and writes each step's outcome into `changed`, by its position in the run.
 */
export function applyKeyEdits(document: Record<string, unknown>, run: KeyEditRun, changed: boolean[]): void {
  const object = Object.hasOwn(document, run.field) ? document[run.field] : undefined;
  // The keys and values as the steps so far left them; made at the first step that changes something.
  let keys: string[] | undefined;
  let values: unknown[] | undefined;
  const { edits } = run;
  for (let i = 0; i < edits.length; i++) {
    changed[i] = false;
    if (!isObject(object)) continue;
    const edit = edits[i]!;
    if ('remove' in edit) {
      for (const key of edit.remove) {
        if (keys === undefined) {
          if (!Object.hasOwn(object, key)) continue;
          keys = Object.keys(object);
          values = keys.map((name) => object[name]);
        }
        const at = keys.indexOf(key);
        if (at < 0) continue;
        removeAt(keys, at);
        removeAt(values!, at);
        changed[i] = true;
      }
      continue;
    }
    // rename_property: nothing to move when `from` is absent or is `to` (movePath's order otherwise).
    let from: number;
    if (keys === undefined) {
      if (!Object.hasOwn(object, edit.from) || object[edit.from] === undefined || edit.from === edit.to) continue;
      keys = Object.keys(object);
      values = keys.map((name) => object[name]);
      from = keys.indexOf(edit.from);
    } else {
      from = keys.indexOf(edit.from);
      if (from < 0 || values![from] === undefined || edit.from === edit.to) continue;
    }
    const value = values![from];
    removeAt(keys, from);
    removeAt(values!, from);
    const to = keys.indexOf(edit.to);
    if (to >= 0) values![to] = value;
    else {
      keys.push(edit.to);
      values!.push(value);
    }
    changed[i] = true;
  }
  if (keys === undefined) return;
  const out: Record<string, unknown> = {};
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    // An own `__proto__` key (JSON.parse makes one) must stay data, not become the copy's prototype.
    if (key === '__proto__')
      Object.defineProperty(out, key, { value: values![i], enumerable: true, writable: true, configurable: true });
    else out[key] = values![i];
  }
  document[run.field] = out;
}
