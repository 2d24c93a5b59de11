// Product transformations (transformations.md §3–6): versions stored per product, each prepared once
// (steps validated, functions compiled) and cached per instance like tracking plans (version-cache.ts): a warm
// version answers at once, another instance's new version applies here within `refreshMs` plus one query, and
// a PUT on this instance applies at once here. A stored version always applies, also when this instance cannot
// run some of its steps: those fail as step errors (stored-steps.ts), logged here and gauged (metrics.ts).
import { randomBytes } from 'node:crypto';
import { validationError, type FieldError } from '../../domain/errors.js';
import { parseSteps } from '../../domain/transform-validate.js';
import type { Step } from '../../domain/transform-types.js';
import type { Storage, TransformationVersion } from '../../storage/types.js';
import type { Metrics } from '../metrics.js';
import { VersionCache } from '../version-cache.js';
import { createTransformMetrics, type TransformMetrics } from './metrics.js';
import { compileFailure, unavailableKind, type TransformRuntime } from './runtime.js';
import { prepareStoredSteps, type UnavailableStep } from './stored-steps.js';
import { uuidv7 } from '../../domain/ids.js';
import { checkDocumentSize } from '../../domain/transform-document.js';
import { SEGMENT_LIMITS, SEGMENT_SOURCE } from '../../domain/segment.js';
import { applyStepsToBatch, type HashCache, type TransformResult } from '../../domain/transform-engine.js';
import { TRAITS_MAX_BYTES } from '../../domain/identity.js';
import type {
  Enrichers,
  FunctionMeta,
  RunnableFunction,
  StepKind,
  TransformDocument,
} from '../../domain/transform-types.js';

/** An item to try: the document its route would make of it (or its stored form makes), and its message id. */
export interface TestItem {
  document: TransformDocument;
  /** The idempotency key, or a stored event's id (`sample` by `message_id`); absent: a fresh id. */
  messageId?: string;
}

export interface TestResult {
  input: TransformDocument;
  output: TransformDocument | null;
  dropped_by?: number;
  error?: { step: number; message: string };
  trace: Array<{ step: number; changed: string[] }>;
}

export interface TransformationOptions {
  /** How old a cached version may get before this instance asks storage for a newer one. */
  refreshMs: number;
  /** Whether INLET_GEOIP_DATABASE is set (a geoip step is refused without it). */
  geoip: boolean;
  /** INLET_MAX_EVENT_BYTES: what a test run holds a native item's result to, as ingest does (a Segment item: 32 KiB). */
  maxEventBytes?: number;
  now?: () => number;
  /** Where a version this instance cannot fully run is reported (the server's log). */
  log?: TransformationLog;
}

export interface TransformationLog {
  error(details: object, message: string): void;
}

/** A version ready to run: its steps, the compiled function of each `function` step, the product's secret. */
export interface PreparedTransformation {
  version: number;
  steps: Step[];
  functions: Array<PreparedFunction | undefined>;
  /** The modules its steps call (the runtime's, or stand-ins that fail for the steps listed in `unavailable`). */
  enrichers: Enrichers;
  secret: string;
  /** `mask` `hash` results of this version's secret, by value (the engine bounds it). */
  hashCache: HashCache;
  /** Steps this instance cannot run: each fails as a step error wherever it would run (stored-steps.ts). */
  unavailable: UnavailableStep[];
}

/** A compiled function as the service holds it: run by the engine, freed when its version is replaced. */
export type PreparedFunction = RunnableFunction & { dispose(): void };

type Prepare =
  { ok: true; steps: Step[]; functions: Array<PreparedFunction | undefined> } | { ok: false; errors: FieldError[] };

/** Validates the body and compiles its functions; every problem with a pointer into the body. */
export async function prepareSteps(
  body: unknown,
  runtime: TransformRuntime,
  geoip: boolean,
  base = '',
): Promise<Prepare> {
  const parsed = parseSteps(body, { geoip }, base);
  if (!parsed.ok) return parsed;
  const errors: FieldError[] = [];
  const functions: Array<PreparedFunction | undefined> = [];
  for (const [index, step] of parsed.steps.entries()) {
    const missing = unavailableKind(step.kind, runtime);
    if (missing !== undefined) {
      errors.push({ pointer: `${base}/steps/${index}/kind`, message: missing });
      continue;
    }
    if (step.kind !== 'function') continue;
    const compiled = await runtime.functions!.compile(step.code);
    if (compiled.ok) functions[index] = compiled.fn;
    else
      errors.push({
        pointer: `${base}/steps/${index}/code`,
        message: compileFailure(compiled),
      });
  }
  if (errors.length === 0) return { ok: true, steps: parsed.steps, functions };
  disposeAll(functions);
  return { ok: false, errors };
}

