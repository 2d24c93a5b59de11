// The shapes of transformations.md §2–3: the document a step sees and the steps themselves.

/** One JSON shape for every kind of item; paths into it are dotted (`properties.plan`, `context.ip`). */
export interface TransformDocument {
  type: 'event' | 'track' | 'page' | 'screen' | 'identify' | 'group' | 'alias';
  /** The canonical name (`project_created`). */
  event: string;
  event_type: string;
  action: string;
  subject_type: string;
  subject_id: string;
  occurred_at: string;
  properties: Record<string, unknown>;
  /** Identify and group items only: what they store as their properties. */
  traits?: Record<string, unknown>;
  context: Record<string, unknown>;
  source: string;
}

export type OnError = 'reject' | 'skip';

interface StepBase {
  /** A JSON Logic rule evaluated on the document as it stands; absent: every item. */
  where?: unknown;
  on_error: OnError;
}

export type Step = StepBase &
  (
    | { kind: 'drop' }
    | { kind: 'sample'; rate: number; by: 'message_id' | 'subject' }
    | { kind: 'rename_event'; to: string }
    | { kind: 'set'; path: string; value: unknown }
    | { kind: 'remove'; paths: string[] }
    | { kind: 'rename_property'; from: string; to: string }
    | { kind: 'mask'; paths: string[]; with: 'redact' | 'hash' }
    | { kind: 'allow_properties'; paths: string[] }
    | { kind: 'user_agent'; from: string; to: string }
    | { kind: 'bot'; from: string; action: 'flag' | 'drop' }
    | { kind: 'geoip'; from: string; to: string }
    | { kind: 'function'; code: string }
  );

export type StepKind = Step['kind'];

export const STEP_KINDS: readonly StepKind[] = [
  'drop',
  'sample',
  'rename_event',
  'set',
  'remove',
  'rename_property',
  'mask',
  'allow_properties',
  'user_agent',
  'bot',
  'geoip',
  'function',
];

/** What a step's `function` returns, as the sandbox reports it. */
export type FunctionOutcome = { kind: 'event'; event: unknown } | { kind: 'drop' } | { kind: 'error'; message: string };

/** A user function compiled once per version (the sandbox), called once per step for a batch of documents. */
export interface RunnableFunction {
  runMany(documents: readonly TransformDocument[], meta: FunctionMeta): Promise<FunctionOutcome[]>;
}

export interface FunctionMeta {
  product_id: string;
  key_id: string | null;
  route: string;
}

/** The enrichment modules a step calls; undefined where the kind is not available. */
export interface Enrichers {
  userAgent?(userAgent: string): Record<string, unknown>;
  isBot?(userAgent: string): boolean;
  /** undefined: the address is not in the database. */
  geoip?(ip: string): Record<string, unknown> | undefined;
}
