// The pure parts of transformations.md §2–3: step validation (pointers into the body, defaults, paths a step
// may not touch), the engine (every declarative kind, where, on_error, drops, sampling) and, with fast-check,
// its invariants: the input is never changed and a masked value leaves no trace in the output.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { createHmac } from 'node:crypto';
import {
  applySteps,
  applyStepsToBatch,
  applyStepsToEach,
  maskHash,
  PathHashes,
  REDACTED,
  sameJson,
  type RunContext,
} from '../../src/domain/transform-engine.js';
import { parseSteps } from '../../src/domain/transform-validate.js';
import { draftOf } from '../../src/domain/transform-document.js';
import type { EventDraft } from '../../src/domain/events.js';
import { sharedJson } from '../../src/domain/shared-json.js';
import { getPath, movePath, removePath, setPath } from '../../src/domain/transform-paths.js';
import type { FunctionOutcome, Step, TransformDocument } from '../../src/domain/transform-types.js';

function steps(body: unknown): Step[] {
  const result = parseSteps(body, { geoip: true });
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.steps;
}

function doc(overrides: Partial<TransformDocument> = {}): TransformDocument {
  return {
    type: 'event',
    event: 'project_created',
    event_type: 'project',
    action: 'created',
    subject_type: 'user',
    subject_id: 'u1',
    occurred_at: '2026-11-28T10:00:00.000Z',
    properties: { plan: 'pro', email: 'a@example.com', nested: { card: '4111' } },
    context: { userAgent: 'Mozilla/5.0', ip: '192.0.2.1' },
    source: 'api',
    ...overrides,
  };
}

const context: RunContext = {
  secret: 'secret',
  messageId: 'm-1',
  meta: { product_id: 'p', key_id: 'k', route: 'v2' },
  enrichers: {
    userAgent: (ua) => ({ browser: { name: ua.startsWith('Mozilla') ? 'Firefox' : 'Other' } }),
    isBot: (ua) => /bot/i.test(ua),
  },
};

describe('parseSteps', () => {
  it('fills defaults and accepts every kind', () => {
    const parsed = steps({
      steps: [
        { kind: 'drop', where: { '==': [{ var: 'properties.plan' }, 'test'] } },
        { kind: 'sample', rate: 0.5 },
        { kind: 'rename_event', to: 'order.completed' },
        { kind: 'set', path: 'properties.x', value: { a: 1 } },
        { kind: 'remove', paths: ['properties.x'] },
        { kind: 'rename_property', from: 'properties.a', to: 'properties.b' },
        { kind: 'mask', paths: ['properties.email'], with: 'hash' },
        { kind: 'allow_properties', paths: ['properties.plan'] },
        { kind: 'user_agent' },
        { kind: 'bot' },
        { kind: 'geoip' },
        { kind: 'function', code: 'function transform(e) { return e; }' },
      ],
    });
    assert.equal(parsed.length, 12);
    assert.deepEqual(parsed[1], { kind: 'sample', rate: 0.5, by: 'message_id', on_error: 'reject' });
    assert.deepEqual(parsed[8], {
      kind: 'user_agent',
      from: 'context.userAgent',
      to: 'context.user_agent',
      on_error: 'reject',
    });
    assert.deepEqual(parsed[9], { kind: 'bot', from: 'context.userAgent', action: 'flag', on_error: 'reject' });
    assert.deepEqual(parsed[10], { kind: 'geoip', from: 'context.ip', to: 'context.geo', on_error: 'reject' });
  });

  it('points at each invalid field', () => {
    const result = parseSteps(
      {
        steps: [
          { kind: 'drop' },
          { kind: 'remove', paths: ['properties.a'] },
          { kind: 'remove', paths: ['type', 'properties.__proto__.x'] },
          { kind: 'set', path: 'external_id', value: 1 },
          { kind: 'nope' },
          { kind: 'sample', rate: 2, by: 'x' },
          { kind: 'drop', where: { log: 1 } },
          { kind: 'mask', paths: ['properties.a'], with: 'rot13' },
          { kind: 'rename_event', to: 'Bad Name' },
          { kind: 'drop', extra: 1 },
          { kind: 'remove', paths: ['subject_id'] },
          { kind: 'drop', on_error: 'ignore' },
        ],
      },
      { geoip: true },
    );
    assert.equal(result.ok, false);
    const pointers = result.ok ? [] : result.errors.map((e) => e.pointer);
    assert.deepEqual(pointers, [
      '/steps/2/paths/0',
      '/steps/2/paths/1',
      '/steps/3/path',
      '/steps/4/kind',
      '/steps/5/rate',
      '/steps/5/by',
      '/steps/6/where/log',
      '/steps/7/with',
      '/steps/8/to',
      '/steps/9/extra',
      '/steps/10/paths/0',
      '/steps/11/on_error',
    ]);
  });

  it('refuses a geoip step without a database, naming INLET_GEOIP_DATABASE', () => {
    const result = parseSteps({ steps: [{ kind: 'geoip' }] }, { geoip: false });
    assert.equal(result.ok, false);
    if (!result.ok) {
      assert.equal(result.errors[0]!.pointer, '/steps/0/kind');
      assert.match(result.errors[0]!.message, /INLET_GEOIP_DATABASE/);
    }
  });

  it('lets set change the top-level fields the spec names, and nothing else', () => {
    for (const path of ['event', 'subject_type', 'subject_id', 'occurred_at'])
      assert.equal(parseSteps({ steps: [{ kind: 'set', path, value: 'x' }] }, { geoip: false }).ok, true, path);
    for (const path of ['type', 'source', 'product_id', 'received_at', 'properties'])
      assert.equal(parseSteps({ steps: [{ kind: 'set', path, value: 'x' }] }, { geoip: false }).ok, false, path);
  });
});

