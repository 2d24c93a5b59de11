// Parquet file destinations (warehouses.md §2) on the backend under test, read back with DuckDB: the root
// setting (none set → 400; a path outside it, `..` or a symlink out → 400), hive-partitioned files named by
// position range, every event once after a re-delivery and a replay with other batch sizes, types, the
// identity files, and erasure rewriting the files.
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { parquetMetadata } from 'hyparquet';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { parquetKind } from '../src/services/destinations/parquet.js';
import { eraseFromFiles, writeMessages } from '../src/services/destinations/files/parquet-files.js';
import type { DeliveryContext } from '../src/services/destinations/kind.js';
import type { DestinationRecord, StoredMessage } from '../src/storage/types.js';
import { cliEnv, inlet } from './support/cli.js';
import { warehouseTestKit } from './support/warehouse-tests.js';

let ctx: TestContext;
let root: string;
let outside: string;
let duck: DuckDBConnection;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'inlet-files-'));
  outside = mkdtempSync(join(tmpdir(), 'inlet-outside-'));
  ctx = await createTestApp({ fileDestinationsRoot: root });
  duck = await (await DuckDBInstance.create(':memory:')).connect();
});
after(async () => {
  duck.closeSync();
  await ctx.close();
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

const { admin, track, deliver } = warehouseTestKit(() => ctx);

async function rows(sql: string): Promise<Array<Record<string, unknown>>> {
  return (await duck.runAndReadAll(sql)).getRowObjectsJson() as Array<Record<string, unknown>>;
}

const events = (folder: string) =>
  `read_parquet('${join(root, folder)}/events/**/*.parquet', hive_partitioning = true)`;

function files(folder: string): string[] {
  const found: string[] = [];
  const walk = (dir: string, prefix: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(dir, entry.name), `${prefix}${entry.name}/`);
      else found.push(`${prefix}${entry.name}`);
    }
  };
  walk(join(root, folder), '');
  return found.sort();
}

describe('parquet files: creation', () => {
  it('refuses a path outside the root, with .., through a symlink out, or without a root set: 400 on /path', async () => {
    const product = await ctx.product('files-create');
    const create = (body: Record<string, unknown>, app = ctx.app) =>
      admin('POST', `/products/${product.id}/destinations`, { type: 'parquet', name: 'f', ...body }, app);
    mkdirSync(join(root, 'inside'), { recursive: true });
    symlinkSync(outside, join(root, 'inside', 'out'));
    for (const path of ['../escape', outside, 'inside/out/x', 'inside/out', '']) {
      const res = await create({ path });
      assert.equal(res.statusCode, 400, `${path}: ${res.body}`);
      assert.ok(
        problemOf(res).errors!.some((e) => e.pointer === '/path'),
        res.body,
      );
    }
    assert.deepEqual(readdirSync(outside), [], 'nothing was created outside the root');
    const bad = await create({ path: 'ok', partition: 'minute' });
    assert.equal(bad.statusCode, 400);
    const fine = await create({ path: join(root, 'absolute-inside') });
    assert.equal(fine.statusCode, 201, fine.body);
    assert.equal(fine.json().data.path, join(root, 'absolute-inside'));
    assert.deepEqual(fine.json().data.batch, { max_messages: 100_000, max_wait_ms: 60_000 });

    const unset = await createTestApp({});
    try {
      const other = await unset.product('no-root');
      const res = await admin(
        'POST',
        `/products/${other.id}/destinations`,
        { type: 'parquet', name: 'f', path: 'x' },
        unset.app,
      );
      assert.equal(res.statusCode, 400, res.body);
      assert.match(problemOf(res).errors!.find((e) => e.pointer === '/path')!.message, /INLET_FILE_DESTINATIONS_ROOT/);
    } finally {
      await unset.close();
    }
  });
});

