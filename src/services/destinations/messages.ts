// Destination messages (events-out §6, clarifications §26): the wire shape of each message, its stable
// id, the filter, and the ids and bodies of webhook deliveries.
import { createHash } from 'node:crypto';
import type { DestinationFilter, MessageType, StoredMessage } from '../../storage/types.js';

export const MESSAGE_TYPES: readonly MessageType[] = ['event.created', 'user.identified', 'user.merged', 'user.erased'];

export interface WireMessage {
  /** Stable across re-deliveries: `evt_` + the event's uuid (hex) for event.created; the logged id for identity messages. */
  id: string;
  type: MessageType;
  /** When it happened: the event's received_at, or when the identity change was committed. */
  timestamp: string;
  /** The whole message as JSON text: `{ "id", "type", "timestamp", "data" }`, data in the reads' shapes. */
  json: string;
  /** `json` as UTF-8, once it was needed (bytesOf). */
  bytes?: Buffer;
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
  const digest = createHash('sha256')
    .update(`${messages[0]!.id}\u0000${messages[messages.length - 1]!.id}`)
    .digest('base64url')
    .slice(0, 27);
  return `bat_${digest}`;
}

/** The message's JSON as UTF-8, encoded once and kept on the message (shared by the destinations sending it). */
export function bytesOf(message: WireMessage): Buffer {
  return (message.bytes ??= Buffer.from(message.json, 'utf8'));
}

const BATCH_DATA_END = Buffer.from(']}');
const COMMA = 0x2c;

/** Memory a destination's bodies are written into, one after the other (its batches are sent one at a time). */
export interface BodyScratch {
  buffer: Buffer;
}

/**
 * The JSON body as UTF-8 bytes: one message, or `{ "type": "batch", "timestamp", "data": [ … ] }`, the same
 * bytes as that body's text (test/unit/webhook-signature.test.ts). Put together from each message's bytes into
 * `scratch`, reused from one body to the next (the result is a view of it, valid until the next call), and
 * never as one string. Why (bench/runs/2026-11-destinations.md): a batch of 100 events is ~130 KB; on the bench
 * machine every fresh allocation that large (a string of 128 KB or more goes to V8's large-object space, a
 * Buffer that large is mmap'ed by malloc) costs 0.5–1 ms in page faults, and the string form made three of
 * them per batch (joining, signing, writing), ~25 µs per message.
 */
export function bodyOf(
  messages: WireMessage[],
  batched: boolean,
  now: string,
  scratch: BodyScratch = { buffer: Buffer.alloc(0) },
): Buffer {
  if (!batched) return bytesOf(messages[0]!);
  const head = `{"type":"batch","timestamp":${JSON.stringify(now)},"data":[`;
  // Room for the worst case (3 bytes of UTF-8 per UTF-16 unit), so each message is encoded straight into it.
  let room = head.length + messages.length + BATCH_DATA_END.length;
  for (const m of messages) room += m.bytes === undefined ? 3 * m.json.length : m.bytes.length;
  if (scratch.buffer.length < room) scratch.buffer = Buffer.allocUnsafeSlow(Math.max(room, 2 * scratch.buffer.length));
  const out = scratch.buffer;
  let at = out.write(head, 0, 'latin1');
  for (let i = 0; i < messages.length; i++) {
    if (i > 0) out[at++] = COMMA;
    const m = messages[i]!;
    at += m.bytes === undefined ? out.write(m.json, at, 'utf8') : m.bytes.copy(out, at);
  }
  at += BATCH_DATA_END.copy(out, at);
  return out.subarray(0, at);
}

/** A NATS subject from a template: {product_id}, {canonical_name}, {type}; tokens made subject-safe. */
export function subjectOf(template: string, productId: string, message: StoredMessage): string {
  const safe = (value: string) => value.replace(/[^A-Za-z0-9_-]/g, '_') || '_';
  const type = typeOf(message);
  const canonicalName = message.kind === 'event' ? message.event.canonicalName : type.replace('.', '_');
  return template
    .replaceAll('{product_id}', safe(productId))
    .replaceAll('{canonical_name}', safe(canonicalName))
    .replaceAll('{type}', type);
}

/**
 * subjectOf, remembered per template, product, type and canonical name (a destination publishes the same few
 * subjects over and over). Bounded: cleared when it holds 10,000 subjects.
 */
export function subjectCache() {
  const cache = new Map<string, string>();
  return {
    of(template: string, productId: string, message: StoredMessage): string {
      const key = `${template}\u0000${productId}\u0000${message.kind === 'event' ? `\u0000${message.event.canonicalName}` : message.type}`;
      let subject = cache.get(key);
      if (subject === undefined) {
        subject = subjectOf(template, productId, message);
        if (cache.size >= 10_000) cache.clear();
        cache.set(key, subject);
      }
      return subject;
    },
  };
}
