// Tracking plans (governance.md §2): the plan document, compiling it once per version with Ajv
// (JSON Schema 2020-12), checking one item against it, and drafting a plan from the catalogue.
// Pure: no I/O and no clock. Messages and pointers never carry a property value.
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { FieldError } from './errors.js';

// ajv-formats is CommonJS: under NodeNext its default import is the module object, whose `default` is the plugin.
const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ??
  addFormatsModule) as unknown as (ajv: Ajv2020) => Ajv2020;

export const PLAN_MODES = ['off', 'warn', 'enforce'] as const;
export const UNPLANNED_RULES = ['allow', 'warn', 'reject'] as const;
export type PlanMode = (typeof PLAN_MODES)[number];
export type UnplannedRule = (typeof UNPLANNED_RULES)[number];

export interface TrackingPlan {
  mode: PlanMode;
  unplanned?: UnplannedRule;
  events?: Record<string, { properties: unknown; mode?: PlanMode }>;
  traits?: unknown;
}

/** At most this many errors per item are answered and recorded: a hostile item cannot make a huge answer. */
export const MAX_ITEM_ERRORS = 20;

/** The shape of the plan document itself, checked before its schemas are compiled. */
const PLAN_DOCUMENT_SCHEMA = {
  type: 'object',
  required: ['mode'],
  additionalProperties: false,
  properties: {
    mode: { enum: [...PLAN_MODES] },
    unplanned: { enum: [...UNPLANNED_RULES] },
    events: {
      type: 'object',
      propertyNames: { minLength: 1, maxLength: 256 },
      additionalProperties: {
        type: 'object',
        required: ['properties'],
        additionalProperties: false,
        properties: { properties: { type: ['object', 'boolean'] }, mode: { enum: [...PLAN_MODES] } },
      },
    },
    traits: { type: ['object', 'boolean'] },
  },
} as const;

/**
 * An Ajv instance. `checksSchemas` false: `compile` does not validate the schema against the 2020-12 meta-schema
 * itself (the caller did, with `schemaChecker`). Compiling that meta-schema is most of what a new instance
 * costs: `compilePlan` of a one-event plan took 84 ms with it and 2.5 ms without (2026-11-27, 30 runs each).
 */
function newAjv(checksSchemas = true): Ajv2020 {
  // strict: an unknown keyword (a typo such as "requierd") is refused at PUT instead of silently ignored.
  const ajv = new Ajv2020({
    allErrors: true,
    strict: true,
    strictTypes: false,
    strictTuples: false,
    strictRequired: false,
    logger: false,
    validateSchema: checksSchemas,
  });
  addFormats(ajv);
  return ajv;
}

const documentCheck = newAjv().compile(PLAN_DOCUMENT_SCHEMA);
/** Checks schemas against the meta-schema, compiled once per process; plans compile in instances of their own. */
const schemaChecker = newAjv();

