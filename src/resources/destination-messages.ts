// The public JSON of destination messages (events-out §6): `data` in the same shapes as the reads. The
// composition root hands this formatter to the destination service, which sends what it returns.
import { messageIdOfEvent } from '../domain/destinations.js';
import type { WireMessage } from '../services/destinations/messages.js';
import type { StoredMessage, UserRecord } from '../storage/types.js';
import { eventJsonFromText, eventTexts } from './event-export.js';
import { eventResource } from './events.js';
import { userResource } from './identity.js';

function wire(id: string, type: WireMessage['type'], timestamp: string, data: unknown): WireMessage {
  return { id, type, timestamp, json: JSON.stringify({ id, type, timestamp, data }) };
}

export function destinationMessage(message: StoredMessage): WireMessage {
  if (message.kind === 'event') {
    const event = message.event;
    const id = messageIdOfEvent(event.id);
    // Read with its JSON columns as text (storage/destinations/reads.ts): written out around that text, the same
    // bytes as JSON.stringify of the object form (test/destinations.test.ts).
    if (event.jsonText !== undefined) {
      const texts = eventTexts(event);
      // The message id is the uuid without its dashes: it needs no escape when the uuid needed none.
      const idText = texts.uuid.length === event.id.length + 2 ? `"${id}"` : JSON.stringify(id);
      return {
        id,
        type: 'event.created',
        timestamp: event.receivedAt,
        json: `{"id":${idText},"type":"event.created","timestamp":${texts.receivedAt},"data":${eventJsonFromText(event, event.jsonText, texts)}}`,
      };
    }
    return wire(id, 'event.created', event.receivedAt, eventResource(event));
  }
  if (message.type === 'user.identified')
    return wire(message.id, message.type, message.createdAt, userResource((message.data as { user: UserRecord }).user));
  if (message.type === 'user.erased') {
    // governance.md §3: receivers erase these ids too.
    const data = message.data as { externalIds: string[]; erasureId: string };
    return wire(message.id, message.type, message.createdAt, {
      external_ids: data.externalIds,
      erasure_id: data.erasureId,
    });
  }
  const data = message.data as { fromExternalId: string; user: UserRecord };
  return wire(message.id, message.type, message.createdAt, {
    from_external_id: data.fromExternalId,
    into: userResource(data.user),
  });
}