describe('applySteps', () => {
  it('applies each declarative kind', () => {
    const result = applySteps(
      doc(),
      steps({
        steps: [
          { kind: 'rename_event', to: 'order.completed' },
          { kind: 'set', path: 'properties.meta.version', value: 2 },
          { kind: 'remove', paths: ['properties.missing', 'context.ip'] },
          { kind: 'rename_property', from: 'properties.plan', to: 'properties.tier' },
          { kind: 'mask', paths: ['properties.email', 'properties.nested'], with: 'hash' },
          { kind: 'user_agent' },
          { kind: 'bot' },
        ],
      }),
      context,
    );
    assert.equal(result.outcome, 'kept');
    const d = result.document;
    assert.equal(d.event, 'order_completed');
    assert.equal(d.event_type, 'order');
    assert.equal(d.action, 'completed');
    assert.deepEqual(d.properties, {
      tier: 'pro',
      email: maskHash('secret', 'a@example.com'),
      nested: maskHash('secret', { card: '4111' }),
      meta: { version: 2 },
    });
    assert.match(d.properties.email as string, /^[0-9a-f]{64}$/);
    assert.deepEqual(d.context, { userAgent: 'Mozilla/5.0', user_agent: { browser: { name: 'Firefox' } }, bot: false });
    assert.deepEqual(result.outcomes, ['changed', 'changed', 'changed', 'changed', 'changed', 'changed', 'changed']);
  });

  it('hashes a masked value as hex HMAC-SHA256 of its JSON text under the secret', () => {
    // Fixed values: the hash is what operators join on across versions, so it must never change.
    assert.equal(
      maskHash('secret', 'a@example.com'),
      '87ec7eeb9429a2e4444d414277de69709c889b7c10ec2b643d61a5ad508ae7d2',
    );
    const nested = '1c6c39aef7534e6d4e2bdbb2321cdff640aacc492bc54fbf2cc684de2da26389';
    assert.equal(maskHash('sécret', { card: '4111' }), nested);
    assert.equal(maskHash('sécret', { card: '4111' }, new PathHashes()), nested, 'the same through a cache');
  });

  it('hashes a string as the JSON text JSON.stringify writes, escapes included (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (value) => {
        const expected = createHmac('sha256', 'secret').update(JSON.stringify(value)).digest('hex');
        assert.equal(maskHash('secret', value), expected);
        assert.equal(maskHash('secret', value, new PathHashes()), expected);
      }),
      { numRuns: 1000, seed: 5 },
    );
    assert.equal(
      maskHash('secret', 'a "quoted" \\ back\u0001'),
      createHmac('sha256', 'secret').update(JSON.stringify('a "quoted" \\ back\u0001')).digest('hex'),
    );
  });

  it('stops remembering the hashes of a path whose values do not come back, and gives the same hashes', () => {
    const fresh = new PathHashes();
    for (let i = 0; i <= 10_000; i++) maskHash('secret', `order-${i}`, fresh);
    assert.ok(fresh.bypass > 0, 'a full map with no hits: the next values are hashed without it');
    assert.equal(fresh.known.size, 0);
    assert.equal(maskHash('secret', 'order-1', fresh), maskHash('secret', 'order-1'));

    const repeating = new PathHashes();
    for (let i = 0; i <= 20_000; i++) maskHash('secret', `user-${i % 100}@example.com`, repeating);
    assert.equal(repeating.bypass, 0);
    assert.equal(repeating.known.size, 100);
    assert.equal(maskHash('secret', 'user-7@example.com', repeating), maskHash('secret', 'user-7@example.com'));
  });

  it('drops where the condition holds, and says which step', () => {
    const rules = steps({
      steps: [
        { kind: 'set', path: 'properties.x', value: 1 },
        { kind: 'drop', where: { '==': [{ var: 'properties.plan' }, 'pro'] } },
      ],
    });
    const dropped = applySteps(doc(), rules, context);
    assert.equal(dropped.outcome, 'dropped');
    assert.equal(dropped.droppedBy, 1);
    const kept = applySteps(doc({ properties: { plan: 'free' } }), rules, context);
    assert.equal(kept.outcome, 'kept');
    assert.deepEqual(kept.outcomes, ['changed', 'unchanged']);
  });

  it('keeps only the allowed paths', () => {
    const result = applySteps(
      doc(),
      steps({ steps: [{ kind: 'allow_properties', paths: ['properties.plan', 'properties.nested.card'] }] }),
      context,
    );
    assert.deepEqual(result.document.properties, { plan: 'pro', nested: { card: '4111' } });
    const identify = doc({ type: 'identify', properties: {}, traits: { email: 'e', name: 'n' } });
    const traits = applySteps(
      identify,
      steps({ steps: [{ kind: 'allow_properties', paths: ['traits.name'] }] }),
      context,
    );
    assert.deepEqual(traits.document.traits, { name: 'n' });
  });

  it('samples deterministically by message id or subject', () => {
    const rule = steps({ steps: [{ kind: 'sample', rate: 0.3 }] });
    let kept = 0;
    for (let i = 0; i < 2000; i++) {
      const first = applySteps(doc(), rule, { ...context, messageId: `m-${i}` }).outcome;
      assert.equal(applySteps(doc(), rule, { ...context, messageId: `m-${i}` }).outcome, first);
      if (first === 'kept') kept++;
    }
    assert.ok(kept > 500 && kept < 700, `kept ${kept} of 2000 at rate 0.3`);
    const bySubject = steps({ steps: [{ kind: 'sample', rate: 0.5, by: 'subject' }] });
    const answers = new Set(
      Array.from({ length: 20 }, (_, i) => applySteps(doc(), bySubject, { ...context, messageId: `x-${i}` }).outcome),
    );
    assert.equal(answers.size, 1, 'the same subject always gets the same answer');
  });

  it('rejects an invalid result naming the step, or skips it with a warning, leaving nothing half-done', () => {
    const bad = steps({
      steps: [
        { kind: 'mask', paths: ['properties.email'], with: 'redact' },
        { kind: 'set', path: 'occurred_at', value: 'yesterday' },
      ],
    });
    const rejected = applySteps(doc(), bad, context);
    assert.equal(rejected.outcome, 'error');
    assert.equal(rejected.error?.step, 1);
    assert.equal(rejected.error?.kind, 'set');
    assert.equal(
      rejected.document.properties.email,
      REDACTED,
      'the recorded document has the masks before the failure',
    );
    const skip = steps({
      steps: [
        { kind: 'set', path: 'properties.email.x', value: 1, on_error: 'skip' },
        { kind: 'set', path: 'properties.y', value: 2 },
      ],
    });
    const skipped = applySteps(doc(), skip, context);
    assert.equal(skipped.outcome, 'kept');
    assert.equal(skipped.warnings[0]?.step, 0);
    assert.equal(skipped.document.properties.email, 'a@example.com');
    assert.equal(skipped.document.properties.y, 2);
  });

  it('runs functions once per batch through what it is given, and checks what they return', async () => {
    const fn = steps({
      steps: [
        { kind: 'set', path: 'properties.before', value: 1 },
        {
          kind: 'function',
          code: 'function transform(e) { return e; }',
          where: { '!=': [{ var: 'subject_id' }, 'skip'] },
        },
      ],
    });
    const calls: number[] = [];
    const each = (make: (d: TransformDocument) => FunctionOutcome) => ({
      runMany: async (docs: readonly TransformDocument[]) => {
        calls.push(docs.length);
        return docs.map(make);
      },
    });
    const rename = each((d) => ({ kind: 'event', event: { ...d, event: 'order.paid', type: 'page' } }));
    const [renamed, skipped] = await applyStepsToBatch([doc(), doc({ subject_id: 'skip' })], fn, [
      { ...context, functions: [undefined, rename] },
      { ...context, functions: [undefined, rename] },
    ]);
    assert.deepEqual(calls, [1], 'one call for the items whose where holds');
    assert.equal(renamed!.document.event, 'order_paid');
    assert.equal(renamed!.document.properties.before, 1, 'the function saw the steps before it');
    assert.equal(renamed!.document.type, 'event', "type is not the function's to change");
    assert.equal(skipped!.document.event, 'project_created');
    const broken = each((d) => ({ kind: 'event', event: { ...d, subject_id: '' } }));
    assert.equal(
      (await applyStepsToBatch([doc()], fn, [{ ...context, functions: [undefined, broken] }]))[0]!.outcome,
      'error',
    );
    const drop = each(() => ({ kind: 'drop' }));
    assert.equal(
      (await applyStepsToBatch([doc()], fn, [{ ...context, functions: [undefined, drop] }]))[0]!.droppedBy,
      1,
    );
    assert.equal(applySteps(doc(), fn, context).outcome, 'error', 'the single-item runner has no functions');
  });

  it('runs a batch on one shared context, each item with its own message id and warnings', async () => {
    const sample = steps({ steps: [{ kind: 'sample', rate: 0.5 }] });
    const ids = Array.from({ length: 40 }, (_, i) => `m-${i}`);
    const docs = () => ids.map(() => doc());
    const { messageId: _, ...shared } = context;
    const perItem = applyStepsToEach(
      docs(),
      sample,
      ids.map((messageId) => ({ ...context, messageId })),
    ).map((r) => r.outcome);
    assert.ok(perItem.includes('kept') && perItem.includes('dropped'), 'the ids sample both ways');
    assert.deepEqual(
      applyStepsToEach(docs(), sample, shared, ids).map((r) => r.outcome),
      perItem,
    );
    assert.deepEqual(
      (await applyStepsToBatch(docs(), sample, shared, ids)).map((r) => r.outcome),
      perItem,
    );
    assert.throws(() => applyStepsToEach([doc()], sample, shared), /message id/);

    // Only the item whose step was skipped gets a warning; the others' (shared, empty) stay empty.
    const skip = steps({ steps: [{ kind: 'set', path: 'properties.email.inner', value: 1, on_error: 'skip' }] });
    const [failed, fine, later] = applyStepsToEach(
      [doc(), doc({ properties: { email: {} } }), doc({ properties: { email: {} } })],
      skip,
      shared,
      ['a', 'b', 'c'],
    );
    assert.equal(failed!.warnings.length, 1);
    assert.deepEqual(fine!.warnings, []);
    assert.deepEqual(later!.warnings, []);
    assert.deepEqual(applyStepsToEach([doc()], skip, shared, ['d'])[0]!.warnings.length, 1);
  });

  it('traces the paths each step changed', () => {
    const result = applySteps(
      doc(),
      steps({ steps: [{ kind: 'remove', paths: ['properties.plan'] }, { kind: 'bot' }] }),
      { ...context, trace: true },
    );
    assert.deepEqual(result.trace, [
      { step: 0, changed: ['properties.plan'] },
      { step: 1, changed: ['context.bot'] },
    ]);
  });
});

