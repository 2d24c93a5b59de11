// The deliverer's reading of JetStream's answers to its pipelined publishes (services/destinations/nats.ts):
// only a PubAck naming a stream moves the cursor; an error, no stream for the subject, or anything else fails
// the cycle (retried later, the cursor where it was).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pubAckError } from '../../src/services/destinations/nats.js';

const msg = (text: string, code?: number) => ({
  data: new TextEncoder().encode(text),
  headers: code === undefined ? undefined : ({ code } as never),
});

describe('pubAckError', () => {
  it('a stored message, and a duplicate JetStream dropped, are acknowledged', () => {
    assert.equal(pubAckError(msg('{"stream":"INLET","seq":7}')), undefined);
    assert.equal(pubAckError(msg('{"stream":"INLET","seq":7,"duplicate":true}')), undefined);
  });
  it('no stream holds the subject (503 no responders, empty body)', () => {
    assert.match(pubAckError(msg('', 503))!, /no JetStream stream/);
  });
  it('a refusal names its description', () => {
    assert.match(
      pubAckError(msg('{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'))!,
      /maximum messages exceeded/,
    );
  });
  it('anything that is not a PubAck with a stream is a failure', () => {
    for (const text of ['not json', '{}', '{"stream":""}', '{"seq":1}', '[]'])
      assert.ok(pubAckError(msg(text)) !== undefined, text);
  });
});
