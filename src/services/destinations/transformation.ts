// A destination's own transformation (transformations.md §1, §8): the same steps as a product's, given in the
// destination's POST and PATCH, applied by the deliverer to that destination's copy of each message only. The
// stored event is turned back into the document steps see (§2); what the steps leave is what the destination
// receives. A dropped message, and one whose step fails with `on_error: "reject"`, is not sent to it: the cursor
// passes it like a message the filter does not want, and a failure is counted and shown on the destination
// (its warnings). Identity messages: `user.identified` and `user.merged` go through the steps as an identify
// document of their user's traits (domain/transform-document.ts, domain/transform-stored.ts); `user.erased` always passes unchanged, since no
// destination may be kept from an erasure notice.
// Steps are prepared (validated, functions compiled in the sandbox) once per destination and version of its
// steps, not per message; a function step gets a cycle's messages in one call.
import { validationError } from '../../domain/errors.js';
import {
  applyStepsToEach,
  applyStepsToBatch,
  type HashCache,
  type RunContext,
  type TransformResult,
} from '../../domain/transform-engine.js';
import { documentOfUser, eventPartsOf, userAfter } from '../../domain/transform-stored.js';
import { documentFrom, originalAfter, type DocumentParts } from '../../domain/transform-document.js';
import type { Step, StepKind, TransformDocument } from '../../domain/transform-types.js';
import type {
  DestinationRecord,
  DestinationTransformation,
  EventRecord,
  IdentityMessageData,
  StoredMessage,
  UserRecord,
} from '../../storage/types.js';
import type { TransformRuntime } from '../transformations/runtime.js';
import { prepareSteps, type PreparedFunction } from '../transformations/service.js';
import type { TransformFigures } from './metrics.js';

/** What the deliverers need to run destinations' steps (services.ts and the delivery worker build it). */
export interface DestinationTransformOptions {
  runtime: TransformRuntime;
  /** Whether INLET_GEOIP_DATABASE is set (a geoip step is refused without it). */
  geoip: boolean;
  /** The product's transformation secret (`mask` `hash`: the same hashes as the product's own steps). */
  secret(productId: string): Promise<string>;
}

/** Where a transformer reports what its steps did. */
export interface TransformReport {
  /** Items per step and outcome, CPU per step kind (`inlet_destination_transformation_*`). */
  counted(destinationId: string, figures: TransformFigures): void;
  /** Messages not sent, or steps skipped, because a step failed: one line per step and message. */
  failed(destinationId: string, warnings: string[]): void;
}

/** A stored transformation that cannot run on this instance (a module it needs is absent): delivery waits. */
export class TransformationUnavailable extends Error {}

interface Prepared {
  /** The steps' JSON: a change of them prepares them again. */
  key: string;
  steps: Step[];
  functions: Array<PreparedFunction | undefined>;
  secret: string;
  hashCache: HashCache;
}

/** The message after the steps, or why it is not sent. */
type Outcome = { message: StoredMessage } | { skipped: 'dropped' | 'error' };

/** The most warning lines one cycle adds to a destination. */
const WARNINGS_PER_CYCLE = 5;

function disposeAll(functions: ReadonlyArray<PreparedFunction | undefined>): void {
  for (const fn of functions) fn?.dispose();
}

function parsed(text: string | null | undefined): Record<string, unknown> | null {
  return text == null ? null : (JSON.parse(text) as Record<string, unknown>);
}

/** An event's JSON values, whether it was read with them as text (deliveries) or parsed. */
function partsOf(event: EventRecord): DocumentParts {
  const text = event.jsonText;
  return {
    canonicalName: event.canonicalName,
    eventType: event.eventType,
    action: event.action,
    subjectType: event.subjectType,
    subjectId: event.subjectId,
    occurredAt: event.occurredAt,
    source: event.source,
    properties: text === undefined ? event.properties : (parsed(text.properties) ?? {}),
    context: text === undefined ? (event.context ?? null) : parsed(text.context),
    original: text === undefined ? (event.original ?? null) : parsed(text.original),
  };
}

