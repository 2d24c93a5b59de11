// Erasure of a person (governance.md §3, the tests of §5): after a job no table holds any of the
// person's ids (every text and JSON column of every table scanned), the SQLite database file and its
// WAL hold none of their bytes, ingest for the person is refused from the request's answer on (also
// while the job runs, concurrently) and nothing of them is stored, the audit row holds no id, and a
// webhook destination receives `user.erased` after the person's earlier events. Also the admin API's
// errors and suppressions (listed, lifted), and `inlet users erase --wait`.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { sql } from 'kysely';
import {
  adminHeaders,
  bearer,
  createTestApp,
  dialect,
  problemOf,
  testConfig,
  testDatabase,
  type TestContext,
} from './helpers.js';
import { ConfigError } from '../src/config.js';
import { createServices } from '../src/services.js';
import { buildApp } from '../src/http/app.js';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.js';
import { cliEnv, inlet } from './support/cli.js';

let ctx: TestContext;
let receiver: WebhookReceiver;

before(async () => {
  ctx = await createTestApp({ suppressionRefreshMs: 100, erasurePollMs: 50 });
  receiver = await startWebhookReceiver();
});
after(async () => {
  await receiver.close();
  await ctx.close();
});

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });

async function admin(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, payload?: unknown) {
  return ctx.app.inject({
    method,
    url: `/admin/v1${url}`,
    headers: adminHeaders(),
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
}

async function track(key: string, subjectId: string, name = 'order_completed') {
  return ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events',
    headers: bearer(key),
    payload: { event: name, subject_type: 'user', subject_id: subjectId, properties: { total: 1 } },
  });
}