describe('parquet files: an instance that lost the destination', () => {
  it('writes nothing: its delivery fails before any file', async () => {
    const driver = parquetKind.driver({
      timeoutMs: 1000,
      guard: undefined as never,
      now: () => Date.now(),
      warehouse: { maxTables: 1, maxColumns: 1, async loaded() {} },
      fileRoot: root,
      orderPositions: (a, b) => Number(a) - Number(b),
    });
    const d = {
      id: 'dst_stale',
      config: { path: join(root, 'stale'), partition: 'hour' },
      batch: { maxMessages: 100, maxWaitMs: 0 },
    } as unknown as DestinationRecord;
    const at = new Date().toISOString();
    const message = {
      kind: 'event',
      position: '7',
      event: {
        ...{ id: randomUUID(), productId: 'prd_stale', source: 'api', externalId: 'gone', eventType: 'page' },
        ...{ action: 'viewed', canonicalName: 'page_viewed', nameFormat: 'legacy', subjectType: 'user' },
        ...{ subjectId: 'gone', occurredAt: at, receivedAt: at, properties: {}, apiKeyId: null },
      },
    } as StoredMessage;
    const context = (holds: boolean): DeliveryContext => ({
      format: () => ({}) as never,
      sent() {},
      goOn: () => true,
      signal: new AbortController().signal,
      holds: async () => holds,
      leaseUntil: Date.now() + 15_000,
    });
    const stale = await driver.deliver(d, [message], context(false));
    assert.equal(stale.accepted, 0);
    assert.match(stale.failure!.error!, /no longer holds the destination/);
    assert.deepEqual(
      files('stale').filter((f) => f.endsWith('.parquet')),
      [],
    );
    const held = await driver.deliver(d, [message], context(true));
    assert.equal(held.accepted, 1);
    assert.equal(files('stale').filter((f) => f.endsWith('.parquet')).length, 1);
  });
});

