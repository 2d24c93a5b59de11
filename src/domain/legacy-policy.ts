// The legacy flat name policy (contract §5): legacy input is accepted with deprecation headers, or
// refused with 410 once the operator has switched it off. Pure: the caller counts the use.
import { AppError } from './errors.js';
import { preferredFormOf, type SplitName } from './event-names.js';

export type LegacyFlatMode = 'accept' | 'reject';

/** The 410 answer for legacy flat input once the operator has switched it off. */
export function legacyRemovedError(name: SplitName): AppError {
  return new AppError(
    'legacy_format_removed',
    `Legacy flat event names were retired on 2026-09-01. Send ${preferredFormOf(name)} instead of {"event_type":"${name.canonicalName}"}.`,
    { extras: { preferred: { event_type: name.eventType, action: name.action } } },
  );
}

/** Undefined when the name may be stored; the refusal otherwise. Only legacy names are ever refused. */
export function legacyRefusal(name: SplitName, mode: LegacyFlatMode): AppError | undefined {
  return name.nameFormat === 'legacy' && mode === 'reject' ? legacyRemovedError(name) : undefined;
}
