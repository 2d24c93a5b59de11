// A transformation version that this instance cannot fully run (transformations.md §1, §8): stored where it could
// run (an instance with INLET_GEOIP_DATABASE; a release that knows a step kind this one does not), read here by a
// second instance on the same database without the database. The version still applies, here too and within the
// refresh bound: its masks always run, and each step this instance cannot run fails as a step error that its
// `on_error` decides (reject: refused as the steps before it left it; skip: a warning), logged and shown in
// `inlet_transformation_unavailable_steps`. Never the older version, never the event unmasked.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { REDACTED } from '../src/domain/transform-engine.js';
import type { Step } from '../src/domain/transform-types.js';
import { buildApp } from '../src/http/app.js';
import { createServices, type Services } from '../src/services.js';
import { bearer, createTestApp, problemOf, productAdmin, testConfig, type TestContext } from './helpers.js';
import { assertNoTrace, transformedProduct } from './support/transformations.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers, read field by field
type Row = Record<string, any>;

/** This instance (where the tests PUT) and the other one, without a GeoIP database, that every version is read by. */
let ctx: TestContext;
let other: Services;
let otherApp: FastifyInstance;
const logged: Array<{ details: Row; message: string }> = [];

before(async () => {
  ctx = await createTestApp();
  // It asks storage for a newer version at every request (a refresh in the background), so the tests need not wait
  // out a refresh interval.
  other = await createServices(testConfig(ctx.database.databaseUrl, { trackingPlanRefreshMs: 0 }), {
    ...(ctx.database.postgresSchema === undefined ? {} : { postgresSchema: ctx.database.postgresSchema }),
    defaultMetrics: false,
    log: { error: (details, message) => logged.push({ details, message }) },
  });
  otherApp = await buildApp(other, { logger: false });
  await otherApp.ready();
});
after(async () => {
  await otherApp?.close();
  await other?.close();
  await ctx.close();
});

/** Stores a version as an instance that can run all of it would (a geoip step, say): straight into storage. */
async function storeVersion(productId: string, steps: unknown[]): Promise<number> {
  const stored = await ctx.services.storage.transformations.put(productId, steps as Step[], new Date().toISOString());
  return stored.version;
}

const GEOIP_REJECT = { kind: 'geoip', from: 'context.ip', to: 'context.geo', on_error: 'reject' };
const GEOIP_SKIP = { ...GEOIP_REJECT, on_error: 'skip' };
const redact = (...paths: string[]) => ({ kind: 'mask', paths, with: 'redact', on_error: 'reject' });

async function product(name: string) {
  const p = await transformedProduct(ctx, name);
  let seq = 0;
  /** A native event sent to the other instance. */
  const send = (properties: Row, context?: Row) =>
    otherApp.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: {
        event: 'order.completed',
        subject_type: 'user',
        subject_id: 'u1',
        external_id: `${name}-${++seq}`,
        properties,
        ...(context === undefined ? {} : { context }),
      },
    });
  const rejections = async () => {
    await other.rejections.flush();
    return p.rejections();
  };
  return { ...p, send, rejections, otherAdmin: productAdmin(otherApp, p.id) };
}

