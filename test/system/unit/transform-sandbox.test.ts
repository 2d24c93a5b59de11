// Transformations §4: user functions in a real sandbox. Each hostile function costs its own item only: a clear
// per-item error, the next item and other products' functions go on, and this process stays up.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  createSandbox,
  type FunctionMeta,
  type Sandbox,
  type SandboxFunction,
} from '../../../src/services/transformations/sandbox.js';
import { applyStepsToBatch } from '../../../src/domain/transform-engine.js';
import type { TransformDocument } from '../../../src/domain/transform-types.js';

const meta: FunctionMeta = { product_id: 'prod_a', key_id: 'key_1', route: 'v2' };
const doc = (event: string, properties: Record<string, unknown> = {}) => ({
  type: 'event',
  event,
  subject_type: 'user',
  subject_id: 'u1',
  properties,
  context: {},
});

let sandbox: Sandbox;
before(() => {
  sandbox = createSandbox({ cpuMs: 50, memoryMb: 32, maxResultBytes: 64 * 1024 });
});
after(() => sandbox.close());

async function compiled(source: string): Promise<SandboxFunction> {
  const result = await sandbox.compile(source);
  if (!result.ok) assert.fail(`did not compile: ${result.message}`);
  return result.fn;
}

describe('a function (transformations §4)', () => {
  it('changes the document, sees meta, and drops with null', async () => {
    const fn = await compiled(`function transform(event, meta) {
      if (event.event === 'test.dropped') return null;
      event.properties.product = meta.product_id;
      event.properties.route = meta.route;
      delete event.properties.email;
      return event;
    }`);
    const [changed, dropped] = await fn.runMany(
      [doc('page.viewed', { email: 'a@b.c', n: 1 }), doc('test.dropped')],
      meta,
    );
    assert.deepEqual(changed, {
      kind: 'event',
      event: { ...doc('page.viewed', { n: 1 }), properties: { n: 1, product: 'prod_a', route: 'v2' } },
    });
    assert.deepEqual(dropped, { kind: 'drop' });
    assert.deepEqual(await fn.run(doc('x.y'), meta), {
      kind: 'event',
      event: doc('x.y', { product: 'prod_a', route: 'v2' }),
    });
    fn.dispose();
  });

  it('drops the `__proto__` and `constructor` keys a function writes, as the routes refuse them', async () => {
    const fn = await compiled(`function transform(event) {
      var p = JSON.parse('{"__proto__":{"polluted":1},"nested":{"__proto__":{"x":1},"y":2}}');
      p.constructor = { prototype: { polluted: 1 } };
      p.kept = 'constructor';
      event.properties = p;
      return event;
    }`);
    const [outcome] = await fn.runMany([doc('a.b')], meta);
    assert.equal(outcome?.kind, 'event');
    const properties = (outcome as { event: Record<string, unknown> }).event.properties as Record<string, unknown>;
    assert.deepEqual(Object.keys(properties), ['nested', 'kept']);
    assert.deepEqual(Object.keys(properties.nested as object), ['y']);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    fn.dispose();
  });

  it('refuses the values it returns that cannot be stored, as the routes do, and keeps the others', async () => {
    const fn = await compiled(`function transform(event) {
      var p = event.properties, deep = {};
      if (p.n === 1) p.bad = 'a' + String.fromCharCode(0) + 'b';
      if (p.n === 2) p.bad = 'a' + String.fromCharCode(0xd800);
      if (p.n === 3) { for (var i = 0; i < 70; i++) deep = { d: deep }; p.deep = deep; }
      if (p.n === 4) event.context[String.fromCharCode(0xdc00)] = 1;
      if (p.n === 5) p.fine = 'été 😀 \\\\u0000';
      return event;
    }`);
    const docs = [0, 1, 2, 3, 4, 5].map(
      (n) =>
        ({
          ...doc('a.b', { n }),
          event_type: 'a',
          action: 'b',
          occurred_at: '2026-01-01T00:00:00Z',
          source: 'api',
        }) as TransformDocument,
    );
    const contexts = docs.map(() => ({ secret: 's', messageId: 'm', meta, enrichers: {}, functions: [fn] }));
    const results = await applyStepsToBatch(docs, [{ kind: 'function', code: '' }] as never, contexts as never);
    assert.deepEqual(
      results.map((result) => result.outcome),
      ['kept', 'error', 'error', 'error', 'error', 'kept'],
    );
    assert.match(results[1]!.error!.message, /^properties\/bad: must not contain the NUL character/);
    assert.match(results[2]!.error!.message, /^properties\/bad: must not contain a lone surrogate/);
    assert.match(results[3]!.error!.message, /is nested more than 64 levels deep/);
    assert.match(results[4]!.error!.message, /^context\/.*property names must not contain a lone surrogate/);
    assert.equal(results[5]!.document.properties.fine, 'été 😀 \\u0000');
    fn.dispose();
  });

  it('returns any JSON document unchanged through an identity function', async () => {
    const fn = await compiled('function transform(event) { return event; }');
    // Documents as a route parses them: plain objects, no `__proto__` or `constructor` keys (the routes refuse them).
    const documents = fc
      .array(fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 6 }), {
        maxLength: 8,
      })
      .map((docs) => JSON.stringify(docs))
      .filter((text) => !/"(__proto__|constructor)"/.test(text))
      .map((text) => JSON.parse(text) as Record<string, unknown>[]);
    await fc.assert(
      fc.asyncProperty(documents, async (docs) => {
        const outcomes = await fn.runMany(docs, meta);
        assert.deepEqual(
          outcomes,
          docs.map((event) => ({ kind: 'event', event })),
        );
      }),
      { numRuns: 40 },
    );
    fn.dispose();
  });
});

