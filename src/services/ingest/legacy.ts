// Stage: the legacy flat-name policy (contract §4), on the name as received. Each use of a legacy name is
// counted (accepted or refused) in memory and written once a second: bookkeeping stays off the hot path.
import type { LegacyFlatMode } from '../../domain/legacy-policy.js';
import { legacyRefusal } from '../../domain/legacy-policy.js';
import type { LegacyUsageIncrement, Storage } from '../../storage/types.js';
import type { AuthContext } from '../key-service.js';
import { refuseWhere, type Stage } from './types.js';

const LEGACY_FLUSH_MS = 1000;

/** Counts of legacy-name use per key and name, written to storage in the background. */
export class LegacyUsageCounter {
  private readonly counts = new Map<string, LegacyUsageIncrement>();
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;

  constructor(private readonly store: Storage['legacyUsage']) {}

  /** Counts one use of a legacy flat name (accepted or refused). */
  note(auth: AuthContext, eventName: string, at: string): void {
    this.add({ productId: auth.productId, apiKeyId: auth.keyId, eventName, count: 1, lastSeenAt: at });
  }

  /** Writes the counts held in memory; a reader calls it first to see every use. */
  async flush(): Promise<void> {
    // A flush already writing (the timer's) holds counts no longer in the map: a reader waits for it.
    while (this.writing !== undefined) await this.writing.catch(() => {});
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const increments = [...this.counts.values()];
    this.counts.clear();
    if (increments.length === 0) return;
    this.writing = this.store.record(increments);
    try {
      await this.writing;
    } catch (error) {
      // Storage away (a failover): keep the counts and try again, so none are lost.
      for (const increment of increments) this.add(increment);
      throw error;
    } finally {
      this.writing = undefined;
    }
  }

  private add(use: LegacyUsageIncrement): void {
    const id = `${use.apiKeyId}\u0000${use.eventName}`;
    const entry = this.counts.get(id);
    if (entry === undefined) this.counts.set(id, { ...use });
    else {
      entry.count += use.count;
      if (use.lastSeenAt > entry.lastSeenAt) entry.lastSeenAt = use.lastSeenAt;
    }
    this.timer ??= setTimeout(() => void this.flush().catch(() => {}), LEGACY_FLUSH_MS).unref();
  }
}

export function legacyStage(counter: LegacyUsageCounter, mode: LegacyFlatMode): Stage {
  return function legacy(run) {
    refuseWhere(run, ({ draft: { name } }) => {
      if (name.nameFormat !== 'legacy') return undefined;
      run.legacySeen = true;
      counter.note(run.auth, name.canonicalName, run.options.receivedAt);
      return legacyRefusal(name, mode);
    });
  };
}
