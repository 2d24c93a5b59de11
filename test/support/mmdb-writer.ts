// Writes a small MaxMind DB (format 2.0, https://maxmind.github.io/MaxMind-DB/) for tests: an IPv6 search tree with
// IPv4 networks under ::/96, 24-bit records, and GeoLite2-City-shaped records. Tests never download a database.
import { writeFileSync } from 'node:fs';

export type MmdbValue = string | number | boolean | MmdbValue[] | { [key: string]: MmdbValue } | Uint64;

/** An unsigned 64-bit integer field (metadata's `build_epoch`). */
export class Uint64 {
  constructor(readonly value: bigint) {}
}

/** A network and the record a lookup of any address in it answers. */
export interface MmdbNetwork {
  /** CIDR: `203.0.113.0/24` or `2001:db8::/32`. */
  network: string;
  record: { [key: string]: MmdbValue };
}

/** A GeoLite2-City-like record: the fields Inlet's `geoip` step reads, in the layout MaxMind ships. */
export function cityRecord(city: {
  country: string;
  region?: string;
  city?: string;
  latitude?: number;
  longitude?: number;
}): { [key: string]: MmdbValue } {
  const record: { [key: string]: MmdbValue } = {
    country: { iso_code: city.country, names: { en: `Country ${city.country}` } },
    continent: { code: 'EU', names: { en: 'Europe' } },
  };
  if (city.region) record.subdivisions = [{ iso_code: 'R1', names: { en: city.region, de: `${city.region} (de)` } }];
  if (city.city) record.city = { names: { en: city.city, fr: `${city.city} (fr)` } };
  if (city.latitude !== undefined && city.longitude !== undefined)
    record.location = {
      latitude: city.latitude,
      longitude: city.longitude,
      accuracy_radius: 20,
      time_zone: 'Europe/Paris',
    };
  return record;
}

const RECORD_BITS = 24;
const METADATA_MARKER = Buffer.from([0xab, 0xcd, 0xef, ...Buffer.from('MaxMind.com')]);

/** The bytes of a database holding `networks` (which must not nest). */
export function buildMmdb(networks: MmdbNetwork[], databaseType = 'GeoLite2-City'): Buffer {
  const data: Buffer[] = [];
  let dataLength = 0;
  const offsets: number[] = [];
  for (const { record } of networks) {
    offsets.push(dataLength);
    const encoded = encode(record);
    data.push(encoded);
    dataLength += encoded.length;
  }

  // Nodes as [left, right]; a record is a node index, -1 (empty) or { data: offset }.
  type Slot = number | { data: number };
  const nodes: [Slot, Slot][] = [[-1, -1]];
  networks.forEach(({ network }, index) => {
    const bits = networkBits(network);
    let node = 0;
    bits.forEach((bit, depth) => {
      const last = depth === bits.length - 1;
      const slot = nodes[node]![bit]!;
      if (last) {
        nodes[node]![bit] = { data: offsets[index]! };
        return;
      }
      if (typeof slot === 'number' && slot >= 0) {
        node = slot;
        return;
      }
      if (typeof slot !== 'number') throw new Error(`${network} nests inside another network`);
      nodes.push([-1, -1]);
      nodes[node]![bit] = nodes.length - 1;
      node = nodes.length - 1;
    });
  });

  const nodeCount = nodes.length;
  const tree = Buffer.alloc(nodeCount * ((RECORD_BITS * 2) / 8));
  const value = (slot: Slot) => (typeof slot === 'number' ? (slot < 0 ? nodeCount : slot) : nodeCount + 16 + slot.data);
  nodes.forEach(([left, right], index) => {
    tree.writeUIntBE(value(left), index * 6, 3);
    tree.writeUIntBE(value(right), index * 6 + 3, 3);
  });

  const metadata = encode({
    node_count: nodeCount,
    record_size: RECORD_BITS,
    ip_version: 6,
    database_type: databaseType,
    languages: ['en'],
    binary_format_major_version: 2,
    binary_format_minor_version: 0,
    build_epoch: new Uint64(BigInt(Math.floor(Date.UTC(2026, 0, 1) / 1000))),
    description: { en: 'Inlet test database' },
  });
  return Buffer.concat([tree, Buffer.alloc(16), ...data, METADATA_MARKER, metadata]);
}