describe('text that is not ASCII crosses into and out of a function unchanged', () => {
  it('keeps accents, other scripts, emoji and control characters, in keys and values', async () => {
    const fn = await compiled(`function transform(event, meta) {
      event.properties.seen = event.properties['clé'] + '|' + meta.route;
      event.properties.written = 'übung ✓ \u{1F600}';
      event.properties.lengths = [event.properties.emoji.length, '\ud800'.length];
      return event;
    }`);
    const properties = { clé: 'été 日本語', emoji: '😀👍🏽', control: 'a\u0000b\u001fc\n', quote: '"\\' };
    const [outcome] = await fn.runMany([doc('page.viewed', properties)], { ...meta, route: 'vü' });
    assert.deepEqual(outcome, {
      kind: 'event',
      event: doc('page.viewed', {
        ...properties,
        seen: 'été 日本語|vü',
        written: 'übung ✓ 😀',
        lengths: [6, 1],
      }),
    });
    fn.dispose();
  });
});

describe('code that does not compile is refused with the message and line (§4)', () => {
  it('gives the compiler message and line of a syntax error', async () => {
    const result = await sandbox.compile('function transform(event) {\n  const a = ;\n  return event;\n}');
    assert.equal(result.ok, false);
    assert.ok(!result.ok && /SyntaxError/.test(result.message), JSON.stringify(result));
    assert.equal(!result.ok && result.line, 2);
  });

  it('refuses code that defines no transform function', async () => {
    const result = await sandbox.compile('const transform = 42;');
    assert.deepEqual(result, {
      ok: false,
      message: 'the code must define function transform(event, meta)',
      line: null,
    });
  });

  it('refuses a top level that never ends, within the CPU limit', async () => {
    const result = await sandbox.compile('while (true) {}\nfunction transform(e) { return e; }');
    assert.equal(result.ok, false);
    assert.match(!result.ok ? result.message : '', /top level ran over its CPU limit of 50 ms/);
  });
});

