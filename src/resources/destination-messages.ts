// The public JSON of destination messages (events-out §6): `data` in the same shapes as the reads. The
// composition root hands this formatter to the destination service, which sends what it returns.
import { messageIdOfEvent } from '../domain/destinations.js';
import type { WireMessage } from '../services/destination-messages.js';
import type { StoredMessage, UserRecord } from '../storage/types.js';
import { eventResource } from './events.js';
import { userResource } from './identity.js';

export function destinationMessage(message: StoredMessage): WireMessage {
  if (message.kind === 'event') {
    return { id: messageIdOfEvent(message.event.id), type: 'event.created', timestamp: message.event.receivedAt, data: eventResource(message.event) };
  }
  if (message.type === 'user.identified') {
    return { id: message.id, type: message.type, timestamp: message.createdAt, data: userResource(message.data.user) };
  }
  const data = message.data as { fromExternalId: string; user: UserRecord };
  return { id: message.id, type: message.type, timestamp: message.createdAt, data: { from_external_id: data.fromExternalId, into: userResource(data.user) } };
}
