// The compiled plans, cached per instance. The accept pipeline asks on every request: a cached plan younger
// than `refreshMs` costs a Map lookup; an older one is used as it is while one query in the background asks
// whether a newer version was stored (by another instance), so a new version is applied everywhere within
// `refreshMs` plus one query. A PUT on this instance applies at once here.
import { compilePlan, type CompiledPlan } from '../../domain/tracking-plan.js';
import type { Storage } from '../../storage/types.js';

interface CacheEntry {
  plan: CompiledPlan | undefined;
  checkedAt: number;
  refreshing?: Promise<void>;
}

export class PlanCache {
  private readonly entries = new Map<string, CacheEntry>();

  constructor(
    private readonly governance: Storage['governance'],
    private readonly refreshMs: number,
    private readonly clock: () => number,
  ) {}

  /**
   * The compiled plan of a product (undefined: none). Awaits storage only the first time a product is
   * seen by this instance; afterwards a stale entry is served while a refresh runs in the background.
   */
  async planFor(productId: string): Promise<CompiledPlan | undefined> {
    let entry = this.entries.get(productId);
    if (entry === undefined) {
      entry = { plan: undefined, checkedAt: 0 };
      this.entries.set(productId, entry);
      await this.refresh(productId, entry);
      return entry.plan;
    }
    if (entry.checkedAt === 0) await this.refresh(productId, entry);
    else if (this.clock() - entry.checkedAt >= this.refreshMs) void this.refresh(productId, entry).catch(() => {});
    return entry.plan;
  }

  /** A version stored by this instance: applied at once here. */
  applied(productId: string, plan: CompiledPlan): void {
    const entry = this.entries.get(productId);
    // A refresh already running may still set the older one, then the next corrects it.
    if (entry === undefined) this.entries.set(productId, { plan, checkedAt: this.clock() });
    else {
      entry.plan = plan;
      entry.checkedAt = this.clock();
    }
  }

  private refresh(productId: string, entry: CacheEntry): Promise<void> {
    entry.refreshing ??= this.load(productId, entry).finally(() => {
      entry.refreshing = undefined;
    });
    return entry.refreshing;
  }

  private async load(productId: string, entry: CacheEntry): Promise<void> {
    const version = await this.governance.currentPlanVersion(productId);
    if (version !== (entry.plan?.version ?? 0)) {
      const stored = await this.governance.currentPlan(productId);
      if (stored === undefined) entry.plan = undefined;
      else {
        const compiled = compilePlan(stored.plan, stored.version);
        // A stored plan always compiled when it was PUT; a library upgrade could change that: keep the old one then.
        if (compiled.ok) entry.plan = compiled.plan;
      }
    }
    entry.checkedAt = this.clock();
  }
}