/** The event a kept document makes, in the form it was read in (JSON text stays text). */
function eventAfter(event: EventRecord, hadContext: boolean, document: TransformDocument): EventRecord {
  const parts = eventPartsOf(document, hadContext);
  const next: EventRecord = {
    ...event,
    canonicalName: parts.canonicalName,
    eventType: parts.eventType,
    action: parts.action,
    subjectType: parts.subjectType,
    subjectId: parts.subjectId,
    occurredAt: parts.occurredAt,
  };
  if (event.jsonText === undefined) {
    next.properties = parts.properties;
    next.context = parts.context;
    next.original = originalAfter(event.original, event.subjectId, parts.subjectId) ?? null;
  } else {
    const original = event.jsonText.original;
    next.jsonText = {
      properties: JSON.stringify(parts.properties),
      context: parts.context === null ? null : JSON.stringify(parts.context),
      original:
        original == null || event.subjectId === parts.subjectId
          ? original
          : JSON.stringify(originalAfter(parsed(original), event.subjectId, parts.subjectId)),
    };
  }
  return next;
}

type IdentityMessage = Extract<StoredMessage, { kind: 'identity' }>;

function userOf(message: IdentityMessage): UserRecord | undefined {
  if (message.type === 'user.erased') return undefined;
  return (message.data as { user: UserRecord }).user;
}

/** One message as a document for the steps, or undefined when it passes unchanged (an erasure notice). */
function documentOf(message: StoredMessage): TransformDocument | undefined {
  if (message.kind === 'event') return documentFrom(partsOf(message.event));
  const user = userOf(message);
  if (user === undefined) return undefined;
  return documentOfUser(message.type as 'user.identified' | 'user.merged', user, message.createdAt);
}

/**
 * The message a kept document makes: a new object (never the one read, which the product's other destinations
 * share, with its wire form kept on it: pages.ts); the one read when no step changed anything.
 */
function messageAfter(message: StoredMessage, result: TransformResult): StoredMessage {
  if (result.outcomes.every((outcome) => outcome === 'unchanged')) return message;
  if (message.kind === 'event') {
    const hadContext =
      message.event.jsonText === undefined ? message.event.context != null : message.event.jsonText.context !== null;
    return { kind: 'event', position: message.position, event: eventAfter(message.event, hadContext, result.document) };
  }
  const user = userOf(message)!;
  const after = userAfter(user, result.document);
  const data = {
    ...message.data,
    user: { ...user, traits: after.traits, identifiers: after.identifiers },
  } as IdentityMessageData;
  return {
    kind: 'identity',
    position: message.position,
    id: message.id,
    type: message.type,
    createdAt: message.createdAt,
    data,
  };
}

function idOf(message: StoredMessage): string {
  return message.kind === 'event' ? (message.event.externalId ?? message.event.id) : message.id;
}

function tallyOf(results: readonly TransformResult[]): TransformFigures['steps'] {
  const tally = new Map<string, number>();
  for (const result of results)
    result.outcomes.forEach((outcome, step) => {
      const key = `${step}\u0000${outcome}`;
      tally.set(key, (tally.get(key) ?? 0) + 1);
    });
  return [...tally].map(([key, count]) => {
    const [step, outcome] = key.split('\u0000') as [string, string];
    return [Number(step), outcome, count];
  });
}

/** One line per failing step and message (the same failure of many messages is one line, with their count). */
function warningsOf(messages: readonly StoredMessage[], results: readonly TransformResult[]): string[] {
  const lines = new Map<string, { first: string; count: number }>();
  results.forEach((result, i) => {
    const failures = [
      ...result.warnings.map((w) => ({ ...w, skipped: true })),
      ...(result.error === undefined ? [] : [{ ...result.error, skipped: false }]),
    ];
    for (const failure of failures) {
      const what = failure.skipped ? 'skipped' : 'not sent';
      const key = `transformation step ${failure.step} (${failure.kind}) failed (${what}): ${failure.message}`;
      const line = lines.get(key);
      if (line === undefined) lines.set(key, { first: idOf(messages[i]!), count: 1 });
      else line.count++;
    }
  });
  return [...lines]
    .slice(0, WARNINGS_PER_CYCLE)
    .map(
      ([key, { first, count }]) =>
        `${key.slice(0, 400)} [${count === 1 ? first : `${count} messages, first ${first}`}]`,
    );
}