describe('parquet files: partitions', () => {
  /** One event a position, received at each of `times`. */
  const received = (times: string[]): StoredMessage[] =>
    times.map(
      (at, n) =>
        ({
          kind: 'event',
          position: String(n + 1),
          event: {
            ...{ id: `00000000-0000-4000-8000-${String(n + 1).padStart(12, '0')}`, productId: 'prd_part' },
            ...{ source: 'api', externalId: 'p', eventType: 'page', action: 'viewed', canonicalName: 'page_viewed' },
            ...{ nameFormat: 'legacy', subjectType: 'user', subjectId: 'p', occurredAt: at, receivedAt: at },
            ...{ properties: {}, apiKeyId: null },
          },
        }) as StoredMessage,
    );
  const times = [
    '2026-11-28T23:59:59.999Z',
    '2026-11-29T00:00:00.000Z',
    '2026-11-28T23:00:00.000Z',
    '2026-11-29T00:30:00.000Z',
    '1969-12-31T23:59:59.000Z',
    '2026-11-29T01:00:00.000Z',
  ];
  const folderOf = (f: string) => f.slice(0, f.lastIndexOf('/'));

  it('one delivery across hours and days: each event in the folder of its received hour (UTC)', async () => {
    await writeMessages(join(root, 'part-hour'), 'hour', received(times), new Date(), (a, b) => Number(a) - Number(b), {
      token: 1,
    });
    assert.deepEqual(
      [...new Set(files('part-hour').map(folderOf))],
      [
        'events/date=1969-12-31/hour=23',
        'events/date=2026-11-28/hour=23',
        'events/date=2026-11-29/hour=00',
        'events/date=2026-11-29/hour=01',
      ],
    );
    const placed = await rows(
      `SELECT id, date, hour, epoch_ms(received_at) AS ms FROM ${events('part-hour')} ORDER BY id`,
    );
    assert.deepEqual(
      placed.map((r) => `${String(r.date).slice(0, 10)} ${String(r.hour).padStart(2, '0')}`),
      ['2026-11-28 23', '2026-11-29 00', '2026-11-28 23', '2026-11-29 00', '1969-12-31 23', '2026-11-29 01'],
    );
    assert.deepEqual(
      placed.map((r) => Number(r.ms)),
      times.map((t) => Date.parse(t)),
      'each time the instant it was, to the millisecond',
    );
    // The footer: the logical type TIMESTAMP(MILLIS, isAdjustedToUTC) and, for older readers, the converted type.
    const [file] = files('part-hour');
    const schema = await rows(
      `SELECT name, logical_type, converted_type FROM parquet_schema('${join(root, 'part-hour', file!)}')`,
    );
    for (const column of ['received_at', 'occurred_at', 'loaded_at']) {
      const element = schema.find((e) => e.name === column)!;
      assert.match(String(element.logical_type), /^TimestampType\(isAdjustedToUTC=1, unit=TimeUnit\(MILLIS=/, column);
      assert.equal(element.converted_type, 'TIMESTAMP_MILLIS', column);
    }
  });

  it('by day: each event in the folder of its received date (UTC)', async () => {
    await writeMessages(join(root, 'part-day'), 'day', received(times), new Date(), (a, b) => Number(a) - Number(b), {
      token: 1,
    });
    assert.deepEqual(
      [...new Set(files('part-day').map(folderOf))],
      ['events/date=1969-12-31', 'events/date=2026-11-28', 'events/date=2026-11-29'],
    );
  });
});

describe('parquet files: two writers after a takeover (fencing tokens)', () => {
  const hour = new Date().toISOString();
  /** Events at positions `from`..`to`, each with a fixed id (the same message written by either writer). */
  const batch = (from: number, to: number): StoredMessage[] =>
    Array.from({ length: to - from + 1 }, (_, i) => {
      const n = from + i;
      return {
        kind: 'event',
        position: String(n),
        event: {
          ...{ id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`, productId: 'prd_fence', source: 'api' },
          ...{ externalId: `person-${n % 3}`, eventType: 'page', action: 'viewed', canonicalName: 'page_viewed' },
          ...{ nameFormat: 'legacy', subjectType: 'user', subjectId: `person-${n % 3}`, occurredAt: hour },
          ...{ receivedAt: hour, properties: {}, apiKeyId: null },
        },
      } as StoredMessage;
    });
  const ids = (from: number, to: number) => batch(from, to).map((m) => (m as { event: { id: string } }).event.id);
  const write = (folder: string, messages: StoredMessage[], token: number, placed?: () => Promise<void>) =>
    writeMessages(join(root, folder), 'hour', messages, new Date(), (a, b) => Number(a) - Number(b), {
      token,
      ...(placed && { placed }),
    });
  const inFiles = async (folder: string) =>
    (await rows(`SELECT id FROM ${events(folder)} ORDER BY id`)).map((r) => String(r.id));
  const pathOf = (folder: string, name: string) =>
    join(
      root,
      folder,
      files(folder).find((f) => f.endsWith(`/${name}`))!,
    );
  const inFile = async (folder: string, name: string) =>
    (await rows(`SELECT id FROM read_parquet('${pathOf(folder, name)}') ORDER BY id`)).map((r) => String(r.id));
  const names = (folder: string) => files(folder).map((f) => f.slice(f.lastIndexOf('/') + 1));
  const tokenIn = (folder: string, name: string) => {
    const bytes = readFileSync(pathOf(folder, name));
    const metadata = parquetMetadata(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    return metadata.key_value_metadata?.find((kv) => kv.key === 'inlet.lease_until')?.value;
  };
  const OLD = 1_000;
  const NEW = 2_000;

  it("a holder frozen between its rename and its clearing takes no row from the new holder's file", async () => {
    // The old holder's file is in place (10–12) when it freezes; the new holder writes 10–20 and removes that
    // file as covered; the old one thaws and clears the overlaps of its file against the new holder's.
    await write('fence-frozen', batch(10, 12), OLD, async () => {
      await write('fence-frozen', batch(10, 20), NEW);
    });
    assert.deepEqual(await inFiles('fence-frozen'), ids(10, 20), 'every event in the files, once');
    assert.deepEqual(names('fence-frozen'), ['10-20.parquet']);
  });

  it('a holder that renames after the new holder wrote gives up the rows they share, and only those', async () => {
    await write('fence-late', batch(10, 20), NEW);
    await write('fence-late', batch(10, 12), OLD);
    assert.deepEqual(names('fence-late'), ['10-20.parquet'], 'its file, all in the newer one, is removed');
    await write('fence-late', batch(18, 25), OLD);
    assert.deepEqual(await inFiles('fence-late'), ids(10, 25), 'every event in the files, once');
    assert.deepEqual(names('fence-late'), ['10-20.parquet', '18-25.parquet']);
    assert.deepEqual(await inFile('fence-late', '18-25.parquet'), ids(21, 25));
    assert.equal(tokenIn('fence-late', '10-20.parquet'), String(NEW), 'the newer file is as written');
  });

  it("rewrites keep each file's token: the overlaps of a later file, and an erasure", async () => {
    await write('fence-keep', batch(10, 20), OLD);
    await write('fence-keep', batch(15, 30), NEW);
    assert.deepEqual(await inFile('fence-keep', '10-20.parquet'), ids(10, 14));
    assert.equal(tokenIn('fence-keep', '10-20.parquet'), String(OLD), 'rewritten without 15–20, its token kept');
    // The old holder, thawed, writes 12–18 again: its own older file gives up 12–14, its new one 15–18.
    await write('fence-keep', batch(12, 18), OLD);
    assert.deepEqual(await inFiles('fence-keep'), ids(10, 30));
    assert.deepEqual(await inFile('fence-keep', '10-20.parquet'), ids(10, 11));
    assert.deepEqual(await inFile('fence-keep', '12-18.parquet'), ids(12, 14));
    assert.equal(tokenIn('fence-keep', '15-30.parquet'), String(NEW));
    assert.equal(await eraseFromFiles(join(root, 'fence-keep'), ['person-1']), 7);
    assert.equal(tokenIn('fence-keep', '10-20.parquet'), String(OLD), 'erasure keeps the tokens');
    assert.equal(tokenIn('fence-keep', '12-18.parquet'), String(OLD));
    assert.equal(tokenIn('fence-keep', '15-30.parquet'), String(NEW));
  });
});

describe('parquet files: editing the path', () => {
  it('a new path passes the checks of creation; files so far stay, later ones go to the new folder', async () => {
    const product = await ctx.product('files-edit');
    const created = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'before',
      batch: { max_messages: 100, max_wait_ms: 0 },
    });
    const id = created.json().data.id as string;
    const first = await track(product.eventsKey, 'moved.file', 'm1');
    await deliver();
    const patch = (body: object) => admin('PATCH', `/products/${product.id}/destinations/${id}`, body);
    mkdirSync(join(root, 'edit-inside'), { recursive: true });
    symlinkSync(outside, join(root, 'edit-inside', 'out'));
    for (const bad of ['../escape', outside, 'edit-inside/out', '']) {
      const res = await patch({ path: bad });
      assert.equal(res.statusCode, 400, `${bad}: ${res.body}`);
      assert.ok(
        problemOf(res).errors!.some((e) => e.pointer === '/path'),
        res.body,
      );
    }
    const refused = await patch({ partition: 'day' });
    assert.equal(refused.statusCode, 400, 'the partition is fixed');
    const edited = await patch({ path: 'after' });
    assert.equal(edited.statusCode, 200, edited.body);
    assert.equal(edited.json().data.path, join(root, 'after'));
    const second = await track(product.eventsKey, 'moved.file', 'm2');
    await deliver();
    const ids = async (folder: string) => (await rows(`SELECT id FROM ${events(folder)}`)).map((r) => r.id);
    assert.deepEqual(await ids('before'), [first]);
    assert.deepEqual(await ids('after'), [second]);
    assert.deepEqual(readdirSync(outside), [], 'nothing was created outside the root');

    const env = { ...cliEnv(ctx.database), INLET_FILE_DESTINATIONS_ROOT: root };
    const moved = await inlet(env, 'destinations', 'edit', id, '--product', product.id, '--path', 'third', '--json');
    assert.equal(moved.code, 0, moved.err);
    assert.equal(JSON.parse(moved.out).data.path, join(root, 'third'));
    const escape = await inlet(env, 'destinations', 'edit', id, '--product', product.id, '--path', '../x');
    assert.equal(escape.code, 1);
    assert.match(escape.err, /\/path/);
  });
});

describe('parquet files: erasure after path edits', () => {
  it('rewrites the files of every folder the destination wrote to, and remembers them as earlier_paths', async () => {
    const product = await ctx.product('files-moved-erase');
    const created = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'moved-a',
      batch: { max_messages: 100, max_wait_ms: 0 },
    });
    const id = created.json().data.id as string;
    assert.deepEqual(created.json().data.earlier_paths, []);
    const patch = (path: string) => admin('PATCH', `/products/${product.id}/destinations/${id}`, { path });
    const load = async (folder: string) => {
      await track(product.eventsKey, 'moved.erase', 'gone');
      await track(product.eventsKey, 'moved.erase', 'kept');
      await deliver();
      assert.equal(files(folder).length, 1, `${folder}: ${files(folder).join()}`);
    };
    await load('moved-a');
    await patch('moved-b');
    await load('moved-b');
    // Away and back: a folder is remembered once, and the current one is not among the earlier ones.
    await patch('moved-c');
    const back = await patch('moved-a');
    assert.equal(back.statusCode, 200, back.body);
    assert.deepEqual(back.json().data.earlier_paths, [join(root, 'moved-b'), join(root, 'moved-c')]);
    await patch('moved-e');
    await patch('moved-d');
    const shown = (await admin('GET', `/products/${product.id}/destinations/${id}`)).json().data;
    assert.equal(shown.path, join(root, 'moved-d'));
    assert.deepEqual(
      shown.earlier_paths,
      ['moved-b', 'moved-c', 'moved-a', 'moved-e'].map((f) => join(root, f)),
    );
    await load('moved-d');
    // Meanwhile one earlier folder was removed by hand, and another became a symbolic link out of the root, to
    // a file that holds the person: erasure passes over both, and creates or rewrites nothing there.
    rmSync(join(root, 'moved-c'), { recursive: true, force: true });
    const away = mkdtempSync(join(tmpdir(), 'inlet-away-'));
    mkdirSync(join(away, 'events'), { recursive: true });
    const held = readFileSync(join(root, 'moved-d', files('moved-d')[0]!));
    writeFileSync(join(away, 'events', 'held.parquet'), held);
    rmSync(join(root, 'moved-e'), { recursive: true, force: true });
    symlinkSync(away, join(root, 'moved-e'));

    const erased = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'gone' });
    assert.equal(erased.statusCode, 202, erased.body);
    await deliver();
    const after = (await admin('GET', `/products/${product.id}/destinations/${id}`)).json().data;
    assert.equal(after.last_error, null);
    assert.equal(after.lag, 0, 'the erasure was delivered');
    for (const folder of ['moved-a', 'moved-b', 'moved-d'])
      assert.deepEqual(await rows(`SELECT subject_id FROM ${events(folder)}`), [{ subject_id: 'kept' }], folder);
    assert.ok(!readdirSync(root).includes('moved-c'), 'erasure does not make a folder');
    assert.ok(readFileSync(join(away, 'events', 'held.parquet')).equals(held), 'nothing outside the root is rewritten');
    rmSync(away, { recursive: true, force: true });
  });
});

describe('parquet files: the CLI', () => {
  it('creates one with --type parquet --path --partition, checked like the API; show gives its folder', async () => {
    const product = await ctx.product('files-cli');
    const env = { ...cliEnv(ctx.database), INLET_FILE_DESTINATIONS_ROOT: root };
    const create = (...extra: string[]) =>
      inlet(env, 'destinations', 'create', '--product', product.id, '--type', 'parquet', '--name', 'lake', ...extra);
    const created = await create('--path', 'cli-made', '--partition', 'day', '--max-wait-ms', '0', '--json');
    assert.equal(created.code, 0, created.err);
    const d = JSON.parse(created.out).data;
    assert.equal(d.type, 'parquet');
    assert.equal(d.path, join(root, 'cli-made'));
    assert.equal(d.partition, 'day');
    assert.deepEqual(d.batch, { max_messages: 100_000, max_wait_ms: 0 });
    const shown = await inlet(env, 'destinations', 'show', d.id, '--product', product.id);
    assert.equal(shown.code, 0, shown.err);
    assert.match(shown.out, new RegExp(`path\\s+${join(root, 'cli-made')}`));
    const uuid = await track(product.eventsKey, 'cli.filed', 'c1');
    await deliver();
    const [file] = files('cli-made');
    assert.match(file!, /^events\/date=\d{4}-\d{2}-\d{2}\/[0-9.]+-[0-9.]+\.parquet$/, 'partitioned by day');
    assert.deepEqual(await rows(`SELECT id FROM ${events('cli-made')}`), [{ id: uuid }]);

    for (const [extra, pointer] of [
      [['--path', '../escape'], /\/path/],
      [['--path', outside], /\/path/],
      [['--path', 'fine', '--partition', 'minute'], /\/partition/],
    ] as const) {
      const refused = await create(...extra);
      assert.equal(refused.code, 1, `${extra.join(' ')}: ${refused.out}`);
      assert.match(refused.err, pointer);
    }
    // Without the operator's root, the type is refused.
    const withoutRoot = await inlet(
      cliEnv(ctx.database),
      'destinations',
      'create',
      '--product',
      product.id,
      '--type',
      'parquet',
      '--name',
      'lake',
      '--path',
      'x',
    );
    assert.equal(withoutRoot.code, 1);
    assert.match(withoutRoot.err, /INLET_FILE_DESTINATIONS_ROOT/);
  });
});

describe('parquet files: loads', () => {
  it('writes hive-partitioned files named by positions, readable by DuckDB with the events columns', async () => {
    const product = await ctx.product('files-load');
    const res = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'load',
      batch: { max_messages: 4, max_wait_ms: 0 },
    });
    assert.equal(res.statusCode, 201, res.body);
    const uuids: string[] = [];
    for (let i = 0; i < 10; i++) uuids.push(await track(product.eventsKey, 'file.written', `u${i % 3}`, { i }));
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(product.eventsKey),
      payload: { external_id: 'u1', traits: { plan: 'pro' } },
    });
    await deliver();
    const written = files('load');
    const now = new Date().toISOString();
    const eventFiles = written.filter((f) => f.startsWith('events/'));
    assert.equal(eventFiles.length, 3, written.join('\n'));
    for (const f of eventFiles)
      assert.match(f, new RegExp(`^events/date=${now.slice(0, 10)}/hour=\\d\\d/[0-9.]+-[0-9.]+\\.parquet$`));
    assert.ok(written.some((f) => f.startsWith('identities/date=')));
    const all = await rows(`SELECT * FROM ${events('load')} ORDER BY id`);
    assert.deepEqual(
      all.map((r) => r.id),
      [...uuids].sort(),
    );
    const types = await rows(`DESCRIBE SELECT * FROM ${events('load')}`);
    const typeOf = Object.fromEntries(types.map((t) => [t.column_name, t.column_type]));
    // TIMESTAMP(MILLIS, UTC): instants, not times without a zone.
    for (const column of ['received_at', 'occurred_at', 'loaded_at'])
      assert.equal(typeOf[column], 'TIMESTAMP WITH TIME ZONE', column);
    assert.equal(typeOf.properties, 'VARCHAR');
    assert.equal(typeOf.canonical_name, 'VARCHAR');
    assert.equal(String(typeOf.date), 'DATE');
    const [first] = await rows(
      `SELECT json_extract(properties, '$.i')::INT AS i, canonical_name FROM ${events('load')} WHERE id = '${uuids[0]}'`,
    );
    assert.deepEqual(first, { i: 0, canonical_name: 'file_written' });
    const identities = await rows(
      `SELECT external_id, type, typeof(received_at) AS at FROM read_parquet('${join(root, 'load')}/identities/**/*.parquet')`,
    );
    assert.deepEqual(identities, [{ external_id: 'u1', type: 'user.identified', at: 'TIMESTAMP WITH TIME ZONE' }]);
    assert.ok(!written.some((f) => f.includes('.tmp')), 'no temporary file left');
  });

  it('holds a partial batch until max_wait_ms after its oldest event was received, not after it was first seen', async () => {
    const product = await ctx.product('files-wait');
    const created = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'wait',
      batch: { max_messages: 100, max_wait_ms: 60_000 },
    });
    assert.equal(created.statusCode, 201, created.body);
    const eventFiles = () => files('wait').filter((f) => f.startsWith('events/'));
    const count = async () =>
      (await rows(`SELECT count(*)::INT AS n, count(DISTINCT id)::INT AS d FROM ${events('wait')}`))[0];
    await track(product.eventsKey, 'wait.done', 'w1');
    await track(product.eventsKey, 'wait.done', 'w2');
    await deliver();
    assert.deepEqual(eventFiles(), [], 'held: younger than max_wait_ms');
    await track(product.eventsKey, 'wait.done', 'w3'); // joins the held batch
    await deliver();
    assert.deepEqual(eventFiles(), []);
    ctx.clock.advance(60_000);
    await deliver();
    assert.equal(eventFiles().length, 1, 'one file of the whole batch');
    assert.deepEqual(await count(), { n: 3, d: 3 });

    // Received a minute before any pass sees them: written at the first one.
    await track(product.eventsKey, 'wait.done', 'w4');
    await track(product.eventsKey, 'wait.done', 'w5');
    ctx.clock.advance(60_000);
    await ctx.services.destinations.tick();
    await ctx.services.destinations.idle();
    assert.equal(eventFiles().length, 2);
    assert.deepEqual(await count(), { n: 5, d: 5 });
  });

  it('a replay with other batch sizes leaves every event in one file; erasure rewrites the files without the person', async () => {
    const product = await ctx.product('files-once');
    const created = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'once',
      batch: { max_messages: 3, max_wait_ms: 0 },
    });
    const id = created.json().data.id as string;
    for (let i = 0; i < 11; i++) await track(product.eventsKey, 'once.done', `p${i % 2}`, { i });
    await deliver();
    const count = async () =>
      (await rows(`SELECT count(*)::INT AS n, count(DISTINCT id)::INT AS d FROM ${events('once')}`))[0];
    assert.deepEqual(await count(), { n: 11, d: 11 });
    for (const maxMessages of [5, 2, 100]) {
      const edited = await admin('PATCH', `/products/${product.id}/destinations/${id}`, {
        batch: { max_messages: maxMessages, max_wait_ms: 0 },
      });
      assert.equal(edited.statusCode, 200, edited.body);
      await admin('POST', `/products/${product.id}/destinations/${id}/replay`, { from: 'beginning' });
      await deliver();
      assert.deepEqual(await count(), { n: 11, d: 11 }, `after a replay in batches of ${maxMessages}`);
    }
    assert.equal(files('once').filter((f) => f.startsWith('events/')).length, 1, 'one file of all 11 now');

    const erased = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'p1' });
    assert.equal(erased.statusCode, 202, erased.body);
    await deliver();
    assert.deepEqual(await rows(`SELECT DISTINCT subject_id FROM ${events('once')}`), [{ subject_id: 'p0' }]);
    assert.deepEqual(await count(), { n: 6, d: 6 });
  });

  it('erasure reads only the footers and bloom filters of the files that cannot hold the person', async () => {
    const product = await ctx.product('files-bloom');
    await admin('POST', `/products/${product.id}/destinations`, {
      type: 'parquet',
      name: 'f',
      path: 'bloom',
      batch: { max_messages: 2, max_wait_ms: 0 },
    });
    for (const person of ['keep-1', 'keep-1', 'gone', 'keep-2', 'keep-2', 'keep-3'])
      await track(product.eventsKey, 'bloom.checked', person);
    await deliver();
    const paths = files('bloom').map((f) => join(root, 'bloom', f));
    assert.equal(paths.length, 3, paths.join('\n'));
    // The files without the person get their data pages zeroed (footer and bloom filters kept): a reader that
    // went past the bloom filters would fail on them, or rewrite them.
    const originals = new Map<string, { bytes: Buffer; zeroed: Buffer }>();
    for (const path of paths) {
      const bytes = readFileSync(path);
      const metadata = parquetMetadata(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
      const blooms = metadata.row_groups.flatMap((g) =>
        g.columns.map((c) => Number(c.meta_data?.bloom_filter_offset ?? bytes.length)),
      );
      const holdsGone = (await rows(`SELECT subject_id FROM read_parquet('${path}')`)).some(
        (r) => r.subject_id === 'gone',
      );
      if (holdsGone) continue;
      const zeroed = Buffer.from(bytes);
      zeroed.fill(0, 4, Math.min(...blooms));
      writeFileSync(path, zeroed);
      originals.set(path, { bytes, zeroed });
    }
    assert.equal(originals.size, 2);
    const erased = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'gone' });
    assert.equal(erased.statusCode, 202, erased.body);
    await deliver();
    const [shown] = (await admin('GET', `/products/${product.id}/destinations`)).json().data as Array<{
      last_error: string | null;
      lag: number;
    }>;
    assert.equal(shown!.last_error, null);
    assert.equal(shown!.lag, 0, 'the erasure was delivered');
    for (const [path, { bytes, zeroed }] of originals) {
      assert.ok(readFileSync(path).equals(zeroed), `${path} still has its zeroed pages: not rewritten`);
      writeFileSync(path, bytes);
    }
    const subjects = await rows(`SELECT subject_id FROM ${events('bloom')} ORDER BY subject_id`);
    assert.deepEqual(
      subjects.map((r) => r.subject_id),
      ['keep-1', 'keep-1', 'keep-2', 'keep-2', 'keep-3'],
    );
  });
});