describe('shared enrichment answers (frozen, shared by the events of one user agent)', () => {
  const shared = sharedJson({ browser: { name: 'Firefox', version: '120.0' }, os: { name: 'Windows' }, device: {} });
  const sharing: RunContext = { ...context, owned: true, enrichers: { userAgent: () => shared } };

  it('a step that writes, masks or removes inside one changes a copy in this event only', () => {
    const result = applySteps(
      doc(),
      steps({
        steps: [
          { kind: 'user_agent' },
          { kind: 'set', path: 'context.user_agent.browser.name', value: 'Changed' },
          { kind: 'mask', paths: ['context.user_agent.os.name'], with: 'redact' },
          { kind: 'remove', paths: ['context.user_agent.device'] },
          { kind: 'rename_property', from: 'context.user_agent.browser.version', to: 'context.version' },
        ],
      }),
      sharing,
    );
    assert.equal(result.outcome, 'kept', JSON.stringify(result));
    assert.deepEqual(result.document.context.user_agent, { browser: { name: 'Changed' }, os: { name: REDACTED } });
    assert.equal(result.document.context.version, '120.0');
    assert.deepEqual(shared, { browser: { name: 'Firefox', version: '120.0' }, os: { name: 'Windows' }, device: {} });
    // The event's serialisation follows its own objects, not the shared answer's text.
    const next = draftOf(draftFor(), result.document);
    assert.deepEqual(JSON.parse(next.contextJson ?? JSON.stringify(next.context)), result.document.context);
  });

  it('an event that leaves it as it is serialises its text', () => {
    const result = applySteps(doc(), steps({ steps: [{ kind: 'user_agent' }, { kind: 'bot' }] }), {
      ...sharing,
      enrichers: { userAgent: () => shared, isBot: () => false },
    });
    assert.equal(result.document.context.user_agent, shared);
    const next = draftOf(draftFor(), result.document);
    assert.equal(next.contextJson, JSON.stringify(result.document.context));
  });
});

