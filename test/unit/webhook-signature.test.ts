// Inlet signs webhooks with node:crypto (services/destinations/webhook.ts); receivers verify with the
// official `standardwebhooks` package. The two must give the same signature for every id, time, secret
// and body, non-ASCII and lone surrogates included (both encode text as UTF-8, U+FFFD for a lone one).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { newSecret, signatureHeader } from '../../src/services/destinations/webhook.js';
import { bodyOf, bytesOf } from '../../src/services/destinations/messages.js';

describe('webhook signature', () => {
  it('equals the official package signature (property, seeded)', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 80 }),
        fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true }),
        fc.string({ unit: 'binary', maxLength: 2000 }),
        fc.integer({ min: 1, max: 3 }),
        (id, at, body, secretCount) => {
          const secrets = Array.from({ length: secretCount }, newSecret);
          const expected = secrets.map((secret) => new Webhook(secret).sign(id, at, body)).join(' ');
          assert.equal(signatureHeader(secrets, id, at, body), expected);
        },
      ),
      { seed: 20261123, numRuns: 500 },
    );
  });

  it('verifies with the official package, and fails it when the body changes', () => {
    const secret = newSecret();
    const at = new Date();
    const body = JSON.stringify({ id: 'evt_1', type: 'event.created', data: { name: 'Zoë 🚀' } });
    const headers = {
      'webhook-id': 'evt_1',
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': signatureHeader([secret], 'evt_1', at, body),
    };
    assert.deepEqual(new Webhook(secret).verify(body, headers), JSON.parse(body));
    assert.throws(() => new Webhook(secret).verify(body.replace('Zoë', 'Zoe'), headers));
  });

  it('signs with the old and the new secret during a rotation, each verifiable alone', () => {
    const [old, next] = [newSecret(), newSecret()];
    const at = new Date();
    const header = signatureHeader([next, old], 'bat_x', at, '{}');
    assert.equal(header.split(' ').length, 2);
    for (const secret of [old, next])
      new Webhook(secret).verify('{}', {
        'webhook-id': 'bat_x',
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': header,
      });
  });

  it('a body put together in bytes is the UTF-8 of the same body as one string, and its signature verifies (property, seeded)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: 'binary', maxLength: 300 }), { minLength: 1, maxLength: 20 }),
        fc.boolean(),
        (texts, batched) => {
          const messages = texts.map((text, i) => ({
            id: `evt_${i}`,
            type: 'event.created' as const,
            timestamp: 'x',
            json: JSON.stringify({ id: `evt_${i}`, text }),
          }));
          // Some already encoded (sent to NATS first), the others encoded straight into the body.
          for (const [i, m] of messages.entries()) if (i % 3 === 1) bytesOf(m);
          const now = new Date().toISOString();
          const asString = batched
            ? `{"type":"batch","timestamp":${JSON.stringify(now)},"data":[${messages.map((m) => m.json).join(',')}]}`
            : messages[0]!.json;
          const bytes = bodyOf(messages, batched, now);
          assert.ok(Buffer.from(asString, 'utf8').equals(bytes));
          const secret = newSecret();
          const at = new Date();
          assert.equal(signatureHeader([secret], 'bat_x', at, bytes), new Webhook(secret).sign('bat_x', at, asString));
        },
      ),
      { seed: 20261126, numRuns: 300 },
    );
  });
});
