// The end of every call: each item counted once in inlet_events_total, and the refusals recorded
// (segment-compat B, governance.md §2–3).
import type { NameFormat } from '../../domain/event-names.js';
import type { AuthContext } from '../key-service.js';
import type { Metrics } from '../metrics.js';
import type { RejectionEntry, RejectionService } from '../rejection-service.js';
import type { AcceptOptions, AcceptWarning, ItemOutcome } from './types.js';

/** Refusals a single-event route records (`planOnly`): those of the product's own rules, not of the sender's input. */
const PLAN_CODES: ReadonlySet<string> = new Set(['tracking_plan_violation', 'unplanned_event', 'transformation_error']);

/** Counts each item once, per (format, outcome) first: one metrics update per distinct pair, not one per item. */
export function countOutcomes(
  metrics: Metrics,
  endpoint: string,
  formats: ReadonlyArray<NameFormat | 'unknown'>,
  outcomes: readonly ItemOutcome[],
): void {
  const tally = new Map<string, { format: NameFormat | 'unknown'; outcome: ItemOutcome['status']; count: number }>();
  for (let index = 0; index < outcomes.length; index++) {
    const format = formats[index]!;
    const outcome = outcomes[index]!.status;
    const key = `${format}/${outcome}`;
    const entry = tally.get(key);
    if (entry === undefined) tally.set(key, { format, outcome, count: 1 });
    else entry.count++;
  }
  for (const { format, outcome, count } of tally.values()) metrics.events.inc({ endpoint, format, outcome }, count);
}

/** Records the refused items the entry point asked for (`AcceptOptions.record`). */
export function recordRejections(
  rejections: RejectionService,
  auth: AuthContext,
  record: NonNullable<AcceptOptions['record']>,
  outcomes: readonly ItemOutcome[],
  receivedAt: string,
  transformed?: { recordAs?: ReadonlyMap<number, unknown>; warnings?: readonly AcceptWarning[] },
): void {
  const entries: RejectionEntry[] = [];
  // An item the transformation ran on is recorded as the steps left it (masks applied), never as received.
  const itemOf = (index: number): unknown =>
    transformed?.recordAs?.has(index) === true ? transformed.recordAs.get(index) : record.item(index);
  outcomes.forEach((outcome, index) => {
    if (outcome.status !== 'rejected') return;
    if (outcome.error.code === 'subject_suppressed') {
      // Recorded without the item and its message id: they belong to the erased person.
      entries.push({
        index,
        messageId: null,
        code: outcome.error.code,
        detail: outcome.error.message,
        severity: 'rejected',
        item: null,
      });
      return;
    }
    if (record.planOnly === true && !PLAN_CODES.has(outcome.error.code)) return;
    entries.push({
      index,
      messageId: record.messageId(index),
      code: outcome.error.code,
      detail: outcome.error.message,
      severity: 'rejected',
      item: itemOf(index),
    });
  });
  for (const warning of transformed?.warnings ?? [])
    entries.push({
      index: warning.index,
      messageId: record.messageId(warning.index),
      code: warning.code,
      detail: warning.detail,
      severity: 'warning',
      item: itemOf(warning.index),
    });
  rejections.record(auth, record.route, entries, receivedAt);
}