/** The other instance's value of `inlet_transformation_unavailable_steps` for these labels (undefined: no series). */
async function unavailableSeries(labels: Record<string, string>): Promise<string | undefined> {
  const body = (await otherApp.inject({ method: 'GET', url: '/metrics' })).body;
  for (const line of body.split('\n')) {
    const match = /^inlet_transformation_unavailable_steps\{(.*)\} (\S+)$/.exec(line);
    if (match === null) continue;
    const found = Object.fromEntries([...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return match[2];
  }
  return undefined;
}

/** Asks until `check` holds, for work the other instance does off the request path (its refresh); bounded. */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const until = Date.now() + 10_000;
  while (!(await check())) {
    assert.ok(Date.now() < until, `${what} within 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('a version this instance cannot fully run', () => {
  it('an instance that held an older version takes the new one: its new mask applies, the geoip step is skipped with a warning', async () => {
    const p = await product('tf-unavailable-held');
    await p.put([{ kind: 'mask', paths: ['properties.email'], with: 'redact' }]);
    const first = await p.send({ email: 'ann@example.com', phone: 'not yet masked' });
    assert.equal(first.statusCode, 201, first.body);
    assert.deepEqual(first.json().data.properties, { email: REDACTED, phone: 'not yet masked' }, 'version 1 held');

    const version = await storeVersion(p.id, [redact('properties.email'), redact('properties.phone'), GEOIP_SKIP]);
    assert.equal(version, 2);
    // The other instance finds version 2 at a refresh (off the request path): tried on its version in force, which
    // stores nothing, until it answers with version 2's masks.
    await eventually('the other instance took version 2', async () => {
      const tried = await p.otherAdmin('POST', '/transformation/test', {
        items: [{ event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { phone: 'x' } }],
      });
      assert.equal(tried.statusCode, 200, tried.body);
      return tried.json().data[0].output?.properties.phone === REDACTED;
    });

    const marker = 'HELDPHONEMARKER';
    const res = await p.send({ email: 'bob@example.com', phone: marker }, { ip: '203.0.113.9' });
    assert.equal(res.statusCode, 201, res.body);
    assert.deepEqual(res.json().data.properties, { email: REDACTED, phone: REDACTED });
    assert.deepEqual(res.json().data.context, { ip: '203.0.113.9' }, 'the geoip step added nothing');
    const warnings = (await p.rejections()).filter((r) => r.severity === 'warning');
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0]!.code, 'transformation_error');
    assert.match(warnings[0]!.detail, /step 2 \(geoip\) failed: .*INLET_GEOIP_DATABASE/);
    await assertNoTrace(ctx, p, marker);

    const lines = logged.filter((l) => l.details.product_id === p.id);
    assert.deepEqual(
      lines.map((l) => [l.details.version, l.details.step, l.details.kind]),
      [[2, 2, 'geoip']],
      'one error line, though every request refreshed',
    );
    assert.match(lines[0]!.details.reason, /INLET_GEOIP_DATABASE/);
    assert.equal(await unavailableSeries({ product_id: p.id, version: '2', step: '2', kind: 'geoip' }), '1');

    // A version it can run replaces it there: the series goes with it.
    await p.put([redact('properties.email')]);
    await eventually('the other instance took version 3', async () => {
      await p.otherAdmin('GET', '/transformation');
      await p.send({ email: 'carl@example.com' });
      return (await unavailableSeries({ product_id: p.id })) === undefined;
    });
  });

  it('on_error reject: an item the step would look up is refused after the masks before it; the others are stored', async () => {
    const p = await product('tf-unavailable-reject');
    await storeVersion(p.id, [redact('properties.email'), GEOIP_REJECT]);
    const marker = 'REJECTEMAILMARKER';
    const refused = await p.send({ email: marker }, { ip: '203.0.113.9' });
    assert.equal(refused.statusCode, 422, refused.body);
    const problem = problemOf(refused);
    assert.equal(problem.code, 'transformation_error');
    assert.equal(problem.step, 1);
    assert.equal(problem.kind, 'geoip');
    assert.match(problem.detail, /INLET_GEOIP_DATABASE/);
    // Without an address there is nothing to look up: the step does what it would do with the database.
    const kept = await p.send({ email: `${marker}-2` });
    assert.equal(kept.statusCode, 201, kept.body);
    assert.deepEqual(kept.json().data.properties, { email: REDACTED });

    const recorded = await p.rejections();
    assert.equal(recorded.length, 1);
    assert.equal(recorded[0]!.code, 'transformation_error');
    assert.equal(recorded[0]!.item.properties.email, REDACTED, 'recorded as the mask before the step left it');
    await assertNoTrace(ctx, p, marker);
    assert.equal(await unavailableSeries({ product_id: p.id, version: '1', step: '1', kind: 'geoip' }), '1');
  });

  it('a function that does not compile here and a step this release cannot read fail in place, after the masks', async () => {
    const p = await product('tf-unavailable-function');
    await storeVersion(p.id, [
      redact('properties.email'),
      { kind: 'function', code: 'function transform(event) { return event', on_error: 'skip' },
      { kind: 'set', path: 'properties.after', value: true, on_error: 'reject' },
    ]);
    const skipped = await p.send({ email: 'eve@example.com' });
    assert.equal(skipped.statusCode, 201, skipped.body);
    assert.deepEqual(skipped.json().data.properties, { email: REDACTED, after: true }, 'the steps after it ran');
    const [warning] = (await p.rejections()).filter((r) => r.severity === 'warning');
    assert.match(warning!.detail, /step 1 \(function\) failed: the function did not compile on this instance/);

    const q = await product('tf-unavailable-unknown');
    // A kind of a later release, stored with `skip`: what it would do is unknown here, so it refuses every item.
    await storeVersion(q.id, [redact('properties.email'), { kind: 'teleport', to: 'mars', on_error: 'skip' }]);
    const marker = 'UNKNOWNKINDMARKER';
    const refused = await q.send({ email: marker });
    assert.equal(refused.statusCode, 422, refused.body);
    assert.match(problemOf(refused).detail, /step 1 .*cannot read the stored teleport step/);
    const recorded = await q.rejections();
    assert.equal(recorded[0]!.item.properties.email, REDACTED);
    await assertNoTrace(ctx, q, marker);
    assert.equal(await unavailableSeries({ product_id: q.id, step: '1', kind: 'teleport' }), '1');
  });
});
