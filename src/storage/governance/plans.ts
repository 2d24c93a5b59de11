// Tracking plans (governance.md §2): numbered versions per product, the newest one in force.
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';
import type { GovernanceStore, TrackingPlanVersion } from '../governance-types.js';
import { versionedDocuments, type DocumentVersion } from '../versioned-documents.js';

type Plan = Record<string, unknown>;
type PlanStore = Pick<GovernanceStore, 'putPlan' | 'currentPlan' | 'currentPlanVersion' | 'listPlanVersions'>;

const asPlan = ({ version, document, createdAt }: DocumentVersion<Plan>): TrackingPlanVersion => ({
  version,
  plan: document,
  createdAt,
});

export function planStore(db: Kysely<Database>): PlanStore {
  const plans = versionedDocuments<Plan>(db as Kysely<unknown>, 'tracking_plans', 'plan');
  return {
    putPlan: async (productId, plan, createdAt) => asPlan(await plans.put(productId, plan, createdAt)),
    currentPlan: async (productId) => {
      const found = await plans.current(productId);
      return found === undefined ? undefined : asPlan(found);
    },
    currentPlanVersion: (productId) => plans.currentVersion(productId),
    listPlanVersions: async (productId) => (await plans.list(productId)).map(asPlan),
  };
}
