// The PostgreSQL warehouse's binary COPY values (src/services/destinations/warehouse/copy.ts): times as the
// server's text input reads them (the expected microseconds were read back from PostgreSQL 15), uuids as their
// 16 bytes, and the buffer's framing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { CopyRows, parseTime } from '../../src/services/destinations/warehouse/copy.js';

/** Microseconds since 2000-01-01 UTC, as the server stores a timestamptz. */
const micros = (text: string): bigint | undefined => {
  const t = parseTime(text);
  return t === undefined ? undefined : BigInt(t.seconds) * 1_000_000n + BigInt(t.micros);
};

/** The one field of a one-row COPY: its bytes. */
function field(write: (out: CopyRows) => void): Buffer {
  const out = new CopyRows(1);
  out.row(1);
  write(out);
  const bytes = Buffer.from(out.finish());
  out.done();
  assert.equal(bytes.subarray(0, 11).toString('latin1'), 'PGCOPY\n\xff\r\n\0');
  assert.equal(bytes.readInt16BE(19), 1, 'one field');
  assert.equal(bytes.readInt16BE(bytes.length - 2), -1, 'the trailer');
  const length = bytes.readInt32BE(21);
  return bytes.subarray(25, 25 + length);
}

test('times are read as PostgreSQL reads them: offsets, fractions rounded half to even, any year', () => {
  const expected: Array<[string, bigint]> = [
    ['2026-03-01T12:00:00.0000005Z', 825681600000000n],
    ['2026-03-01T12:00:00.0000015Z', 825681600000002n],
    ['2026-03-01T12:00:00.9999995Z', 825681601000000n],
    ['0001-01-01T00:00:00+14:00', -63082332000000000n],
    ['1999-12-31 23:59:59.123456789-05:30', 19799123457n],
    ['2024-02-29T00:00:00z', 762480000000000n],
  ];
  for (const [text, value] of expected) assert.equal(micros(text), value, text);
  for (const text of [
    '2026-02-30T00:00:00Z',
    '2025-02-29T00:00:00Z',
    '2026-03-01T24:00:00Z',
    '2026-03-01T12:00:00+16:00',
    '2026-03-01T12:00:00',
    'yesterday',
  ])
    assert.equal(parseTime(text), undefined, text);
});

test('a time as toISOString writes it is the same microseconds by the fast path and by parseTime', () => {
  fc.assert(
    fc.property(fc.integer({ min: Date.UTC(1, 0, 1), max: Date.UTC(9999, 11, 31) }), (ms) => {
      const text = new Date(ms).toISOString();
      const bytes = field((out) => out.time(text));
      assert.equal(bytes.length, 8);
      const expected = BigInt(ms - Date.UTC(2000, 0, 1)) * 1000n;
      assert.equal(bytes.readBigInt64BE(0), expected, text);
      assert.equal(micros(text), expected, text);
    }),
    { numRuns: 2000, seed: 34 },
  );
  assert.throws(() => field((out) => out.time('2026-02-30T00:00:00.000Z')), /out of range|invalid/);
  // The fast path's shape with a character that is not a digit in any digit's place: refused, never written.
  const shape = '2026-03-01T12:34:56.789Z';
  for (let at = 0; at < shape.length; at++) {
    if (!/\d/.test(shape[at]!)) continue;
    const text = `${shape.slice(0, at)}x${shape.slice(at + 1)}`;
    assert.throws(() => field((out) => out.time(text)), /out of range|invalid/, text);
  }
});

test('uuids, texts, jsonb and numbers are framed as the binary format has them', () => {
  const id = '0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506';
  assert.deepEqual(
    field((out) => out.uuid(id)),
    Buffer.from(id.replaceAll('-', ''), 'hex'),
  );
  assert.deepEqual(
    field((out) => out.uuid(id.toUpperCase())),
    Buffer.from(id.replaceAll('-', ''), 'hex'),
  );
  assert.deepEqual(
    field((out) => out.uuid(id.replaceAll('-', ''))),
    Buffer.from(id.replaceAll('-', ''), 'hex'),
  );
  for (const bad of ['0192f3a4-5b6c', `${id.slice(0, 35)}g`, `${id.slice(0, 35)}\u0130`, `${id}0`])
    assert.throws(() => field((out) => out.uuid(bad)), /uuid/, bad);
  for (const text of ['', 'plain', 'tab\there', 'naïve ☃ 𝄞', 'x'.repeat(500)])
    assert.equal(field((out) => out.text(text)).toString('utf8'), text);
  const json = field((out) => out.jsonb('{"a":"é"}'));
  assert.equal(json[0], 1, 'jsonb version 1');
  assert.equal(json.subarray(1).toString('utf8'), '{"a":"é"}');
  assert.equal(field((out) => out.int8(-2)).readBigInt64BE(0), -2n);
  assert.equal(field((out) => out.int8(2 ** 60)).readBigInt64BE(0), 2n ** 60n);
  assert.equal(field((out) => out.float8(3.5)).readDoubleBE(0), 3.5);
  assert.deepEqual(
    field((out) => out.bool(true)),
    Buffer.from([1]),
  );
  const out = new CopyRows(1);
  out.row(1);
  out.nul();
  const bytes = Buffer.from(out.finish());
  out.done();
  assert.equal(bytes.readInt32BE(21), -1, 'a null is a length of -1');
});
