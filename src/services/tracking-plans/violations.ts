// Violations of the plan are recorded like rejections (clarifications §20): buffered, flushed within a
// second, capped per product and hour, kept through a failed flush; each counted in the metrics.
import { Counter } from 'prom-client';
import { AppError } from '../../domain/errors.js';
import { uuidv7 } from '../../domain/ids.js';
import { storableText } from '../../domain/json-values.js';
import type { CompiledPlan } from '../../domain/tracking-plan.js';
import type { Storage, ViolationRecord } from '../../storage/types.js';
import { createCappedRecorder } from '../capped-recorder.js';
import type { AuthContext } from '../keys/authentication.js';
import type { Metrics } from '../metrics.js';

/** Names of the metric label past which planned names are not spelled out (unplanned names come from senders). */
const UNPLANNED_LABEL = '(unplanned)';

export type ViolationEntry = Omit<ViolationRecord, 'id' | 'productId' | 'receivedAt' | 'keyId' | 'route'>;

export interface ViolationLimits {
  maxViolationsPerHour: number;
  retentionDays: number;
}

export function createViolationRecorder(
  governance: Storage['governance'],
  metrics: Metrics,
  limits: ViolationLimits,
  clock: () => number,
) {
  const counter = new Counter({
    name: 'inlet_tracking_plan_violations_total',
    help: 'Items that broke the tracking plan, by canonical name (planned names only), code and severity, and whether they were recorded',
    labelNames: ['canonical_name', 'code', 'severity', 'recorded'],
    registers: [metrics.registry],
  });
  const recorder = createCappedRecorder<ViolationRecord>({
    maxPerHour: limits.maxViolationsPerHour,
    retentionDays: limits.retentionDays,
    now: clock,
    insert: (rows) => governance.insertViolations(rows),
    addUnrecorded: (counts) => governance.addUnrecordedViolations(counts),
    deleteOlderThan: (at) => governance.deleteViolationsOlderThan(at),
  });

  return {
    /** Records (or, past the hourly cap, only counts) violations of one request. */
    record(auth: AuthContext, route: string, entries: ViolationEntry[], receivedAt: string, plan: CompiledPlan): void {
      for (const entry of entries) {
        const recorded = recorder.admit(auth.productId, receivedAt);
        const label = plan.events.has(entry.canonicalName) ? entry.canonicalName : UNPLANNED_LABEL;
        counter.inc({ canonical_name: label, code: entry.code, severity: entry.severity, recorded: String(recorded) });
        if (!recorded) continue;
        recorder.push({
          ...entry,
          id: uuidv7(),
          productId: auth.productId,
          receivedAt,
          keyId: auth.keyId,
          route: storableText(route),
          canonicalName: storableText(entry.canonicalName),
          messageId: entry.messageId === null ? null : storableText(entry.messageId),
          subjectId: entry.subjectId === null ? null : storableText(entry.subjectId),
          errors: entry.errors.map((e) => ({ pointer: storableText(e.pointer), message: storableText(e.message) })),
        });
      }
    },
    flush: recorder.flush,
  };
}

/** The 400 of a refused item: `tracking_plan_violation` or `unplanned_event`, with pointers into the request body. */
export function planRefusal(
  code: 'tracking_plan_violation' | 'unplanned_event',
  canonicalName: string,
  errors: Array<{ pointer: string; message: string }>,
  traits = false,
): AppError {
  const what = traits ? 'The traits do' : `The event "${canonicalName}" does`;
  const detail =
    code === 'unplanned_event'
      ? `The event "${canonicalName}" is not in the tracking plan, which refuses unplanned events.`
      : `${what} not match the tracking plan: ${errors[0]?.pointer ?? ''} ${errors[0]?.message ?? ''}${errors.length > 1 ? ` (and ${errors.length - 1} more)` : ''}.`;
  return new AppError(code, detail, { errors });
}
