// `inlet destinations …` (events-out §6: "the same in the CLI"), on the backend under test, as an operator runs
// it beside a server: create, list, show, edit, pause / resume, replay, rotate-secret, the delivery log, delete;
// usage errors exit 2, refused input exits 1 naming the field. The deliveries come from a deliverer on the same
// database (services of the test's own) to a receiver that verifies every request with `standardwebhooks`.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildApp } from '../src/http/app.js';
import { bearer, createTestServices } from './helpers.js';
import { cliTestDatabase } from './support/cli.js';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.js';

const { cli, database } = cliTestDatabase();
let receiver: WebhookReceiver;

before(async () => {
  receiver = await startWebhookReceiver();
});
after(async () => receiver.close());

const json = (out: string) => JSON.parse(out).data;

async function product(name: string): Promise<string> {
  return json((await cli('products', 'create', name, '--json')).out).id as string;
}

async function webhook(productId: string, ...extra: string[]) {
  const created = await cli(
    'destinations',
    'create',
    '--product',
    productId,
    '--type',
    'webhook',
    '--name',
    'hook',
    '--url',
    receiver.url,
    ...extra,
    '--json',
  );
  assert.equal(created.code, 0, created.err);
  return json(created.out);
}

describe('inlet destinations', () => {
  it('create prints the secret once (and says so); list and show give status, lag and cursor', async () => {
    const p = await product('Cli');
    const human = await cli(
      'destinations',
      'create',
      '--product',
      p,
      '--type',
      'webhook',
      '--name',
      'first',
      '--url',
      receiver.url,
      '--types',
      'event.created',
      '--max-messages',
      '10',
    );
    assert.equal(human.code, 0, human.err);
    assert.match(human.out, /^secret\s+whsec_/m);
    assert.match(human.err, /shown only now/);
    const id = /^id\s+(dst_\S+)/m.exec(human.out)![1]!;

    const listed = await cli('destinations', 'list', '--product', p);
    assert.equal(listed.code, 0, listed.err);
    const [header, row] = listed.out.split('\n');
    assert.match(header!, /^ID\s+TYPE\s+NAME\s+STATUS\s+LAG/);
    assert.match(row!, new RegExp(`^${id}\\s+webhook\\s+first\\s+active\\s+0\\s`));

    const shown = json((await cli('destinations', 'show', id, '--product', p, '--json')).out);
    assert.equal(shown.id, id);
    assert.deepEqual(shown.filter, { types: ['event.created'] });
    assert.deepEqual(shown.batch, { max_messages: 10, max_wait_ms: 0 });
    assert.equal(shown.secret, undefined, 'the secret is never shown again');
    assert.equal(typeof shown.cursor, 'string');

    // Another product's destination is not found through this one.
    const other = await product('Other');
    const elsewhere = await cli('destinations', 'show', id, '--product', other);
    assert.equal(elsewhere.code, 1);
    assert.match(elsewhere.err, /No destination "dst_/);
    assert.match((await cli('destinations', 'list', '--product', other)).out, /no destinations/);
  });

  it('edit changes only what it is given: filter parts and batch settings merge with the current ones', async () => {
    const p = await product('Edit');
    const d = await webhook(
      p,
      '--types',
      'event.created',
      '--sources',
      'api',
      '--max-messages',
      '50',
      '--max-wait-ms',
      '200',
    );

    const renamed = json((await cli('destinations', 'edit', d.id, '--product', p, '--name', 'billing', '--json')).out);
    assert.equal(renamed.name, 'billing');
    assert.deepEqual(renamed.filter, { types: ['event.created'], sources: ['api'] });
    assert.deepEqual(renamed.batch, { max_messages: 50, max_wait_ms: 200 });

    // One filter part and one batch setting: the others stay.
    const narrowed = json(
      (
        await cli(
          'destinations',
          'edit',
          d.id,
          '--product',
          p,
          '--canonical-names',
          'order_placed, order_paid',
          '--max-messages',
          '100',
          '--json',
        )
      ).out,
    );
    assert.deepEqual(narrowed.filter, {
      types: ['event.created'],
      canonical_names: ['order_placed', 'order_paid'],
      sources: ['api'],
    });
    assert.deepEqual(narrowed.batch, { max_messages: 100, max_wait_ms: 200 });

    // An empty value removes that part of the filter.
    const widened = json(
      (await cli('destinations', 'edit', d.id, '--product', p, '--sources', '', '--types', '', '--json')).out,
    );
    assert.deepEqual(widened.filter, { canonical_names: ['order_placed', 'order_paid'] });

    const moved = json(
      (await cli('destinations', 'edit', d.id, '--product', p, '--url', `${receiver.url}/v2`, '--json')).out,
    );
    assert.equal(moved.url, `${receiver.url}/v2`);
    assert.equal(moved.name, 'billing');

    // Nothing to change is a usage error; refused values exit 1 naming the field; nothing changed by either.
    const nothing = await cli('destinations', 'edit', d.id, '--product', p);
    assert.equal(nothing.code, 2);
    assert.match(nothing.err, /nothing to change/);
    const badBatch = await cli('destinations', 'edit', d.id, '--product', p, '--max-messages', '0');
    assert.equal(badBatch.code, 1);
    assert.match(badBatch.err, /\/batch\/max_messages/);
    const badType = await cli('destinations', 'edit', d.id, '--product', p, '--types', 'event.deleted');
    assert.equal(badType.code, 1);
    assert.match(badType.err, /\/filter\/types/);
    const notANumber = await cli('destinations', 'edit', d.id, '--product', p, '--max-wait-ms', 'soon');
    assert.equal(notANumber.code, 2);
    assert.match(notANumber.err, /--max-wait-ms must be a whole number/);
    const unchanged = json((await cli('destinations', 'show', d.id, '--product', p, '--json')).out);
    assert.deepEqual(unchanged.batch, { max_messages: 100, max_wait_ms: 200 });
    assert.deepEqual(unchanged.filter, { canonical_names: ['order_placed', 'order_paid'] });

    // A NATS destination has no url to edit.
    const nats = await cli(
      'destinations',
      'create',
      '--product',
      p,
      '--type',
      'nats',
      '--name',
      'stream',
      '--servers',
      'nats://127.0.0.1:4222',
      '--subject',
      'inlet.{canonical_name}',
      '--json',
    );
    assert.equal(nats.code, 0, nats.err);
    const natsUrl = await cli('destinations', 'edit', json(nats.out).id, '--product', p, '--url', receiver.url);
    assert.equal(natsUrl.code, 1);
    assert.match(natsUrl.err, /\/url: is for webhook destinations/);
  });

  it('pause, resume, replay, rotate-secret, the delivery log and delete, against a running deliverer', async () => {
    const p = await product('Deliver');
    const key = json(
      (await cli('keys', 'create', '--product', p, '--kind', 'events', '--name', 'backend', '--json')).out,
    ).key as string;
    const d = await webhook(p, '--max-messages', '10');
    receiver.secrets = [d.secret];

    // A server on the same database: it stores events and delivers (the CLI only changes the destination).
    const server = await createTestServices({}, database());
    const app = await buildApp(server.services, { logger: false });
    const deliver = async () => {
      for (let i = 0; i < 3; i++) {
        await server.services.destinations.tick();
        await server.services.destinations.idle();
      }
    };
    try {
      const send = async (n: number) => {
        for (let i = 0; i < n; i++) {
          const res = await app.inject({
            method: 'POST',
            url: '/api/v2/events',
            headers: bearer(key),
            payload: { subject_type: 'user', subject_id: `u${i}`, event_type: 'order', action: 'placed' },
          });
          assert.equal(res.statusCode, 201, res.body);
        }
      };
      const ours = () => receiver.accepted.filter((m) => m.type === 'event.created').length;
      const before = ours();

      assert.equal(json((await cli('destinations', 'pause', d.id, '--product', p, '--json')).out).status, 'paused');
      await send(3);
      await deliver();
      assert.equal(ours(), before, 'a paused destination delivers nothing');
      assert.equal(json((await cli('destinations', 'show', d.id, '--product', p, '--json')).out).lag, 3);

      assert.equal(json((await cli('destinations', 'resume', d.id, '--product', p, '--json')).out).status, 'active');
      await deliver();
      assert.equal(ours(), before + 3);
      const caughtUp = json((await cli('destinations', 'show', d.id, '--product', p, '--json')).out);
      assert.equal(caughtUp.lag, 0);
      assert.equal(caughtUp.delivered, 3);

      const log = await cli('destinations', 'deliveries', d.id, '--product', p);
      assert.equal(log.code, 0, log.err);
      assert.match(log.out.split('\n')[0]!, /^ATTEMPTED_AT\s+ATTEMPT\s+OUTCOME\s+STATUS/);
      assert.match(log.out.split('\n')[1]!, /\s1\s+success\s+204\s/);
      const logged = json((await cli('destinations', 'deliveries', d.id, '--product', p, '--json')).out);
      assert.equal(logged[0].message_ids.length, 3);
      assert.equal((await cli('destinations', 'deliveries', d.id, '--product', p, '--limit', '0')).code, 2);

      // Replay from the beginning re-delivers the same messages, with the same ids.
      const replayed = json(
        (await cli('destinations', 'replay', d.id, '--product', p, '--from', 'beginning', '--json')).out,
      );
      assert.equal(replayed.lag, 3);
      await deliver();
      const ids = receiver.accepted.filter((m) => m.type === 'event.created').map((m) => m.id);
      assert.deepEqual(ids.slice(-3), ids.slice(-6, -3));
      assert.equal((await cli('destinations', 'replay', d.id, '--product', p, '--from', 'yesterday')).code, 1);

      // A new secret: both signatures are sent while the old one is honoured, so a receiver knowing only the new one verifies.
      const rotated = json((await cli('destinations', 'rotate-secret', d.id, '--product', p, '--json')).out);
      assert.match(rotated.secret, /^whsec_/);
      assert.notEqual(rotated.secret, d.secret);
      assert.equal(typeof rotated.previous_secret_until, 'string');
      receiver.secrets = [rotated.secret];
      const unverifiedBefore = receiver.unverified;
      await send(1);
      await deliver();
      assert.equal(ours(), before + 7);
      assert.equal(receiver.unverified, unverifiedBefore);

      const deleted = await cli('destinations', 'delete', d.id, '--product', p);
      assert.equal(deleted.out, `deleted ${d.id}`);
      assert.equal((await cli('destinations', 'show', d.id, '--product', p)).code, 1);
      assert.match((await cli('destinations', 'list', '--product', p)).out, /no destinations/);
    } finally {
      await app.close();
      await server.services.close();
    }
  });

  it('create and edit take --transformation <file.json>; none removes it; an invalid file exits 1 with pointers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'inlet-dest-tf-'));
    try {
      const p = await product('CliTransform');
      const good = join(dir, 'good.json');
      writeFileSync(good, JSON.stringify({ steps: [{ kind: 'mask', paths: ['properties.email'], with: 'hash' }] }));
      const d = await webhook(p, '--transformation', good);
      assert.deepEqual(d.transformation, {
        steps: [{ kind: 'mask', paths: ['properties.email'], with: 'hash', on_error: 'reject' }],
      });
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify({ steps: [{ kind: 'remove', paths: ['type'] }] }));
      const refused = await cli('destinations', 'edit', d.id, '--product', p, '--transformation', bad);
      assert.equal(refused.code, 1);
      assert.match(refused.err, /\/transformation\/steps\/0\/paths\/0: .*may not be changed/);
      const removed = await cli('destinations', 'edit', d.id, '--product', p, '--transformation', 'none', '--json');
      assert.equal(removed.code, 0, removed.err);
      assert.equal(json(removed.out).transformation, null);
      const missing = await cli(
        'destinations',
        'edit',
        d.id,
        '--product',
        p,
        '--transformation',
        join(dir, 'nope.json'),
      );
      assert.equal(missing.code, 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
