// One stored-event row for tests that write through the storage's event writer directly (storage.events.insertMany).
import { uuidv7 } from '../src/domain/ids.js';
import type { EventInsert } from '../src/storage/types.js';

export function eventRow(productId: string, externalId: string | null, source = 'api'): EventInsert {
  const now = new Date().toISOString();
  return {
    id: uuidv7(),
    productId,
    source,
    externalId,
    eventType: 'order',
    action: 'placed',
    canonicalName: 'order_placed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: 'u1',
    occurredAt: now,
    receivedAt: now,
    properties: {},
    propertiesJson: '{}',
    apiKeyId: null,
  };
}