export function createDestinationTransformer(
  options: DestinationTransformOptions | undefined,
  report: TransformReport,
) {
  const cache = new Map<string, Prepared>();
  const secrets = new Map<string, string>();

  async function prepare(d: DestinationRecord, transformation: DestinationTransformation): Promise<Prepared> {
    const key = JSON.stringify(transformation.steps);
    const cached = cache.get(d.id);
    if (cached?.key === key) return cached;
    if (options === undefined) throw new TransformationUnavailable('transformation: steps cannot run on this instance');
    const ready = await prepareSteps({ steps: transformation.steps }, options.runtime, options.geoip);
    if (!ready.ok)
      throw new TransformationUnavailable(
        `transformation: ${ready.errors.map((e) => `${e.pointer} ${e.message}`).join('; ')}`,
      );
    let secret = secrets.get(d.productId);
    if (secret === undefined) {
      secret = await options.secret(d.productId);
      secrets.set(d.productId, secret);
    }
    const prepared: Prepared = { key, steps: ready.steps, functions: ready.functions, secret, hashCache: new Map() };
    // A cycle of this destination runs one at a time: the functions replaced are no longer in use.
    if (cached !== undefined) disposeAll(cached.functions);
    cache.set(d.id, prepared);
    return prepared;
  }

  function contextOf(
    d: DestinationRecord,
    prepared: Prepared,
    message: StoredMessage,
    cpu: Map<StepKind, number>,
  ): RunContext {
    return {
      secret: prepared.secret,
      hashCache: prepared.hashCache,
      messageId: idOf(message),
      meta: {
        product_id: d.productId,
        key_id: message.kind === 'event' ? message.event.apiKeyId : null,
        route: 'destination',
      },
      enrichers: options!.runtime.enrichers,
      functions: prepared.functions,
      cpu,
      // Values parsed from the JSON text read for this destination are its own; parsed objects are shared with
      // the product's other destinations (pages.ts), so the engine copies them.
      owned: message.kind === 'event' && message.event.jsonText !== undefined,
    };
  }

  return {
    /**
     * Checks a `transformation` of a destination's body (`{ "steps": [..] }`) like a product's PUT, functions
     * compiled; a problem is a 400 with pointers under `/transformation`. null stays null (none).
     */
    async check(value: unknown): Promise<DestinationTransformation | null> {
      if (value === null) return null;
      if (options === undefined)
        throw validationError([
          { pointer: '/transformation', message: 'transformations are not available on this server' },
        ]);
      const ready = await prepareSteps(value, options.runtime, options.geoip, '/transformation');
      if (!ready.ok) throw validationError(ready.errors);
      disposeAll(ready.functions);
      return { steps: ready.steps };
    },

    /**
     * The destination's messages after its steps, each in its place: the message to send, or why it is not
     * sent. Messages pass as they are when it has none. Throws TransformationUnavailable when its steps cannot run.
     */
    async apply(d: DestinationRecord, messages: readonly StoredMessage[]): Promise<Outcome[]> {
      const transformation = d.transformation;
      if (transformation === null || transformation.steps.length === 0 || messages.length === 0)
        return messages.map((message) => ({ message }));
      const prepared = await prepare(d, transformation);
      const outcomes: Outcome[] = messages.map((message) => ({ message }));
      const indexes: number[] = [];
      const documents: TransformDocument[] = [];
      messages.forEach((message, i) => {
        const document = documentOf(message);
        if (document === undefined) return;
        indexes.push(i);
        documents.push(document);
      });
      if (documents.length === 0) return outcomes;
      const taken = indexes.map((i) => messages[i]!);
      const cpu = new Map<StepKind, number>();
      const contexts = taken.map((message) => contextOf(d, prepared, message, cpu));
      const results = prepared.functions.every((fn) => fn === undefined)
        ? applyStepsToEach(documents, prepared.steps, contexts)
        : await applyStepsToBatch(documents, prepared.steps, contexts);
      results.forEach((result, j) => {
        const i = indexes[j]!;
        outcomes[i] =
          result.outcome === 'kept' ? { message: messageAfter(messages[i]!, result) } : { skipped: result.outcome };
      });
      report.counted(d.id, { steps: tallyOf(results), cpu: [...cpu] });
      const warnings = warningsOf(taken, results);
      if (warnings.length > 0) report.failed(d.id, warnings);
      return outcomes;
    },

    /** Lets go of the prepared steps of destinations not in `present` (deleted, or no longer delivered here). */
    prune(present: ReadonlySet<string>): void {
      for (const [id, prepared] of cache)
        if (!present.has(id)) {
          disposeAll(prepared.functions);
          cache.delete(id);
        }
    },

    /** Frees the compiled functions (the sandbox itself belongs to whoever built the runtime). */
    close(): void {
      for (const prepared of cache.values()) disposeAll(prepared.functions);
      cache.clear();
    },
  };
}

export type DestinationTransformer = ReturnType<typeof createDestinationTransformer>;
