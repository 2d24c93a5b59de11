// JSON bodies as a tree the fuzzer can bend in ways JSON.stringify cannot: duplicate keys, numbers
// out of double range written literally, raw text. Objects keep their entries as a list, so
// "__proto__" is just a key and a key may appear twice.

export class RawJson {
  constructor(readonly text: string) {}
}

export class JsonObject {
  constructor(readonly entries: Array<[string, JsonNode]> = []) {}
}

export type JsonNode = null | boolean | number | string | RawJson | JsonObject | JsonNode[];

/** A plain value (as a route's valid body is written) as a tree. */
export function toTree(value: unknown): JsonNode {
  if (value === null || typeof value === 'boolean' || typeof value === 'number' || typeof value === 'string')
    return value;
  if (value instanceof RawJson || value instanceof JsonObject) return value;
  if (Array.isArray(value)) return value.map(toTree);
  if (typeof value === 'object')
    return new JsonObject(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, toTree(v)]));
  return null;
}

export function serialize(node: JsonNode): string {
  if (node instanceof RawJson) return node.text;
  if (node instanceof JsonObject)
    return `{${node.entries.map(([k, v]) => `${JSON.stringify(k)}:${serialize(v)}`).join(',')}}`;
  if (Array.isArray(node)) return `[${node.map(serialize).join(',')}]`;
  if (typeof node === 'number' && !Number.isFinite(node)) return 'null';
  return JSON.stringify(node);
}

/** Where a node sits: its parent container and its key (object) or index (array). */
export interface NodeSlot {
  pointer: string;
  parent: JsonObject | JsonNode[];
  key: string | number;
  node: JsonNode;
}

/** Every node below the root, depth-first, at most `limit` of them (big batches stay cheap). */
export function slotsOf(root: JsonNode, limit = 400): NodeSlot[] {
  const slots: NodeSlot[] = [];
  const visit = (node: JsonNode, pointer: string) => {
    if (slots.length >= limit) return;
    if (node instanceof JsonObject) {
      node.entries.forEach(([key, child], index) => {
        const slotPointer = `${pointer}/${key}`;
        slots.push({ pointer: slotPointer, parent: node, key: index, node: child });
        visit(child, slotPointer);
      });
    } else if (Array.isArray(node)) {
      node.forEach((child, index) => {
        slots.push({ pointer: `${pointer}/${index}`, parent: node, key: index, node: child });
        visit(child, `${pointer}/${index}`);
      });
    }
  };
  visit(root, '');
  return slots;
}

export function replaceAt(slot: NodeSlot, value: JsonNode): void {
  if (slot.parent instanceof JsonObject) slot.parent.entries[slot.key as number]![1] = value;
  else slot.parent[slot.key as number] = value;
}

export function removeAt(slot: NodeSlot): void {
  if (slot.parent instanceof JsonObject) slot.parent.entries.splice(slot.key as number, 1);
  else slot.parent.splice(slot.key as number, 1);
}

/** The key of a slot in an object (undefined for array elements). */
export function keyOf(slot: NodeSlot): string | undefined {
  return slot.parent instanceof JsonObject ? slot.parent.entries[slot.key as number]![0] : undefined;
}

/** Nested objects ({"a":{"a":…}}) or arrays ([[…]]) `depth` levels deep, as raw text (cheap to build). */
export function deepNesting(depth: number, kind: 'object' | 'array', leaf = '1'): RawJson {
  return kind === 'object'
    ? new RawJson('{"a":'.repeat(depth) + leaf + '}'.repeat(depth))
    : new RawJson('['.repeat(depth) + leaf + ']'.repeat(depth));
}
