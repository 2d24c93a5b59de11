// Response serializers compiled once per process, not once per app.
//
// Fastify compiles every route's response schemas with fast-json-stringify when an app starts (about
// 100 ms of CPU for Inlet's routes). A serializer is a pure function of its schema and the shared
// schemas it may reference, so an app built again in the same process (the test suites build hundreds;
// `inlet` commands build one each) reuses the one already compiled. One app per process, as a server
// runs, compiles exactly what it compiled before. The compile itself is Fastify's own
// (@fastify/fast-json-stringify-compiler), each time from a fresh factory: its factory drops a schema's
// own $id from the shared schemas it passes on, for the compiles after that one too, so a cached result
// must not depend on which schemas were compiled before it.
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

type SerializerFactory = ReturnType<typeof SerializerSelector>;
type Serializer = (data: unknown) => string;

const compiled = new Map<string, Serializer>();
/** Schemas are route constants: the cache stays as large as the set of distinct response schemas. */
const MAX_CACHED = 2_000;

export const cachedSerializerFactory: SerializerFactory = (externalSchemas, serializerOpts) => {
  const sharedKey = JSON.stringify([externalSchemas ?? null, serializerOpts ?? null]);
  return (route) => {
    const key = `${JSON.stringify(route.schema)}\u0000${sharedKey}`;
    let serializer = compiled.get(key);
    if (serializer === undefined) {
      serializer = SerializerSelector()(externalSchemas, serializerOpts)(route) as Serializer;
      if (compiled.size >= MAX_CACHED) compiled.clear();
      compiled.set(key, serializer);
    }
    return serializer;
  };
};