/** Every text/JSON value of every table, as text, with the table and column it sits in. */
async function everyStoredText(): Promise<Array<{ table: string; column: string; text: string }>> {
  const db = ctx.services.storage.db;
  const found: Array<{ table: string; column: string; text: string }> = [];
  if (dialect === 'sqlite') {
    const tables = await sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`.execute(db);
    for (const { name } of tables.rows) {
      const rows = await sql<Record<string, unknown>>`SELECT * FROM ${sql.id(name)}`.execute(db);
      for (const row of rows.rows)
        for (const [column, value] of Object.entries(row))
          if (typeof value === 'string') found.push({ table: name, column, text: value });
    }
    return found;
  }
  const columns = await sql<{
    table_name: string;
    column_name: string;
  }>`SELECT c.table_name, c.column_name FROM information_schema.columns c
      JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
     WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
       AND c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'uuid', 'ARRAY')`.execute(db);
  for (const { table_name: table, column_name: column } of columns.rows) {
    const rows = await sql<{ v: string | null }>`SELECT ${sql.id(column)}::text AS v FROM ${sql.id(table)}`.execute(db);
    for (const row of rows.rows) if (row.v !== null) found.push({ table, column, text: row.v });
  }
  return found;
}

async function whereFound(needles: string[]): Promise<string[]> {
  const texts = await everyStoredText();
  const hits: string[] = [];
  for (const needle of needles)
    for (const t of texts) if (t.text.includes(needle)) hits.push(`${needle} in ${t.table}.${t.column}`);
  return hits;
}

async function flushRecorders(): Promise<void> {
  await ctx.services.rejections.flush();
  await ctx.services.governance.plans.flush();
}

describe('erasure: every linked id gone from every table and the SQLite files', () => {
  const canonical = 'erase-me-7f3a';
  const older = 'erase-me-old-91c2';
  const anonymous = 'anon-erase-5d1e';
  const email = 'erase.me.q7@example.test';
  const trait = 'Trait Value Q8Z';
  const keep = 'keep-bob-22x';
  let productId: string;
  let key: string;

  before(async () => {
    const product = await ctx.product('erasure');
    productId = product.id;
    key = product.eventsKey;
    // Violations: a plan in warn, unplanned events recorded with their subject.
    assert.equal(
      (await admin('PUT', `/products/${productId}/tracking_plan`, { mode: 'warn', unplanned: 'warn', events: {} }))
        .statusCode,
      200,
    );
    const identify = (externalId: string, body: Record<string, unknown>) =>
      ctx.app.inject({
        method: 'POST',
        url: '/api/v2/identify',
        headers: bearer(key),
        payload: { external_id: externalId, ...body },
      });
    assert.equal((await identify(canonical, { identifiers: { email }, traits: { name: trait } })).statusCode, 201);
    assert.equal((await identify(older, { traits: { plan: 'old plan' } })).statusCode, 201);
    // A merge with history: the older user becomes an alias of the canonical one.
    assert.equal(
      (
        await ctx.app.inject({
          method: 'POST',
          url: '/api/v2/alias',
          headers: bearer(key),
          payload: { from_external_id: older, to_external_id: canonical },
        })
      ).statusCode,
      200,
    );
    for (const id of [canonical, older, anonymous, keep]) assert.equal((await track(key, id)).statusCode, 201);
    // Segment calls: an anonymous → user link, a group call (subject: the account), an anonymous page.
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: {
        batch: [
          { type: 'track', event: 'Viewed Cart', userId: canonical, anonymousId: anonymous, messageId: 'msg-seg-1' },
          { type: 'group', groupId: 'acct-1', userId: canonical, messageId: 'msg-seg-2', traits: { plan: 'team' } },
          { type: 'page', anonymousId: anonymous, name: 'Home', messageId: 'msg-seg-3' },
          // A rejection naming the person (recorded with the item) and one naming the kept person.
          {
            type: 'track',
            event: 'Late',
            userId: canonical,
            timestamp: '1970-01-01T00:00:00Z',
            messageId: 'msg-seg-4',
          },
          { type: 'track', event: 'Late', userId: keep, timestamp: '1970-01-01T00:00:00Z', messageId: 'msg-seg-5' },
        ],
      },
    });
    assert.equal(segment.statusCode, 200, segment.body);
    assert.equal(segment.json().rejected.length, 2);
    // A native batch rejection naming the older id.
    const native = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(key),
      payload: { events: [{ subject_type: 'user', subject_id: older, event: 'nosep' }] },
    });
    assert.equal(native.statusCode, 207);
    await flushRecorders();
    const before = await whereFound([canonical, older, anonymous, email, trait, keep]);
    for (const needle of [canonical, older, anonymous, email, trait, keep]) {
      assert.ok(
        before.some((hit) => hit.startsWith(`${needle} in`)),
        `the scan finds ${needle} before the erasure`,
      );
    }
    assert.ok(
      before.some((hit) => hit.startsWith(`${canonical} in rejections.`)),
      'a rejection names the person',
    );
    assert.ok(
      before.some((hit) => hit.startsWith(`${canonical} in plan_violations.`)),
      'a violation names the person',
    );
    assert.ok(
      before.some((hit) => hit.startsWith(`${older} in user_merges.`)),
      'the merge history names the older id',
    );
  });

  it('answers 202 with the job, resolving the person from an anonymous id; every linked id is suppressed', async () => {
    const res = await admin('POST', `/products/${productId}/erasures`, {
      external_id: anonymous,
      reason: 'ticket 4411',
    });
    assert.equal(res.statusCode, 202, res.body);
    const job = res.json().data;
    assert.match(job.id, /^era_[0-9a-f]{32}$/);
    assert.ok(['pending', 'running'].includes(job.status));
    assert.equal(job.counts.ids, 3, 'canonical, merged and anonymous ids');
    assert.equal(job.reason, 'ticket 4411');
    assert.ok(!JSON.stringify(job).includes(anonymous), 'the answer holds no id');
    // From the answer on, every linked id is refused, natively and through Segment.
    for (const id of [canonical, older, anonymous]) {
      const refused = await track(key, id);
      assert.equal(refused.statusCode, 409);
      assert.equal(problemOf(refused).code, 'subject_suppressed');
      assert.ok(!refused.body.includes(id), 'the refusal does not repeat the id');
    }
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(key),
      payload: { external_id: older, traits: { back: true } },
    });
    assert.equal(problemOf(identify).code, 'subject_suppressed');
    const alias = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(key),
      payload: { from_external_id: 'new-device-1', to_external_id: canonical },
    });
    assert.equal(problemOf(alias).code, 'subject_suppressed');
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: {
        batch: [
          { type: 'track', event: 'Back', anonymousId: anonymous, messageId: 'msg-after-1' },
          { type: 'track', event: 'Fine', userId: keep, messageId: 'msg-after-2' },
        ],
      },
    });
    assert.deepEqual(
      segment.json().rejected.map((r: { code: string; index: number }) => [r.index, r.code]),
      [[0, 'subject_suppressed']],
    );
    assert.equal(segment.json().accepted, 1);
    assert.equal((await track(key, keep)).statusCode, 201, 'another person is unaffected');

    const done = await ctx.services.erasure.runNow(productId, job.id);
    assert.equal(done.status, 'done');
    // canonical: identify-free native event + Segment track + group; older: 1; anonymous: native + page.
    assert.deepEqual(
      {
        events: done.counts.events,
        ids: done.counts.ids,
        identifiers: done.counts.identifiers,
        merges: done.counts.merges,
      },
      { events: 6, ids: 3, identifiers: 1, merges: 2 }, // the alias, and the Segment anonymous → user link
    );
    assert.ok(done.counts.rejections >= 2, `rejections naming the person: ${done.counts.rejections}`);
    assert.ok(done.counts.violations >= 1);
    assert.ok(done.counts.traits >= 2);

    const listed = await admin('GET', `/products/${productId}/erasures/${job.id}`);
    assert.equal(listed.json().data.status, 'done');
    assert.match(listed.json().data.external_id_hmac, /^[0-9a-f]{64}$/);
    // "Was this id erased?" is answered by hashing it again.
    const byId = await admin('GET', `/products/${productId}/erasures?external_id=${anonymous}`);
    assert.deepEqual(
      byId.json().data.map((j: { id: string }) => j.id),
      [job.id],
    );
    assert.deepEqual((await admin('GET', `/products/${productId}/erasures?external_id=someone-else`)).json().data, []);
  });

  it('leaves none of the ids, identifiers or traits in any text or JSON column of any table', async () => {
    await flushRecorders();
    const hits = await whereFound([canonical, older, anonymous, email, trait]);
    assert.deepEqual(hits, []);
    assert.ok((await whereFound([keep])).length > 0, 'the other person is still there');
    const user = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${productId}/users/${canonical}`,
      headers: adminHeaders(),
    });
    assert.equal(user.statusCode, 404);
    const rejections = (await admin('GET', `/products/${productId}/rejections?code=subject_suppressed`)).json()
      .data as Array<{ item: unknown; message_id: unknown }>;
    assert.ok(rejections.length >= 5, 'refusals are listed');
    for (const r of rejections) {
      assert.equal(r.item, null, 'recorded without the item');
      assert.equal(r.message_id, null);
    }
  });

  it(
    'SQLite: neither the database file nor its WAL holds the bytes of any id',
    { skip: dialect !== 'sqlite' },
    async () => {
      const path = ctx.database.databaseUrl.slice('sqlite:'.length);
      for (const file of [path, `${path}-wal`]) {
        if (!existsSync(file)) continue;
        const bytes = readFileSync(file);
        for (const needle of [canonical, older, anonymous, email, trait]) {
          assert.equal(
            bytes.indexOf(Buffer.from(needle)),
            -1,
            `${needle} in ${file.endsWith('-wal') ? 'the WAL' : 'the database file'}`,
          );
        }
      }
      assert.ok(
        readFileSync(path).indexOf(Buffer.from(keep)) >= 0 ||
          readFileSync(`${path}-wal`).indexOf(Buffer.from(keep)) >= 0,
        'the scan of the files finds a kept id',
      );
    },
  );

  it(
    'PostgreSQL: the tables the job deleted from were vacuumed (dead rows gone from disk)',
    { skip: dialect !== 'postgres' },
    async () => {
      const stats = await sql<{
        relname: string;
        last_vacuum: Date | null;
      }>`SELECT relname, last_vacuum FROM pg_stat_user_tables
        WHERE schemaname = current_schema() AND relname IN ('users', 'user_ids', 'rejections', 'identity_messages', 'plan_violations', 'event_dedup')`.execute(
        ctx.services.storage.db,
      );
      assert.equal(stats.rows.length, 6);
      for (const row of stats.rows) assert.notEqual(row.last_vacuum, null, `${row.relname} vacuumed`);
    },
  );

  it('lists suppressions as HMACs; lifting one lets its id in again', async () => {
    const list = await admin('GET', `/products/${productId}/suppressions`);
    assert.equal(list.statusCode, 200);
    assert.equal(list.json().data.length, 3);
    assert.ok(!list.body.includes(canonical));
    const one = (await admin('GET', `/products/${productId}/suppressions?external_id=${older}`)).json().data;
    assert.equal(one.length, 1);
    assert.equal((await admin('DELETE', `/products/${productId}/suppressions/${one[0].id}`)).statusCode, 204);
    assert.equal((await admin('DELETE', `/products/${productId}/suppressions/${one[0].id}`)).statusCode, 404);
    assert.equal((await track(key, older)).statusCode, 201, 'lifted: accepted again');
    assert.equal((await track(key, canonical)).statusCode, 409, 'the others stay suppressed');
  });
});