function disposeAll(functions: ReadonlyArray<PreparedFunction | undefined>): void {
  for (const fn of functions) fn?.dispose();
}

/** A replaced version's functions are freed a while later: a request that took it may still be running them. */
const DISPOSE_AFTER_MS = 60_000;

function disposeLater(prepared: PreparedTransformation | undefined): void {
  if (prepared === undefined || prepared.functions.every((fn) => fn === undefined)) return;
  setTimeout(() => disposeAll(prepared.functions), DISPOSE_AFTER_MS).unref();
}

function testResult(input: TransformDocument, result: TransformResult): TestResult {
  const trace = result.trace ?? [];
  if (result.outcome === 'dropped') return { input, output: null, dropped_by: result.droppedBy!, trace };
  if (result.outcome === 'error') {
    const { step, message } = result.error!;
    return { input, output: null, error: { step, message }, trace };
  }
  return { input, output: result.document, trace };
}

/** A native identify's traits through the product's steps, as an identify document; metrics counted as for events. */
async function applyToIdentify(
  prepared: PreparedTransformation,
  transformMetrics: TransformMetrics,
  input: {
    productId: string;
    keyId: string | null;
    externalId: string;
    traits: Record<string, unknown>;
    receivedAt: string;
    route: string;
  },
): Promise<TransformResult> {
  const document: TransformDocument = {
    type: 'identify',
    event: 'user_identified',
    event_type: 'user',
    action: 'identified',
    subject_type: 'user',
    subject_id: input.externalId,
    occurred_at: input.receivedAt,
    properties: {},
    traits: input.traits,
    context: {},
    source: 'api',
  };
  const cpu = new Map<StepKind, number>();
  const [result] = await applyStepsToBatch([document], prepared.steps, [
    {
      secret: prepared.secret,
      hashCache: prepared.hashCache,
      messageId: uuidv7(),
      meta: { product_id: input.productId, key_id: input.keyId, route: input.route },
      enrichers: prepared.enrichers,
      functions: prepared.functions,
      cpu,
    },
  ]);
  // Checked again like input (transformations.md §1): a step may grow the traits past what an identify may hold.
  if (result!.outcome === 'kept') checkDocumentSize(result!, TRAITS_MAX_BYTES, prepared.steps);
  transformMetrics.count(input.productId, [result!], cpu);
  return result!;
}

/** Test items through prepared steps (none: each comes out as it went in), with their traces; nothing stored. */
async function testItems(
  prepared: PreparedTransformation | undefined,
  items: TestItem[],
  meta: FunctionMeta,
  maxEventBytes: number | undefined,
): Promise<TestResult[]> {
  const inputs = items.map((item) => item.document);
  if (prepared === undefined) return inputs.map((input) => ({ input, output: input, trace: [] }));
  const { secret, functions, enrichers } = prepared;
  const results = await applyStepsToBatch(
    inputs,
    prepared.steps,
    items.map((item) => ({
      secret,
      messageId: item.messageId ?? uuidv7(),
      meta,
      enrichers,
      functions,
      trace: true,
    })),
  );
  // The result is checked again like input, its size included, as ingest checks it (transformations.md §1).
  results.forEach((result, i) => {
    const limit = inputs[i]!.source === SEGMENT_SOURCE ? SEGMENT_LIMITS.itemBytes : maxEventBytes;
    if (result.outcome === 'kept' && limit !== undefined) checkDocumentSize(result, limit, prepared.steps);
  });
  return results.map((result, i) => testResult(inputs[i]!, result));
}