export function writeMmdb(path: string, networks: MmdbNetwork[]): void {
  writeFileSync(path, buildMmdb(networks));
}

/** The network's prefix as bits of a 128-bit address; IPv4 sits under ::/96, where readers look for it. */
function networkBits(cidr: string): number[] {
  const [address, lengthText] = cidr.split('/') as [string, string];
  const length = Number(lengthText);
  if (address.includes('.')) {
    const bytes = address.split('.').map(Number);
    return [...Array(96).fill(0), ...bitsOf(bytes, length)];
  }
  return bitsOf(ipv6Bytes(address), length);
}

function bitsOf(bytes: number[], length: number): number[] {
  const bits: number[] = [];
  for (let i = 0; i < length; i++) bits.push((bytes[i >> 3]! >> (7 - (i & 7))) & 1);
  return bits;
}

function ipv6Bytes(address: string): number[] {
  const [head, tail = ''] = address.split('::') as [string, string?];
  const groups = (text: string) => (text ? text.split(':').map((group) => parseInt(group, 16)) : []);
  const left = groups(head);
  const right = address.includes('::') ? groups(tail) : [];
  const all = [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
  return all.flatMap((group) => [group >> 8, group & 0xff]);
}

// The data section's encoding: a control byte (type in the top 3 bits, size in the low 5), for types above 7
// an extended-type byte, then the size's extra bytes, then the payload.
function control(type: number, size: number): Buffer {
  const extended = type > 7;
  const head = (extended ? 0 : type) << 5;
  let sizeBits: number;
  let extra: Buffer;
  if (size < 29) {
    sizeBits = size;
    extra = Buffer.alloc(0);
  } else if (size < 285) {
    sizeBits = 29;
    extra = Buffer.from([size - 29]);
  } else if (size < 65821) {
    sizeBits = 30;
    extra = Buffer.alloc(2);
    extra.writeUInt16BE(size - 285);
  } else {
    sizeBits = 31;
    extra = Buffer.alloc(3);
    extra.writeUIntBE(size - 65821, 0, 3);
  }
  return Buffer.concat([Buffer.from([head | sizeBits]), extended ? Buffer.from([type - 7]) : Buffer.alloc(0), extra]);
}

function unsigned(type: number, value: bigint): Buffer {
  const bytes: number[] = [];
  for (let rest = value; rest > 0n; rest >>= 8n) bytes.unshift(Number(rest & 0xffn));
  return Buffer.concat([control(type, bytes.length), Buffer.from(bytes)]);
}

function encode(value: MmdbValue): Buffer {
  if (value instanceof Uint64) return unsigned(9, value.value);
  if (typeof value === 'string') {
    const bytes = Buffer.from(value, 'utf8');
    return Buffer.concat([control(2, bytes.length), bytes]);
  }
  if (typeof value === 'boolean') return control(14, value ? 1 : 0);
  if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= 0 && value <= 0xffff) return unsigned(5, BigInt(value));
    if (Number.isInteger(value) && value >= 0 && value <= 0xffffffff) return unsigned(6, BigInt(value));
    const payload = Buffer.alloc(8);
    payload.writeDoubleBE(value);
    return Buffer.concat([control(3, 8), payload]);
  }
  if (Array.isArray(value)) return Buffer.concat([control(11, value.length), ...value.map(encode)]);
  const entries = Object.entries(value);
  return Buffer.concat([control(7, entries.length), ...entries.flatMap(([key, item]) => [encode(key), encode(item)])]);
}
