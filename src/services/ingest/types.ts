// What the accept pipeline takes, answers and hands from stage to stage.
import type { AppError } from '../../domain/errors.js';
import type { NameFormat } from '../../domain/event-names.js';
import type { EventDraft } from '../../domain/events.js';
import type { EventRecord } from '../../storage/types.js';
import type { AuthContext } from '../key-service.js';

/** Events sent through the HTTP API carry this source (contract §4). */
export const API_SOURCE = 'api';

/**
 * One item handed to `accept`, already translated by its entry point: a draft, or the reason it
 * could not become one (schema, name or size). `format` labels the metrics of a refused item.
 */
export type Candidate =
  { ok: true; draft: EventDraft } | { ok: false; error: AppError; format?: NameFormat | 'unknown' };

export type ItemOutcome =
  | { status: 'created'; event: EventRecord }
  | { status: 'duplicate'; event: EventRecord }
  | { status: 'rejected'; error: AppError }
  /** The product's transformation dropped the item at this step (transformations.md §5): nothing stored. */
  | { status: 'dropped'; step: number };

export interface AcceptOptions {
  /** The metrics label of the entry point: v1, v2, batch, segment. */
  endpoint: string;
  receivedAt: string;
  /** The event source, the scope of external ids (contract §4); `api` unless said otherwise. */
  source?: string;
  /**
   * Record every rejected item (batch routes): the route, and each item as received with its message id.
   * `planOnly` (single-event routes): record only the items the tracking plan refused (governance.md §2).
   */
  record?: { route: string; item(index: number): unknown; messageId(index: number): string | null; planOnly?: boolean };
  /**
   * The largest event the entry point takes (INLET_MAX_EVENT_BYTES, a Segment item's 32 KiB): what an item a step
   * changed is held to again, its properties and context together (transformations.md §1). Absent: not checked.
   */
  maxEventBytes?: number;
  /**
   * The entry point's own refusal of an item (`entry-rules.ts`), asked after the product's transformation with the
   * item's draft as the steps left it, and before the tracking plan: the Segment routes' browser-key merge rule.
   */
  admit?(index: number, draft: EventDraft): AppError | undefined | Promise<AppError | undefined>;
}

export interface AcceptResult {
  /** One per candidate, in order. */
  outcomes: ItemOutcome[];
  /** Some item used the deprecated legacy flat name (accepted or refused): the answer carries the deprecation headers. */
  legacySeen: boolean;
}

/** An item still on its way through the stages: its place in the request, and its draft as it stands now. */
export interface AcceptItem {
  readonly index: number;
  /** A stage that changes the item (a transformation) replaces the draft. */
  draft: EventDraft;
  /** The stored event's id when a stage needed it before the write (sampling an item without an external id). */
  eventId?: string;
}

/** A warning recorded in the rejections list beside the item's outcome (a transformation step skipped). */
export interface AcceptWarning {
  index: number;
  code: string;
  detail: string;
}

/** One call of `accept` as it moves through the stages. */
export interface AcceptRun {
  readonly auth: AuthContext;
  readonly options: AcceptOptions;
  /** One per candidate: set when the item is refused or stored. */
  readonly outcomes: Array<ItemOutcome | undefined>;
  /** One per candidate: the name format as received, the label of its metrics. */
  readonly formats: Array<NameFormat | 'unknown'>;
  /** The items no stage has refused yet, in request order. */
  items: AcceptItem[];
  legacySeen: boolean;
  /**
   * What a refusal records instead of the item as received (by index): the transformed document, so a masked
   * value is never written, not even in the rejections list (transformations.md §5).
   */
  recordAs?: Map<number, unknown>;
  warnings?: AcceptWarning[];
}

/**
 * Bookkeeping a stage leaves for the end of the call (counts, records), run once every stage has passed:
 * skipped when a stage throws (storage failed, and nothing of the request was stored).
 */
export type AfterWrite = () => void;

/**
 * One step of the pipeline (`src/services/README.md` says how to add one), built once with what it uses.
 * It runs in pipeline order on the items still standing (`run.items`) and may answer some (`refuseWhere`,
 * `answerWhere`: they leave the pipeline) or replace their drafts; a stage after the write sees the stored
 * outcomes. Per-call state lives in the call.
 */
export type Stage = (run: AcceptRun) => AfterWrite | void | Promise<AfterWrite | void>;

/** Keeps the items `answer` returns nothing for; the others leave the pipeline with the outcome it returned. */
export function answerWhere(run: AcceptRun, answer: (item: AcceptItem) => ItemOutcome | undefined): void {
  const kept: AcceptItem[] = [];
  for (const item of run.items) {
    const outcome = answer(item);
    if (outcome === undefined) kept.push(item);
    else run.outcomes[item.index] = outcome;
  }
  run.items = kept;
}

/** Keeps the items `refusal` lets through and rejects the others with the error it returned: a per-item rule. */
export function refuseWhere(run: AcceptRun, refusal: (item: AcceptItem) => AppError | undefined): void {
  answerWhere(run, (item) => {
    const error = refusal(item);
    return error === undefined ? undefined : { status: 'rejected', error };
  });
}