/** A native draft whose document is doc(). */
function draftFor(): EventDraft {
  const document = doc();
  return {
    name: {
      canonicalName: document.event,
      eventType: document.event_type,
      action: document.action,
      nameFormat: 'preferred',
    },
    subjectType: document.subject_type,
    subjectId: document.subject_id,
    occurredAt: document.occurred_at,
    externalId: null,
    properties: document.properties,
    propertiesJson: undefined,
    context: document.context,
  };
}

describe('movePath (rename_property)', () => {
  it('leaves what setPath then removePath would, key order included (property)', () => {
    const key = fc.constantFrom('a', 'b', 'c', '__proto__', 'x');
    const object = fc.dictionary(key, fc.oneof(fc.integer(), fc.dictionary(key, fc.integer(), { maxKeys: 3 })), {
      maxKeys: 4,
    });
    const path = fc.array(fc.constantFrom('a', 'b', 'c', 'x'), { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(object, object, path, path, fc.boolean(), (properties, context, from, to, share) => {
        // Each run on its own copy, as the engine's document is; a shared context stays the one shared value. Copied
        // through JSON, which keeps an own `__proto__` key as data.
        const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;
        const shared = share ? sharedJson(clone(context)) : undefined;
        const make = () => ({ properties: clone(properties), context: shared ?? clone(context) });
        const fromPath = `properties.${from.join('.')}`;
        const toPath = `${to.length === from.length ? 'properties' : 'context'}.${to.join('.')}`;
        const value = getPath(make(), fromPath);
        if (value === undefined || fromPath === toPath) return;
        const expected = make();
        let error: unknown;
        try {
          setPath(expected, toPath, value);
          removePath(expected, fromPath);
        } catch (caught) {
          error = caught;
        }
        const moved = make();
        if (error === undefined) {
          movePath(moved, fromPath, toPath, value);
          assert.equal(JSON.stringify(moved), JSON.stringify(expected));
        } else assert.throws(() => movePath(moved, fromPath, toPath, value));
        if (shared !== undefined)
          assert.equal(JSON.stringify(shared), JSON.stringify(context), 'a shared value is unchanged');
      }),
      { numRuns: 2000, seed: 11 },
    );
  });
});

describe('runs of remove and rename_property (one copy for the run)', () => {
  const key = fc.constantFrom('a', 'b', 'c', 'x');
  const value = fc.oneof(fc.integer(), fc.constant(null), fc.dictionary(key, fc.integer(), { maxKeys: 2 }));
  // Keys as JSON.parse makes them, an own `__proto__` included.
  const object = fc.dictionary(fc.constantFrom('a', 'b', 'c', 'x', '__proto__'), value, { maxKeys: 5 });
  const field = fc.constantFrom('properties', 'context');
  const edit = fc.oneof(
    fc.record({
      kind: fc.constant('remove'),
      paths: fc.array(
        fc.tuple(field, key).map(([f, k]) => `${f}.${k}`),
        { minLength: 1, maxLength: 3 },
      ),
    }),
    fc.record({
      kind: fc.constant('rename_property'),
      from: fc.tuple(field, key).map(([f, k]) => `${f}.${k}`),
      to: fc.tuple(field, key).map(([f, k]) => `${f}.${k}`),
    }),
    // Steps that end or split a run.
    fc.record({ kind: fc.constant('remove'), paths: fc.constant(['properties.a.b']) }),
    fc.record({ kind: fc.constant('set'), path: key.map((k) => `properties.${k}`), value: fc.integer() }),
    fc.record({
      kind: fc.constant('remove'),
      paths: fc.constant(['properties.c']),
      where: fc.constant({ '!!': [{ var: 'properties.a' }] }),
    }),
    fc.record({ kind: fc.constant('remove'), paths: fc.constant(['properties.x']), on_error: fc.constant('skip') }),
  );
  const depth = (path: string) => path.split('.').length;
  const root = (path: string) => path.split('.')[0];

  it('leaves what the steps one by one leave, outcomes and key order included (property)', () => {
    fc.assert(
      fc.property(object, object, fc.array(edit, { maxLength: 6 }), (properties, contextObject, rawSteps) => {
        const rules = steps({ steps: rawSteps });
        const make = () =>
          doc(JSON.parse(JSON.stringify({ properties, context: contextObject })) as Partial<TransformDocument>);
        // applySteps runs each step on its own; the items of a batch go through the runs.
        const expected = applySteps(make(), rules, context);
        // Owned, as at ingest: a run replaces the object it edits and never changes the one it was given.
        const input = make();
        const given = { properties: input.properties, context: input.context };
        const before = JSON.stringify(given);
        const [fused] = applyStepsToEach([input], rules, { ...context, owned: true });
        assert.equal(JSON.stringify(fused!.document), JSON.stringify(expected.document));
        assert.deepEqual(fused!.outcomes, expected.outcomes);
        // Only key edits right under one field (a deeper one, or a rename to another field, writes in place).
        const keyEdits = rules.every(
          (step) =>
            (step.kind === 'remove' && step.paths.every((path) => depth(path) === 2)) ||
            (step.kind === 'rename_property' &&
              depth(step.from) === 2 &&
              depth(step.to) === 2 &&
              root(step.from) === root(step.to)),
        );
        if (keyEdits) assert.equal(JSON.stringify(given), before, 'the objects it was given are as they were');
        // With a trace, every step is traced on its own.
        const [traced] = applyStepsToEach([make()], rules, { ...context, trace: true });
        assert.equal(JSON.stringify(traced!.document), JSON.stringify(expected.document));
        assert.equal(traced!.trace!.length, expected.outcomes.length);
      }),
      { numRuns: 3000, seed: 33 },
    );
  });
});

describe('invariants', () => {
  const json = fc.jsonValue({ maxDepth: 3 });
  const key = fc.stringMatching(/^[a-z]{1,6}$/);
  const properties = fc.dictionary(key, json, { maxKeys: 6 });
  const anyStep = fc.oneof(
    fc.record({
      kind: fc.constant('remove'),
      paths: fc.array(
        key.map((k) => `properties.${k}`),
        { minLength: 1, maxLength: 3 },
      ),
    }),
    fc.record({
      kind: fc.constant('set'),
      path: key.map((k) => `properties.${k}.y`),
      value: json,
      on_error: fc.constant('skip'),
    }),
    fc.record({
      kind: fc.constant('rename_property'),
      from: key.map((k) => `properties.${k}`),
      to: key.map((k) => `context.${k}`),
      on_error: fc.constant('skip'),
    }),
    fc.record({
      kind: fc.constant('mask'),
      paths: fc.array(
        key.map((k) => `properties.${k}`),
        { minLength: 1, maxLength: 3 },
      ),
      with: fc.constantFrom('redact', 'hash'),
    }),
    fc.record({
      kind: fc.constant('allow_properties'),
      paths: fc.array(
        key.map((k) => `properties.${k}`),
        { minLength: 1, maxLength: 3 },
      ),
    }),
  );

  it('never changes its input', () => {
    fc.assert(
      fc.property(properties, fc.array(anyStep, { maxLength: 6 }), (props, rawSteps) => {
        const input = doc({ properties: props });
        const before = JSON.stringify(input);
        applySteps(input, steps({ steps: rawSteps }), context);
        assert.equal(JSON.stringify(input), before);
      }),
    );
  });

  it('leaves no trace of a masked value anywhere in the output', () => {
    const secretValue = fc.stringMatching(/^[A-Z]{12}$/);
    fc.assert(
      fc.property(
        properties,
        key,
        secretValue,
        fc.constantFrom('redact', 'hash'),
        fc.array(anyStep, { maxLength: 3 }),
        (props, k, value, how, before) => {
          const input = doc({ properties: { ...props, [k]: { inner: value } } });
          const rules = steps({
            steps: [
              ...before.filter((s) => s.kind !== 'rename_property'),
              { kind: 'mask', paths: [`properties.${k}`], with: how },
            ],
          });
          const result = applySteps(input, rules, context);
          if (result.outcome === 'kept' && JSON.stringify(input.properties).split(value).length === 2)
            assert.ok(!JSON.stringify(result.document).includes(value));
        },
      ),
    );
  });
});

describe('sameJson (whether a function changed its event, for the step metrics)', () => {
  it('answers as comparing the JSON texts would, keys in order included', () => {
    const json = fc.jsonValue();
    fc.assert(
      fc.property(json, json, (a, b) => {
        assert.equal(sameJson(a, b), JSON.stringify(a) === JSON.stringify(b));
        assert.equal(sameJson(a, JSON.parse(JSON.stringify(a)) as unknown), true);
      }),
      { numRuns: 500 },
    );
    assert.equal(sameJson({ a: 1, b: 2 }, { b: 2, a: 1 }), false);
    assert.equal(sameJson({ a: 1, gone: undefined }, { a: 1 }), true);
    assert.equal(sameJson([1, undefined], [1, null]), true);
    assert.equal(sameJson({ p: { q: [1, { r: 's' }] } }, { p: { q: [1, { r: 't' }] } }), false);
  });
});