export function createTransformationService(
  storage: Storage,
  metrics: Metrics,
  runtime: TransformRuntime,
  options: TransformationOptions,
) {
  const clock = options.now ?? Date.now;
  const transformMetrics: TransformMetrics = createTransformMetrics(metrics.registry, () => cache.held());
  const makeSecret = () => randomBytes(32).toString('hex');

  /** What was last logged of each product's version that cannot fully run here (logged again when it changes). */
  const reported = new Map<string, string>();

  /** Logs the steps of a version this instance cannot run, once per product and set of reasons. */
  function report(productId: string, prepared: PreparedTransformation): void {
    if (prepared.unavailable.length === 0) {
      reported.delete(productId);
      return;
    }
    const text = JSON.stringify([prepared.version, prepared.unavailable]);
    if (reported.get(productId) === text) return;
    reported.set(productId, text);
    for (const { step, kind, reason } of prepared.unavailable)
      options.log?.error(
        { product_id: productId, version: prepared.version, step, kind, reason },
        'a transformation step cannot run on this instance: it fails as a step error (on_error decides)',
      );
  }

  /** Steps validated and compiled on this instance (a PUT's, a test's): every one of them runs here. */
  function readyHere(
    version: number,
    checked: { steps: Step[]; functions: Array<PreparedFunction | undefined> },
    secret: string,
  ): PreparedTransformation {
    const { steps, functions } = checked;
    return { version, steps, functions, enrichers: runtime.enrichers, secret, hashCache: new Map(), unavailable: [] };
  }

  /** A stored version made ready here: it always applies, its steps this instance cannot run failing in place. */
  async function prepareStored(productId: string, stored: TransformationVersion): Promise<PreparedTransformation> {
    const ready = await prepareStoredSteps(stored.steps, runtime);
    let secret: string;
    try {
      secret = await storage.transformations.secret(productId, makeSecret);
    } catch (error) {
      disposeAll(ready.functions);
      throw error;
    }
    const prepared: PreparedTransformation = { version: stored.version, ...ready, secret, hashCache: new Map() };
    report(productId, prepared);
    return prepared;
  }

  const cache = new VersionCache<PreparedTransformation>(
    {
      currentVersion: (productId) => storage.transformations.currentVersion(productId),
      async load(productId) {
        const stored = await storage.transformations.current(productId);
        return stored === undefined ? undefined : prepareStored(productId, stored);
      },
      retry: (prepared) => prepared.unavailable.some((step) => step.retry),
      replaced: disposeLater,
    },
    options.refreshMs,
    clock,
  );

  return {
    metrics: transformMetrics,

    /** Frees the sandbox's thread (the service's close). */
    close: () => runtime.functions?.close() ?? Promise.resolve(),

    /** The prepared version of a product (undefined: none): at once when this instance holds it (version-cache.ts). */
    preparedFor(productId: string): PreparedTransformation | undefined | Promise<PreparedTransformation | undefined> {
      return cache.get(productId);
    },

    get(productId: string): Promise<TransformationVersion | undefined> {
      return storage.transformations.current(productId);
    },

    versions(productId: string): Promise<TransformationVersion[]> {
      return storage.transformations.list(productId);
    },

    /** Stores a new version after validating and compiling it; an invalid one is a 400 with pointers into the body. */
    async put(productId: string, body: unknown): Promise<TransformationVersion> {
      const prepared = await prepareSteps(body, runtime, options.geoip);
      if (!prepared.ok) throw validationError(prepared.errors);
      const secret = await storage.transformations.secret(productId, makeSecret);
      const stored = await storage.transformations.put(productId, prepared.steps, new Date(clock()).toISOString());
      const ready = readyHere(stored.version, prepared, secret);
      report(productId, ready);
      cache.set(productId, ready);
      return stored;
    },

    /**
     * The product's transformation on a native identify's traits (`/api/v2/identify`, transformations.md §1): the
     * document of an identify item; undefined when the product has none. Metrics are counted as for events.
     */
    async applyToIdentify(
      productId: string,
      keyId: string | null,
      input: { externalId: string; traits: Record<string, unknown>; receivedAt: string; route: string },
    ): Promise<TransformResult | undefined> {
      const prepared = await this.preparedFor(productId);
      if (prepared === undefined || prepared.steps.length === 0) return undefined;
      return applyToIdentify(prepared, transformMetrics, { productId, keyId, ...input });
    },

    /**
     * Runs steps on items without storing anything (transformations.md §6): the given steps, validated like a
     * PUT, or the current version. Each item's input document, output (null when dropped or failed) and trace.
     */
    async test(productId: string, steps: unknown, items: TestItem[], meta: FunctionMeta): Promise<TestResult[]> {
      let prepared: PreparedTransformation | undefined;
      let own = false;
      if (steps === undefined) prepared = await this.preparedFor(productId);
      else {
        const checked = await prepareSteps({ steps }, runtime, options.geoip);
        if (!checked.ok) throw validationError(checked.errors);
        const secret = await storage.transformations.secret(productId, makeSecret);
        prepared = readyHere(0, checked, secret);
        own = true;
      }
      try {
        return await testItems(prepared, items, meta, options.maxEventBytes);
      } finally {
        if (own && prepared !== undefined) disposeAll(prepared.functions);
      }
    },
  };
}

export type TransformationService = ReturnType<typeof createTransformationService>;