describe('a hostile function costs its own item only (§4, §8)', () => {
  const hostile: Array<[string, string, RegExp]> = [
    ['an endless loop', 'while (true) {}', /CPU limit of 50 ms/],
    [
      'an array-buffer bomb',
      'const a = []; while (true) a.push(new ArrayBuffer(1 << 20));',
      /memory limit of 32 MB|CPU limit/,
    ],
    ['a single huge allocation', 'new Uint8Array(64 * 1024 * 1024);', /memory limit of 32 MB/],
    [
      'a string bomb',
      'let s = "x"; const a = []; while (true) { s = s + s; a.push(s + "!"); }',
      /memory limit|string too long|CPU limit/,
    ],
    ['deep recursion', 'const f = (n) => f(n + 1) + 1; f(0);', /stack/],
    [
      'a long built-in the interrupt handler does not reach',
      "const s = 'ab'.repeat(1 << 23); for (let i = 0; i < 1e6; i++) s.lastIndexOf('c');",
      /CPU limit of 50 ms/,
    ],
    ['throwing a number', 'throw 42;', /not an Error \(number\)/],
    ['throwing null', 'throw null;', /not an Error \(null\)/],
    [
      'throwing an object whose getters throw',
      'throw Object.create(Error.prototype, { message: { get() { throw 1; } } });',
      /cannot be described/,
    ],
    ['throwing an Error', "throw new TypeError('bad plan');", /^TypeError: bad plan$/],
    ['returning a cycle', 'const o = {}; o.self = o; return o;', /circular/],
    ['returning a huge object', "return { properties: { big: 'x'.repeat(100000) } };", /larger than 65536 bytes/],
    ['returning a number', 'return 7;', /must return an object/],
    ['returning an array', 'return [event];', /must return an object/],
    ['returning undefined', 'return undefined;', /returned undefined/],
    ['returning a BigInt inside', 'return { n: 10n };', /BigInt/],
    ['returning a Promise', 'return Promise.resolve(event);', /not a Promise/],
    ['reaching for process', 'return process.env;', /ReferenceError: process is not defined|not defined/],
    ['reaching for require', "return require('fs');", /not defined/],
    ['reaching for a dynamic import', "import('fs'); throw new Error('import did not throw');", /.+/],
  ];
  const source = `function transform(event, meta) {
    switch (event.event) {
      ${hostile.map(([, code], i) => `case 'hostile.${i}': { ${code} }`).join('\n      ')}
    }
    event.properties.seen = true;
    return event;
  }`;
  let fn: SandboxFunction;
  before(async () => {
    fn = await compiled(source);
  });
  after(() => fn.dispose());

  hostile.forEach(([name, , expected], i) => {
    it(`${name}: an error for that item, the items around it stored`, async () => {
      const outcomes = await fn.runMany([doc('ok.before'), doc(`hostile.${i}`), doc('ok.after')], meta);
      assert.equal(outcomes.length, 3);
      assert.deepEqual(outcomes[0], { kind: 'event', event: doc('ok.before', { seen: true }) });
      assert.equal(outcomes[1]!.kind, 'error', JSON.stringify(outcomes[1]));
      assert.match((outcomes[1] as { message: string }).message, expected);
      assert.deepEqual(outcomes[2], { kind: 'event', event: doc('ok.after', { seen: true }) });
    });
  });

  it('sees none of the host: process, require, fetch, timers, std/os modules', async () => {
    const probe = await compiled(`function transform(event) {
      event.properties.kinds = [typeof process, typeof require, typeof fetch, typeof setTimeout, typeof setInterval,
        typeof queueMicrotask, typeof std, typeof os, typeof globalThis.Buffer, typeof WebAssembly].join(',');
      return event;
    }`);
    const outcome = await probe.run(doc('probe.ran'), meta);
    const kinds = outcome.kind === 'event' ? (outcome.event.properties as { kinds: string }).kinds : '';
    assert.equal(kinds, Array(10).fill('undefined').join(','));
    probe.dispose();
  });
});

