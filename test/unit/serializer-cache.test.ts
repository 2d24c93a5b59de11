// The process-wide cache of response serializers (src/http/serializer-cache.ts): a schema compiled once
// is reused by a later app, and two different schemas (or the same schema against different shared
// schemas) never share a serializer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cachedSerializerFactory } from '../../src/http/serializer-cache.js';

const route = (schema: unknown) => ({ method: 'GET', url: '/x', httpStatus: '200', schema });

test('the same schema gives the same compiled serializer to a later app; another schema its own', () => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } } };
  const first = cachedSerializerFactory({}, {})(route(schema));
  const again = cachedSerializerFactory({}, {})(route(structuredClone(schema)));
  assert.equal(again, first);
  assert.equal(first({ a: 1, secret: 'x' }), '{"a":1}');
  const other = cachedSerializerFactory({}, {})(route({ type: 'object', properties: { b: { type: 'string' } } }));
  assert.notEqual(other, first);
  assert.equal(other({ a: 1, b: 'y' }), '{"b":"y"}');
});

test('a schema that references a shared schema is compiled per set of shared schemas', () => {
  const schema = { type: 'object', properties: { item: { $ref: 'Item#' } } };
  const withA = cachedSerializerFactory(
    { Item: { $id: 'Item', type: 'object', properties: { a: { type: 'integer' } } } },
    {},
  )(route(schema));
  const withB = cachedSerializerFactory(
    { Item: { $id: 'Item', type: 'object', properties: { b: { type: 'integer' } } } },
    {},
  )(route(schema));
  assert.equal(withA({ item: { a: 1, b: 2 } }), '{"item":{"a":1}}');
  assert.equal(withB({ item: { a: 1, b: 2 } }), '{"item":{"b":2}}');
});

test('a schema with the $id of a shared schema is compiled the same whatever was compiled before it', () => {
  const shared = { Item: { $id: 'Item', type: 'object', properties: { a: { type: 'integer' } } } };
  const factory = cachedSerializerFactory(shared, {});
  const own = factory(route(shared.Item));
  const referencing = factory(route({ type: 'object', properties: { item: { $ref: 'Item#' } } }));
  assert.equal(own({ a: 1, z: 0 }), '{"a":1}');
  assert.equal(referencing({ item: { a: 1, z: 0 } }), '{"item":{"a":1}}');
});
