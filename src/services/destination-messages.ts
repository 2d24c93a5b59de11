// Destination messages (events-out §6, clarifications §26): the wire shape of each message, its stable
// id, the filter, and the ids and bodies of webhook deliveries.
import { createHash } from 'node:crypto';
import type { DestinationFilter, MessageType, StoredMessage } from '../storage/types.js';

export const MESSAGE_TYPES: readonly MessageType[] = ['event.created', 'user.identified', 'user.merged', 'user.erased'];

export interface WireMessage {
  /** Stable across re-deliveries: `evt_` + the event's uuid (hex) for event.created; the logged id for identity messages. */
  id: string;
  type: MessageType;
  /** When it happened: the event's received_at, or when the identity change was committed. */
  timestamp: string;
  /** The whole message as JSON text: `{ "id", "type", "timestamp", "data" }`, data in the reads' shapes. */
  json: string;
}

export function typeOf(message: StoredMessage): MessageType {
  return message.kind === 'event' ? 'event.created' : message.type;
}

export function matches(filter: DestinationFilter, message: StoredMessage): boolean {
  // `user.erased` is the erasure notice owed to every destination that may hold the person's data
  // (governance §3 "destinations receive"; GDPR art. 19), not content a receiver opts into: no filter holds it back.
  if (message.kind === 'identity' && message.type === 'user.erased') return true;
  if (filter.types !== undefined && !filter.types.includes(typeOf(message))) return false;
  if (message.kind !== 'event') return true;
  // canonical_names and sources narrow events; identity messages have neither.
  if (filter.canonicalNames !== undefined && !filter.canonicalNames.includes(message.event.canonicalName)) return false;
  if (filter.sources !== undefined && !filter.sources.includes(message.event.source)) return false;
  return true;
}

/** Turns a stored message into its public JSON (resources/destination-messages.ts, passed in by services.ts). */
export type MessageFormatter = (message: StoredMessage) => WireMessage;

/**
 * The `webhook-id` of a delivery: the message's id, or for a batch one derived from its first and last
 * message ids (clarifications §26), so re-sending the same batch carries the same id.
 */
export function webhookIdOf(messages: WireMessage[]): string {
  if (messages.length === 1) return messages[0]!.id;
  const digest = createHash('sha256').update(`${messages[0]!.id}\u0000${messages[messages.length - 1]!.id}`).digest('base64url').slice(0, 27);
  return `bat_${digest}`;
}

/** The JSON body: one message, or `{ "type": "batch", "timestamp", "data": [ … ] }`. */
export function bodyOf(messages: WireMessage[], batched: boolean, now: string): string {
  if (!batched) return messages[0]!.json;
  let data = '';
  for (let i = 0; i < messages.length; i++) data += (i === 0 ? '' : ',') + messages[i]!.json;
  return `{"type":"batch","timestamp":${JSON.stringify(now)},"data":[${data}]}`;
}

/** A NATS subject from a template: {product_id}, {canonical_name}, {type}; tokens made subject-safe. */
export function subjectOf(template: string, productId: string, message: StoredMessage): string {
  const safe = (value: string) => value.replace(/[^A-Za-z0-9_-]/g, '_') || '_';
  const type = typeOf(message);
  const canonicalName = message.kind === 'event' ? message.event.canonicalName : type.replace('.', '_');
  return template.replaceAll('{product_id}', safe(productId)).replaceAll('{canonical_name}', safe(canonicalName)).replaceAll('{type}', type);
}
