// The outbound guard explains itself (issue 32): a refusal names its reason and the setting that would
// allow the target, is found under the errors HTTP clients wrap it in, and is never retried by the
// senders that meet it (webhooks, NATS). Only loopback targets, refused before any connection.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createOutboundGuard, guardRefusal, OutboundRefused } from '../../src/services/outbound-guard.js';
import { sendWebhook } from '../../src/services/destinations/webhook.js';
import { createNatsSender } from '../../src/services/destinations/nats.js';

const strict = createOutboundGuard({ allow: undefined, allowPrivate: false });
const loopbackOnly = createOutboundGuard({ allow: ['127.0.0.0/8', '::1'], allowPrivate: true });
const listedButPrivateOff = createOutboundGuard({ allow: ['127.0.0.0/8'], allowPrivate: false });

describe('a refusal names its reason and the setting that would allow it', () => {
  const cases: Array<[string, ReturnType<typeof createOutboundGuard>, string, string, RegExp]> = [
    [
      'private, with private targets off',
      strict,
      'localhost',
      '127.0.0.1',
      /loopback.*INLET_OUTBOUND_ALLOW_PRIVATE=true/,
    ],
    [
      'listed, but private targets off',
      listedButPrivateOff,
      '127.0.0.1',
      '127.0.0.1',
      /loopback.*INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it/,
    ],
    [
      'not on the allow list',
      loopbackOnly,
      'example.com',
      '93.184.216.34',
      /not on INLET_OUTBOUND_ALLOW; listing it there would allow it$/,
    ],
    [
      'not on the allow list and private',
      listedButPrivateOff,
      '10.0.0.1',
      '10.0.0.1',
      /not on INLET_OUTBOUND_ALLOW; listing it there with INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it/,
    ],
    [
      'a cloud metadata address',
      createOutboundGuard({ allow: undefined, allowPrivate: true }),
      '169.254.169.254',
      '169.254.169.254',
      /cloud metadata address; only naming it in INLET_OUTBOUND_ALLOW would allow it/,
    ],
  ];
  for (const [name, guard, host, address, expected] of cases) {
    it(name, () => assert.match(guard.refusal(host, address) ?? 'allowed', expected));
  }

  it('allows what the settings allow', () => {
    assert.equal(loopbackOnly.refusal('localhost', '127.0.0.1'), undefined);
    assert.equal(strict.refusal('example.com', '93.184.216.34'), undefined);
  });
});

describe('guardRefusal', () => {
  it('finds the refusal itself or under the errors a client wraps it in', () => {
    const refusal = new OutboundRefused('x is not on INLET_OUTBOUND_ALLOW');
    assert.equal(guardRefusal(refusal), refusal);
    assert.equal(guardRefusal(new TypeError('fetch failed', { cause: refusal })), refusal);
  });

  it('a name that does not resolve, or any other failure, is not a guard refusal (it may pass: retried)', () => {
    assert.equal(guardRefusal(new OutboundRefused('x does not resolve', { byPolicy: false })), undefined);
    assert.equal(guardRefusal(new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED') })), undefined);
    assert.equal(guardRefusal('not an error'), undefined);
  });
});

describe('the senders report a refusal as one, never as a failure to retry', () => {
  it('webhook', async () => {
    const outcome = await sendWebhook({
      url: 'http://127.0.0.1:3999/hook',
      secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
      webhookId: 'msg_1',
      body: new TextEncoder().encode('{}'),
      timeoutMs: 1000,
      guard: strict,
    });
    assert.equal(outcome.ok, false);
    assert.equal(outcome.refused, true);
    assert.match(outcome.error ?? '', /^refused by the outbound guard: .*INLET_OUTBOUND_ALLOW_PRIVATE=true/);
  });

  it('NATS', async () => {
    const sender = createNatsSender({ timeoutMs: 1000, guard: strict });
    try {
      const outcome = await sender.send('dst_1', ['nats://127.0.0.1:3999'], null, 1, () => ({
        subject: 's',
        id: 'm1',
        body: new Uint8Array(),
      }));
      assert.equal(outcome.ok, false);
      assert.equal(outcome.refused, true);
      assert.match(outcome.error ?? '', /^NATS: refused by the outbound guard: .*INLET_OUTBOUND_ALLOW_PRIVATE=true/);
      assert.deepEqual(sender.linked(), [], 'no connection was opened');
    } finally {
      await sender.close();
    }
  });
});