describe('functions are isolated from each other and from the host (§4)', () => {
  it('keeps one product function’s globals and prototype changes away from another and from the host', async () => {
    const tamper = await compiled(`Object.prototype.polluted = 'yes';
      JSON.stringify = () => '"tampered"';
      Array.prototype.join = () => 'tampered';
      globalThis.shared = 'from a';
      function transform(event) { event.properties.mine = shared; return event; }`);
    const other = await compiled(`function transform(event) {
      event.properties.saw = [typeof shared, typeof ({}).polluted, [1, 2].join('-')].join(',');
      return event;
    }`);
    assert.deepEqual(await tamper.run(doc('a.b'), meta), { kind: 'event', event: doc('a.b', { mine: 'from a' }) });
    assert.deepEqual(await other.run(doc('a.b'), { ...meta, product_id: 'prod_b' }), {
      kind: 'event',
      event: doc('a.b', { saw: 'undefined,undefined,1-2' }),
    });
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    tamper.dispose();
    other.dispose();
  });

  it('runs another product’s function while one loops, and both go on afterwards', async () => {
    const looping = await compiled('function transform(e) { while (true) {} }');
    const healthy = await compiled('function transform(e) { e.properties.ok = 1; return e; }');
    const [loopOutcome, healthyOutcome] = await Promise.all([
      looping.run(doc('a.b'), meta),
      healthy.runMany([doc('c.d'), doc('e.f')], { ...meta, product_id: 'prod_b' }),
    ]);
    assert.match(loopOutcome.kind === 'error' ? loopOutcome.message : '', /CPU limit/);
    assert.deepEqual(healthyOutcome, [
      { kind: 'event', event: doc('c.d', { ok: 1 }) },
      { kind: 'event', event: doc('e.f', { ok: 1 }) },
    ]);
    assert.deepEqual(await healthy.run(doc('g.h'), meta), { kind: 'event', event: doc('g.h', { ok: 1 }) });
    looping.dispose();
    healthy.dispose();
  });

  it('goes on after many functions whose top level the watchdog had to end', async () => {
    for (let i = 0; i < 6; i++) {
      const result = await sandbox.compile(
        `const s = 'ab'.repeat(1 << 23); for (let i = 0; i < 1e6; i++) s.lastIndexOf('c');\nfunction transform(e) { return e; }`,
      );
      assert.equal(result.ok, false);
      assert.match(!result.ok ? result.message : '', /top level ran over its CPU limit/);
    }
    const healthy = await compiled('function transform(e) { e.properties.ok = 1; return e; }');
    assert.deepEqual(await healthy.run(doc('a.b'), meta), { kind: 'event', event: doc('a.b', { ok: 1 }) });
    healthy.dispose();
  });

  it('answers a disposed function with an error', async () => {
    const fn = await compiled('function transform(e) { return e; }');
    fn.dispose();
    assert.deepEqual(await fn.run(doc('a.b'), meta), { kind: 'error', message: 'the function was replaced' });
  });
});

describe('the memory limit counts everything a function allocates, array buffers included (§8)', () => {
  // A CPU limit far above what the allocations take, so only the memory limit can end them.
  let small: Sandbox;
  before(() => {
    small = createSandbox({ cpuMs: 20_000, memoryMb: 16 });
  });
  after(() => small.close());

  it('ends a loop of 1 MB array buffers at 16 MB and lets 8 MB through', async () => {
    const result = await small.compile(`function transform(event) {
      const kept = [];
      for (let i = 0; i < event.properties.megabytes; i++) kept.push(new Uint8Array(1 << 20).fill(1));
      event.properties.kept = kept.length;
      return event;
    }`);
    assert.ok(result.ok);
    const [within, over, after] = await result.fn.runMany(
      [doc('a.b', { megabytes: 8 }), doc('a.b', { megabytes: 64 }), doc('a.b', { megabytes: 2 })],
      meta,
    );
    assert.deepEqual(within, { kind: 'event', event: doc('a.b', { megabytes: 8, kept: 8 }) });
    assert.deepEqual(over, { kind: 'error', message: 'ran over its memory limit of 16 MB' });
    assert.deepEqual(after, { kind: 'event', event: doc('a.b', { megabytes: 2, kept: 2 }) });
    result.fn.dispose();
  });
});

describe('synchronous calls, for a synchronous step engine (§4)', () => {
  it('answers as the asynchronous calls do, a limit costing its item only', async () => {
    const fn = await compiled(`function transform(event, meta) {
      if (event.event === 'loop.forever') while (true) {}
      if (event.event === 'long.builtin') { const s = 'ab'.repeat(1 << 23); for (let i = 0; i < 1e6; i++) s.lastIndexOf('c'); }
      if (event.event === 'drop.me') return null;
      event.properties.route = meta.route;
      return event;
    }`);
    const batch = [doc('a.b'), doc('loop.forever'), doc('drop.me'), doc('long.builtin'), doc('c.d')];
    const outcomes = fn.runManySync(batch, meta);
    assert.deepEqual(outcomes, [
      { kind: 'event', event: doc('a.b', { route: 'v2' }) },
      { kind: 'error', message: 'ran over its CPU limit of 50 ms' },
      { kind: 'drop' },
      { kind: 'error', message: 'ran over its CPU limit of 50 ms' },
      { kind: 'event', event: doc('c.d', { route: 'v2' }) },
    ]);
    assert.deepEqual(fn.runSync(doc('e.f'), meta), { kind: 'event', event: doc('e.f', { route: 'v2' }) });
    assert.deepEqual(await fn.runMany(batch.slice(0, 3), meta), outcomes.slice(0, 3));
    fn.dispose();
  });
});
