// A microbenchmark of the webhook body's making (bench/README.md, "Destinations"): a batch of 100 messages
// of the bench's events (~130 KB), made, signed and turned into bytes to send as the deliverer did before
// (one string: joined, then flattened again when signed and when written) and as it does now (each message's
// bytes copied into memory reused per destination, signed as bytes). CPU µs per message, process.cpuUsage.
// `node --import tsx bench/destination-body.ts`
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { bodyOf, bytesOf, type BodyScratch, type WireMessage } from '../src/services/destinations/messages.js';
import { SEGMENT_CONTEXT_JSON, randomProperties } from './workload.js';

const key = randomBytes(32);
const fresh = (): WireMessage[] =>
  Array.from({ length: 100 }, () => {
    const id = `evt_${randomUUID().replaceAll('-', '')}`;
    const json = `{"id":"${id}","type":"event.created","timestamp":"2026-11-25T23:00:00.000Z","data":{"id":"${randomUUID()}","name":"Project Created","canonical_name":"project_created","source":"api","external_id":"u_${id}","occurred_at":"2026-11-25T23:00:00.000Z","received_at":"2026-11-25T23:00:00.000Z","properties":${randomProperties()},"context":${SEGMENT_CONTEXT_JSON}}}`;
    return { id, type: 'event.created', timestamp: '2026-11-25T23:00:00.000Z', json };
  });

function before(messages: WireMessage[]): void {
  let data = '';
  for (let i = 0; i < messages.length; i++) data += (i === 0 ? '' : ',') + messages[i]!.json;
  const body = `{"type":"batch","timestamp":${JSON.stringify(new Date().toISOString())},"data":[${data}]}`;
  createHmac('sha256', key).update(`bat_x.1234567890.${body}`).digest('base64');
  Buffer.from(body); // what writing the string to the socket does
}

const scratch: BodyScratch = { buffer: Buffer.alloc(0) };
function after(messages: WireMessage[]): void {
  const body = bodyOf(messages, true, new Date().toISOString(), scratch);
  createHmac('sha256', key).update('bat_x.1234567890.').update(body).digest('base64');
}

const batches = Array.from({ length: 50 }, fresh);
console.log(`body: ${bodyOf(batches[0]!, true, new Date().toISOString()).length} bytes, 100 messages`);
for (let round = 1; round <= 3; round++) {
  for (const [name, make] of [
    ['string (before)', before],
    ['bytes, reused memory (after)', after],
  ] as const) {
    // Fresh message objects each time (a message's bytes are made once, when it is first sent): as delivered.
    const sets = Array.from({ length: 6 }, () => batches.map((b) => b.map((m) => ({ ...m }))));
    const start = process.cpuUsage();
    for (const set of sets) for (const batch of set) make(batch);
    const used = process.cpuUsage(start);
    console.log(
      `round ${round}  ${name.padEnd(30)} ${((used.user + used.system) / (sets.length * batches.length * 100)).toFixed(2)} µs CPU per message`,
    );
  }
}
void bytesOf;