export function escapePointerToken(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** An Ajv error as a pointer relative to the validated value: missing and extra properties point at the property itself. */
function ajvPointer(error: ErrorObject): string {
  const params = error.params as {
    missingProperty?: string;
    additionalProperty?: string;
    unevaluatedProperty?: string;
  };
  const extra = params.missingProperty ?? params.additionalProperty ?? params.unevaluatedProperty;
  return extra === undefined ? error.instancePath : `${error.instancePath}/${escapePointerToken(extra)}`;
}

function ajvMessage(error: ErrorObject): string {
  if (error.keyword === 'required') return 'is required by the tracking plan';
  if (error.keyword === 'additionalProperties' || error.keyword === 'unevaluatedProperties')
    return 'is not in the tracking plan';
  return error.message ?? `fails ${error.keyword}`;
}

export interface CompiledPlan {
  version: number;
  plan: TrackingPlan;
  mode: PlanMode;
  unplanned: UnplannedRule;
  events: Map<string, { validate: ValidateFunction; mode: PlanMode }>;
  traits: ValidateFunction | undefined;
}

export type CompileResult = { ok: true; plan: CompiledPlan } | { ok: false; errors: FieldError[] };

/** Checks the document and compiles every schema in it (one Ajv instance per plan version); errors point into the plan. */
export function compilePlan(document: unknown, version: number): CompileResult {
  if (!documentCheck(document)) {
    return {
      ok: false,
      errors: (documentCheck.errors ?? [])
        .slice(0, MAX_ITEM_ERRORS)
        .map((e) => ({ pointer: ajvPointer(e), message: e.message ?? e.keyword })),
    };
  }
  const plan = document as unknown as TrackingPlan;
  const ajv = newAjv(false);
  const errors: FieldError[] = [];
  const compileAt = (schema: unknown, pointer: string): ValidateFunction | undefined => {
    if (!schemaChecker.validateSchema(schema as object)) {
      for (const e of schemaChecker.errors ?? [])
        errors.push({
          pointer: `${pointer}${e.instancePath}`,
          message: `not a valid JSON Schema 2020-12: ${e.message ?? e.keyword}`,
        });
      return undefined;
    }
    try {
      return ajv.compile(schema as object);
    } catch (error) {
      errors.push({ pointer, message: `cannot be compiled: ${(error as Error).message}` });
      return undefined;
    }
  };
  const events = new Map<string, { validate: ValidateFunction; mode: PlanMode }>();
  for (const [name, entry] of Object.entries(plan.events ?? {})) {
    const validate = compileAt(entry.properties, `/events/${escapePointerToken(name)}/properties`);
    if (validate !== undefined) events.set(name, { validate, mode: entry.mode ?? plan.mode });
  }
  const traits = plan.traits === undefined ? undefined : compileAt(plan.traits, '/traits');
  if (errors.length > 0) return { ok: false, errors: errors.slice(0, MAX_ITEM_ERRORS) };
  return { ok: true, plan: { version, plan, mode: plan.mode, unplanned: plan.unplanned ?? 'allow', events, traits } };
}

/** What the plan says of one item: nothing, a warning, or a refusal. Pointers are relative to the checked object. */
export interface PlanFinding {
  code: 'tracking_plan_violation' | 'unplanned_event';
  severity: 'warning' | 'rejected';
  errors: FieldError[];
}

/** Checks an event's properties against its name's schema, or the `unplanned` rule when the plan does not name it. */
export function checkEvent(
  plan: CompiledPlan,
  canonicalName: string,
  properties: Record<string, unknown>,
): PlanFinding | undefined {
  if (plan.mode === 'off') return undefined;
  const entry = plan.events.get(canonicalName);
  if (entry === undefined) {
    if (plan.unplanned === 'allow') return undefined;
    return {
      code: 'unplanned_event',
      severity: plan.unplanned === 'reject' ? 'rejected' : 'warning',
      errors: [{ pointer: '', message: `the event "${canonicalName}" is not in the tracking plan` }],
    };
  }
  if (entry.mode === 'off' || entry.validate(properties)) return undefined;
  return {
    code: 'tracking_plan_violation',
    severity: entry.mode === 'enforce' ? 'rejected' : 'warning',
    errors: findings(entry.validate.errors),
  };
}

/** Checks identify traits against the plan's `traits` schema (none: nothing to check). */
export function checkTraits(plan: CompiledPlan, traits: Record<string, unknown>): PlanFinding | undefined {
  if (plan.mode === 'off' || plan.traits === undefined || plan.traits(traits)) return undefined;
  return {
    code: 'tracking_plan_violation',
    severity: plan.mode === 'enforce' ? 'rejected' : 'warning',
    errors: findings(plan.traits.errors),
  };
}

function findings(errors: ErrorObject[] | null | undefined): FieldError[] {
  return (errors ?? []).slice(0, MAX_ITEM_ERRORS).map((e) => ({ pointer: ajvPointer(e), message: ajvMessage(e) }));
}

// Drafting a plan from the catalogue.

export interface ObservedPath {
  path: string;
  types: Partial<Record<string, number>>;
}

export interface ObservedEvent {
  canonicalName: string;
  count: number;
  properties: ObservedPath[];
}

type Schema = { type?: string | string[]; properties?: Record<string, Schema>; required?: string[] };

function typeOf(types: Partial<Record<string, number>>): string | string[] {
  const seen = Object.keys(types).filter((t) => (types[t] ?? 0) > 0);
  // An integer is a number: a name seen with both is a number.
  const list = seen.includes('number') ? seen.filter((t) => t !== 'integer') : seen;
  list.sort();
  return list.length === 1 ? list[0]! : list;
}

/**
 * An object schema from dotted paths (`a`, `a.b`): each path typed as observed, `required` listing the
 * properties seen as often as their parent (the event itself at the top, the parent's object occurrences below).
 */
export function schemaFromPaths(paths: ObservedPath[], total: number, withRequired: boolean): Schema {
  const root: Schema = { type: 'object', properties: {} };
  const counts = new Map<string, number>([['', total]]);
  const sorted = [...paths].sort(
    (a, b) => a.path.split('.').length - b.path.split('.').length || a.path.localeCompare(b.path),
  );
  const nodes = new Map<string, Schema>([['', root]]);
  for (const { path, types } of sorted) {
    const cut = path.lastIndexOf('.');
    const parentPath = cut < 0 ? '' : path.slice(0, cut);
    const key = cut < 0 ? path : path.slice(cut + 1);
    const parent = nodes.get(parentPath);
    if (parent === undefined) continue; // its parent was never seen as an object: not expressible
    const schema: Schema = { type: typeOf(types) };
    const seenAsObject = types.object ?? 0;
    if (seenAsObject > 0) nodes.set(path, schema);
    parent.properties ??= {};
    parent.properties[key] = schema;
    counts.set(path, seenAsObject);
    const present = Object.values(types).reduce((sum: number, n) => sum + (n ?? 0), 0);
    const parentCount = counts.get(parentPath) ?? 0;
    if (withRequired && parentCount > 0 && present >= parentCount) (parent.required ??= []).push(key);
  }
  return root;
}

/** A plan in mode `off` whose schemas hold the observed types, for review; never applied by itself. */
export function draftPlan(events: ObservedEvent[], traits: ObservedPath[]): TrackingPlan {
  const plan: TrackingPlan = { mode: 'off', unplanned: 'allow', events: {} };
  for (const event of events)
    plan.events![event.canonicalName] = { properties: schemaFromPaths(event.properties, event.count, true) };
  // Identify traits are patches (each call sends some of them): nothing is required.
  if (traits.length > 0) plan.traits = schemaFromPaths(traits, 0, false);
  return plan;
}
