// Public JSON shapes of products and API keys, shared by the admin API and the CLI's --json output.
import type { ApiKeyRecord, ProductRecord } from '../storage/types.js';

export function productResource(product: ProductRecord) {
  return {
    id: product.id,
    name: product.name,
    created_at: product.createdAt,
    retention: { events_days: product.retentionEventsDays ?? null },
  };
}

export function apiKeyResource(key: ApiKeyRecord) {
  return {
    id: key.id,
    product_id: key.productId,
    kind: key.kind,
    prefix: key.prefix,
    name: key.name,
    created_at: key.createdAt,
    expires_at: key.expiresAt,
    revoked_at: key.revokedAt,
    last_used_at: key.lastUsedAt,
    ...(key.kind === 'browser' ? { allowed_origins: key.allowedOrigins ?? [] } : {}),
  };
}
