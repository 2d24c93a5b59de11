// What a delivery cycle's outcome does to its destination's state (events-out §6): a success moves the cursor
// and clears the failures; a failure holds the destination back (no dead-lettering) until the next attempt,
// scheduled with exponential backoff and full jitter, or after Retry-After on 429/503. 410, and a target the
// outbound guard refuses, disable at once; `disableAfterMs` without a success disables too.
import type { DeliveryStatePatch, DestinationCursor, DestinationRecord } from '../../storage/types.js';
import type { SendOutcome } from './kind.js';

/** The retry schedule before jitter: ~5 s, 30 s, 2 min, 10 min, 30 min, 1 h, then hourly. */
export const RETRY_DELAYS_MS = [5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000];
const MIN_RETRY_MS = 1_000;

/** The delay before attempt `failures + 1`, with full jitter (uniform in [1 s, base]). */
export function retryDelay(failures: number, random: () => number): number {
  const base = RETRY_DELAYS_MS[Math.min(failures - 1, RETRY_DELAYS_MS.length - 1)]!;
  return Math.max(MIN_RETRY_MS, Math.round(random() * base));
}

/** What came of a cycle: the receiver accepted `accepted` messages (the cursor then goes to `cursor`). */
export interface CycleOutcome {
  accepted: number;
  cursor: DestinationCursor | undefined;
  failure: SendOutcome | undefined;
}

/** The state to write after a cycle that started from `d`, at `nowMs`. */
export function stateAfter(
  d: Pick<DestinationRecord, 'consecutiveFailures' | 'failingSince'>,
  { accepted, cursor, failure }: CycleOutcome,
  nowMs: number,
  options: { disableAfterMs: number; random: () => number },
): DeliveryStatePatch {
  const now = new Date(nowMs).toISOString();
  const patch: DeliveryStatePatch = {};
  if (accepted > 0) {
    patch.cursor = cursor!;
    patch.deliveredAdd = accepted;
    patch.consecutiveFailures = 0;
    patch.failingSince = null;
    patch.nextAttemptAt = null;
    patch.lastSuccessAt = now;
  }
  if (failure !== undefined) {
    const failures = accepted > 0 ? 1 : d.consecutiveFailures + 1;
    const failingSince = accepted > 0 ? nowMs : (d.failingSince ?? nowMs);
    patch.consecutiveFailures = failures;
    patch.failingSince = failingSince;
    patch.lastError = failure.error;
    patch.lastErrorAt = now;
    if (failure.gone) {
      patch.status = 'disabled';
      patch.disabledReason = 'the receiver answered 410 Gone';
    } else if (failure.refused) {
      patch.status = 'disabled';
      patch.disabledReason = failure.error;
    } else if (nowMs - failingSince >= options.disableAfterMs) {
      patch.status = 'disabled';
      patch.disabledReason = `no successful delivery for ${Math.round(options.disableAfterMs / 3_600_000)} h (last error: ${failure.error ?? 'unknown'})`;
    } else {
      const delay =
        failure.retryAfterMs !== undefined
          ? Math.max(failure.retryAfterMs, MIN_RETRY_MS)
          : retryDelay(failures, options.random);
      patch.nextAttemptAt = nowMs + delay;
    }
  }
  return patch;
}