describe('erasure: concurrent ingest for the person is refused from the request on and leaves nothing', () => {
  it('every item sent after the 202 is refused; nothing of the person is stored after the job', async () => {
    const product = await ctx.product('concurrent');
    const key = product.eventsKey;
    const person = 'conc-person-3b9';
    const other = 'conc-other-8d1';
    for (let i = 0; i < 50; i++) assert.equal((await track(key, person)).statusCode, 201);
    let answeredAt = Infinity;
    const results: Array<{ sentAt: number; status: number; subject: string }> = [];
    let stop = false;
    const senders = [person, person, other].map(async (subject) => {
      while (!stop) {
        const sentAt = performance.now();
        const res = await track(key, subject);
        results.push({ sentAt, status: res.statusCode, subject });
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const requested = await admin('POST', `/products/${product.id}/erasures`, { external_id: person });
    answeredAt = performance.now();
    assert.equal(requested.statusCode, 202);
    const job = requested.json().data;
    const done = ctx.services.erasure.runNow(product.id, job.id);
    await new Promise((resolve) => setTimeout(resolve, 200));
    stop = true;
    await Promise.all(senders);
    const finished = await done;
    assert.equal(finished.status, 'done');
    const afterAnswer = results.filter((r) => r.subject === person && r.sentAt >= answeredAt);
    assert.ok(afterAnswer.length > 0, 'the person sent during the job');
    assert.deepEqual([...new Set(afterAnswer.map((r) => r.status))], [409]);
    const stored = await ctx.services.storage.events.listBySubjects(product.id, 'user', [person], 1000);
    assert.equal(stored.length, 0, 'nothing of the person is stored');
    const otherStored = await ctx.services.storage.events.listBySubjects(product.id, 'user', [other], 100_000);
    assert.equal(
      otherStored.length,
      results.filter((r) => r.subject === other && r.status === 201).length,
      'the other person lost nothing',
    );
    assert.ok(finished.counts.events >= 50);
  });
});

describe("erasure: a webhook destination receives user.erased after the person's earlier events", () => {
  it('in position order, with every linked id and the erasure id; the message is gone once delivered', async () => {
    const product = await ctx.product('downstream');
    const key = product.eventsKey;
    const created = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'webhook',
      name: 'erase-sink',
      url: receiver.url,
      start: 'beginning',
    });
    assert.equal(created.statusCode, 201, created.body);
    receiver.secrets = [created.json().data.secret];
    const person = 'dest-person-6c2';
    const anonymous = 'dest-anon-6c2';
    assert.equal((await track(key, person)).statusCode, 201);
    assert.equal((await track(key, anonymous)).statusCode, 201);
    assert.equal(
      (
        await ctx.app.inject({
          method: 'POST',
          url: '/api/v2/alias',
          headers: bearer(key),
          payload: { from_external_id: anonymous, to_external_id: person },
        })
      ).statusCode,
      200,
    );
    assert.equal((await track(key, person)).statusCode, 201);
    const requested = await admin('POST', `/products/${product.id}/erasures`, { external_id: person });
    const job = requested.json().data;
    for (let i = 0; i < 20 && !receiver.accepted.some((m) => m.type === 'user.erased'); i++) {
      await ctx.services.destinations.tick();
      await ctx.services.destinations.idle();
    }
    assert.equal(receiver.unverified, 0);
    const types = receiver.accepted.map((m) => m.type);
    assert.deepEqual(types, ['event.created', 'event.created', 'user.merged', 'event.created', 'user.erased']);
    const erased = receiver.accepted.at(-1)!;
    assert.deepEqual(erased.data, { external_ids: [anonymous, person].sort(), erasure_id: job.id });
    const done = await ctx.services.erasure.runNow(product.id, job.id);
    assert.equal(done.status, 'done');
    const left = (await everyStoredText()).filter((t) => t.text.includes(person) || t.text.includes(anonymous));
    assert.deepEqual(
      left.map((t) => `${t.table}.${t.column}`),
      [],
      'the delivered user.erased message is swept too',
    );
  });
});

describe('erasure: admin API errors and the CLI', () => {
  it('400 names the field; 404 for an unknown job or product; 401 without the token', async () => {
    const product = await ctx.product('errors');
    const missing = await admin('POST', `/products/${product.id}/erasures`, { reason: 'x' });
    assert.equal(missing.statusCode, 400);
    assert.ok(
      problemOf(missing).errors?.some((e) => e.pointer === '/external_id'),
      missing.body,
    );
    const placeholder = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'undefined' });
    assert.equal(problemOf(placeholder).errors?.[0]?.pointer, '/external_id');
    assert.equal(
      (await admin('GET', `/products/${product.id}/erasures/era_00000000000000000000000000000000`)).statusCode,
      404,
    );
    assert.equal((await admin('POST', '/products/prd_missing/erasures', { external_id: 'x' })).statusCode, 404);
    const anonymousCall = await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${product.id}/erasures` });
    assert.equal(anonymousCall.statusCode, 401);
    const badCursor = await admin('GET', `/products/${product.id}/erasures?cursor=xyz`);
    assert.equal(problemOf(badCursor).errors?.[0]?.pointer, '/cursor');
  });

  it('an id that resolves to nobody is still suppressed (202, counts zero)', async () => {
    const product = await ctx.product('nobody');
    const res = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'never-seen-1' });
    assert.equal(res.statusCode, 202);
    const done = await ctx.services.erasure.runNow(product.id, res.json().data.id);
    assert.deepEqual(
      { ...done.counts },
      { ids: 1, events: 0, identifiers: 0, traits: 0, merges: 0, identity_messages: 0, rejections: 0, violations: 0 },
    );
    assert.equal((await track(product.eventsKey, 'never-seen-1')).statusCode, 409);
  });

  it('inlet users erase --wait prints progress and the final counts; the audit entry holds no id', async () => {
    const product = await ctx.product('cli');
    for (let i = 0; i < 3; i++) assert.equal((await track(product.eventsKey, 'cli-person-4e7')).statusCode, 201);
    const env = { ...cliEnv(ctx.database), INLET_SUPPRESSION_REFRESH_MS: '50' };
    const result = await inlet(env, 'users', 'erase', '--product', product.id, 'cli-person-4e7', '--wait');
    assert.equal(result.code, 0, result.err);
    assert.match(result.out, /1 linked id\(s\) suppressed/);
    assert.match(result.out, /running \(events\)/, 'progress');
    assert.match(result.out, /done at .*: ids 1, events 3,/);
    const audit = await inlet(env, 'users', 'erasures', '--product', product.id, '--json');
    assert.equal(audit.code, 0, audit.err);
    assert.ok(!audit.out.includes('cli-person-4e7'));
    assert.equal(JSON.parse(audit.out).data[0].status, 'done');
    // The server's copy of the suppressions follows the CLI's write within the refresh time.
    await new Promise((resolve) => setTimeout(resolve, 150));
    assert.equal((await track(product.eventsKey, 'cli-person-4e7')).statusCode, 409);
  });
});

describe('erasure: across instances and restarts', () => {
  it('another instance (same database) refuses the ids from the 202 on, although its copy was fresh just before', async () => {
    const product = await ctx.product('two-instances');
    const other = await createServices(testConfig(ctx.database.databaseUrl, { suppressionRefreshMs: 100 }), {
      ...(ctx.database.postgresSchema === undefined ? {} : { postgresSchema: ctx.database.postgresSchema }),
      defaultMetrics: false,
    });
    const otherApp = await buildApp(other, { logger: false });
    await otherApp.ready();
    try {
      const viaOther = (subject: string) =>
        otherApp.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(product.eventsKey),
          payload: { event: 'order_completed', subject_type: 'user', subject_id: subject },
        });
      // The other instance loads its copy now (fresh for its 100 ms, like this instance's): without the suppression.
      assert.equal((await viaOther('multi-person-1')).statusCode, 201);
      const requested = await ctx.app.inject({
        method: 'POST',
        url: `/admin/v1/products/${product.id}/erasures`,
        headers: adminHeaders(),
        payload: { external_id: 'multi-person-1' },
      });
      assert.equal(requested.statusCode, 202);
      const refused = await viaOther('multi-person-1');
      assert.equal(refused.statusCode, 409, 'refused by the other instance as soon as the request was answered');
      assert.equal(problemOf(refused).code, 'subject_suppressed');
      assert.equal((await viaOther('multi-person-2')).statusCode, 201);
    } finally {
      await otherApp.close();
      await other.close();
    }
  });

  it('refuses to start with another installation secret once suppressions were made with the first; a database with none takes it', async () => {
    const schema = ctx.database.postgresSchema === undefined ? {} : { postgresSchema: ctx.database.postgresSchema };
    // This database holds suppressions made with its generated key (the tests above).
    await assert.rejects(
      createServices(
        testConfig(ctx.database.databaseUrl, { installationSecret: 'a-new-secret-0123456789abcdefghijklmnop' }),
        { ...schema, defaultMetrics: false },
      ),
      (error: Error) =>
        error instanceof ConfigError &&
        /INLET_INSTALLATION_SECRET/.test(error.message) &&
        /hmac-fingerprint/.test(error.message),
    );
    const same = await createServices(testConfig(ctx.database.databaseUrl), { ...schema, defaultMetrics: false });
    await same.close();

    const fresh = testDatabase();
    const freshSchema = fresh.postgresSchema === undefined ? {} : { postgresSchema: fresh.postgresSchema };
    try {
      const first = await createServices(
        testConfig(fresh.databaseUrl, { installationSecret: 'first-secret-0123456789abcdefghijklmnop' }),
        { ...freshSchema, defaultMetrics: false },
      );
      await first.close();
      // Nothing was keyed with the first: the new key is recorded instead.
      const second = await createServices(
        testConfig(fresh.databaseUrl, { installationSecret: 'second-secret-0123456789abcdefghijklmno' }),
        { ...freshSchema, defaultMetrics: false },
      );
      const product = { id: 'prd_fingerprint', name: 'fp', createdAt: new Date().toISOString() };
      await second.storage.products.create(product);
      await second.erasure.request(product.id, 'someone', null);
      await second.close();
      await assert.rejects(
        createServices(
          testConfig(fresh.databaseUrl, { installationSecret: 'first-secret-0123456789abcdefghijklmnop' }),
          { ...freshSchema, defaultMetrics: false },
        ),
        ConfigError,
      );
    } finally {
      await fresh.drop();
    }
  });

  it(
    'instances starting at once on a database without a key fingerprint all start (PostgreSQL: one SQLite file has one server)',
    { skip: dialect !== 'postgres' },
    async () => {
      const fresh = testDatabase();
      const freshSchema = fresh.postgresSchema === undefined ? {} : { postgresSchema: fresh.postgresSchema };
      const config = testConfig(fresh.databaseUrl, { installationSecret: 'shared-secret-0123456789abcdefghijklmno' });
      try {
        // Migrated first, then its keys removed, so that the instances meet at the key check rather than queue
        // behind the migrations.
        const first = await createServices(config, { ...freshSchema, defaultMetrics: false });
        await sql`DELETE FROM installation_secrets`.execute(first.storage.db);
        await first.close();
        const started = await Promise.allSettled(
          Array.from({ length: 4 }, () => createServices(config, { ...freshSchema, defaultMetrics: false })),
        );
        for (const result of started) if (result.status === 'fulfilled') await result.value.close();
        assert.deepEqual(
          started.map((result) => (result.status === 'fulfilled' ? 'started' : String(result.reason))),
          ['started', 'started', 'started', 'started'],
        );
      } finally {
        await fresh.drop();
      }
    },
  );

  it('a job whose instance died (its lease expired) is resumed at its phase by another runner; a live lease is not taken', async () => {
    const product = await ctx.product('resume');
    for (let i = 0; i < 5; i++) assert.equal((await track(product.eventsKey, 'resume-person-1')).statusCode, 201);
    const job = (await admin('POST', `/products/${product.id}/erasures`, { external_id: 'resume-person-1' })).json()
      .data;
    const db = ctx.services.storage.db.withTables<{
      erasures: { product_id: string; id: string; status: string; lease_holder: string | null; lease_until: number };
    }>();
    // A dead instance had started the job and holds a lease that is still valid.
    await db
      .updateTable('erasures')
      .set({ status: 'running', lease_holder: 'dead-instance', lease_until: Date.now() + 60_000 })
      .where('id', '=', job.id)
      .execute();
    ctx.services.erasure.start();
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(
      (await admin('GET', `/products/${product.id}/erasures/${job.id}`)).json().data.status,
      'running',
      'a live lease is respected',
    );
    // Its lease runs out: the runner of this instance takes the job over and finishes it.
    await db
      .updateTable('erasures')
      .set({ lease_until: Date.now() - 1 })
      .where('id', '=', job.id)
      .execute();
    let status = '';
    for (let i = 0; i < 100 && status !== 'done'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      status = (await admin('GET', `/products/${product.id}/erasures/${job.id}`)).json().data.status;
    }
    await ctx.services.erasure.close();
    assert.equal(status, 'done');
    const finished = (await admin('GET', `/products/${product.id}/erasures/${job.id}`)).json().data;
    assert.equal(finished.counts.events, 5);
    assert.equal(
      (await ctx.services.storage.events.listBySubjects(product.id, 'user', ['resume-person-1'], 10)).length,
      0,
    );
  });
});
