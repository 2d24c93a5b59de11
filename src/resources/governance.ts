// The public shapes of the catalogue, tracking plans and violations (governance.md §1–2), shared by
// the admin API and the CLI's --json output.
import type { TrackingPlan } from '../domain/tracking-plan.js';
import type {
  CatalogEventRecord,
  CatalogPropertyRecord,
  TrackingPlanVersion,
  ViolationRecord,
} from '../storage/types.js';

export function catalogEventResource(e: CatalogEventRecord) {
  return {
    canonical_name: e.canonicalName,
    event_type: e.eventType,
    action: e.action,
    count: e.count,
    first_seen: e.firstSeen,
    last_seen: e.lastSeen,
    sources: e.sources,
    key_ids: e.keyIds,
  };
}

export function catalogPropertyResource(p: CatalogPropertyRecord) {
  return { path: p.path, types: p.types, first_seen: p.firstSeen, last_seen: p.lastSeen };
}

export function catalogEventDetailResource(detail: { event: CatalogEventRecord; properties: CatalogPropertyRecord[] }) {
  return {
    ...catalogEventResource(detail.event),
    properties: detail.properties.map(catalogPropertyResource),
    properties_overflow: detail.event.propertiesOverflow,
  };
}

export function trackingPlanResource(v: TrackingPlanVersion) {
  return { version: v.version, created_at: v.createdAt, ...(v.plan as unknown as TrackingPlan) };
}

export function violationResource(v: ViolationRecord) {
  return {
    id: v.id,
    received_at: v.receivedAt,
    key_id: v.keyId,
    route: v.route,
    canonical_name: v.canonicalName,
    code: v.code,
    severity: v.severity,
    plan_version: v.planVersion,
    message_id: v.messageId,
    errors: v.errors,
  };
}
