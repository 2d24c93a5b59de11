// The compiled plans, cached per instance (version-cache.ts): a warm plan answers at once, a new version
// reaches every instance within `refreshMs` plus one query, and a PUT on this instance applies at once here.
import { compilePlan, type CompiledPlan } from '../../domain/tracking-plan.js';
import type { Storage } from '../../storage/types.js';
import { KEEP, VersionCache } from '../version-cache.js';

export function createPlanCache(
  governance: Storage['governance'],
  refreshMs: number,
  clock: () => number,
): VersionCache<CompiledPlan> {
  return new VersionCache<CompiledPlan>(
    {
      currentVersion: (productId) => governance.currentPlanVersion(productId),
      async load(productId) {
        const stored = await governance.currentPlan(productId);
        if (stored === undefined) return undefined;
        const compiled = compilePlan(stored.plan, stored.version);
        // A stored plan always compiled when it was PUT; a library upgrade could change that: keep the old one then.
        return compiled.ok ? compiled.plan : KEEP;
      },
    },
    refreshMs,
    clock,
  );
}
