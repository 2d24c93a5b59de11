/**
 * The enrichment steps of transformations (spec §3): `user_agent` (ua-parser-js 1.x), `bot` (the
 * crawler-user-agents list) and `geoip` (the operator's MaxMind-format database). Pure lookups on strings;
 * the step engine reads the `from` path and writes the answer at `to`.
 */
import { createRequire } from 'node:module';
import maxmind, { Reader, type CityResponse } from 'maxmind';
import UAParser from 'ua-parser-js';
import { sharedJson } from '../../domain/shared-json.js';

/** The `user_agent` step's answer: keys are absent when the parser does not know them. */
export interface UserAgentDetails {
  browser: { name?: string; version?: string };
  os: { name?: string; version?: string };
  device: { type?: string; vendor?: string; model?: string };
}

/** The `geoip` step's answer (clarifications: `country` ISO 3166-1 alpha-2, English names, numbers). */
export interface GeoDetails {
  country?: string;
  region?: string;
  city?: string;
  latitude?: number;
  longitude?: number;
}

/** Longer user agents are cut before matching: no real one is longer, and it bounds the regular expressions' work. */
const MAX_USER_AGENT = 1024;
const CACHE_ENTRIES = 2000;

/**
 * A small cache of recently used answers: the same few user agents come back on nearly every event. Two
 * generations instead of a strict least-recently-used order: a hit in the young map costs one lookup (reordering
 * a map on every hit cost as much as the rest of the step); a hit in the old one moves the entry to the young;
 * when the young is full it becomes the old, and what was not used since is let go.
 */
class RecentCache<T> {
  private young = new Map<string, T>();
  private old = new Map<string, T>();
  constructor(private readonly size: number) {}

  get(key: string, compute: (key: string) => T): T {
    const hit = this.young.get(key);
    if (hit !== undefined) return hit;
    const value = this.old.get(key) ?? compute(key);
    if (this.young.size >= this.size / 2) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(key, value);
    return value;
  }
}

const parsed = new RecentCache<UserAgentDetails>(CACHE_ENTRIES);

function present<T extends object>(fields: T): T {
  return Object.fromEntries(
    Object.entries(fields).filter(([, value]) => typeof value === 'string' && value !== ''),
  ) as T;
}

/**
 * Browser, OS and device of a user agent: one answer per user agent, shared by the events that carry it (frozen,
 * with its JSON text made once: shared-json.ts). A step that writes inside it works on a copy (transform-paths.ts).
 */
export function parseUserAgent(userAgent: string): Readonly<UserAgentDetails> {
  return parsed.get(userAgent.slice(0, MAX_USER_AGENT), (text) => {
    const { browser, os, device } = UAParser(text);
    return sharedJson({
      browser: present({ name: browser.name, version: browser.version }),
      os: present({ name: os.name, version: os.version }),
      device: present({ type: device.type, vendor: device.vendor, model: device.model }),
    });
  });
}

interface BotPattern {
  literal: string;
  pattern: RegExp;
}
let botIndex: Map<string, BotPattern[]> | undefined;
const botAnswers = new RecentCache<boolean>(CACHE_ENTRIES);

/**
 * The list's ~1,500 patterns, indexed by the first three characters of a literal each must contain. One
 * regular expression of all of them costs V8 ~2 ms per user agent (every alternative at every position);
 * the index tries only the patterns whose literal occurs, so a browser's user agent costs a few microseconds.
 */
function bots(): Map<string, BotPattern[]> {
  if (botIndex) return botIndex;
  const list = createRequire(import.meta.url)('crawler-user-agents') as { pattern: string }[];
  const index = new Map<string, BotPattern[]>();
  for (const { pattern } of list) {
    for (const alternative of topLevelAlternatives(pattern)) {
      // Every pattern of the list has a literal of three characters or more; one without would be tried always.
      const literal = requiredLiteral(alternative);
      const key = literal.length >= 3 ? literal.slice(0, 3) : '';
      const entries = index.get(key) ?? [];
      entries.push({ literal, pattern: new RegExp(alternative) });
      index.set(key, entries);
    }
  }
  botIndex = index;
  return index;
}

/** The parts of a pattern split at its `|` outside groups and classes. */
export function topLevelAlternatives(pattern: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') i++;
    else if (inClass) inClass = c !== ']';
    else if (c === '[') inClass = true;
    else if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === '|' && depth === 0) {
      parts.push(pattern.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(pattern.slice(start));
  return parts;
}

/** The longest run of plain characters a match of `alternative` must contain (outside groups, classes and optional parts). */
export function requiredLiteral(alternative: string): string {
  let best = '';
  let run = '';
  let depth = 0;
  let inClass = false;
  const end = () => {
    if (run.length > best.length) best = run;
    run = '';
  };
  for (let i = 0; i < alternative.length; i++) {
    const c = alternative[i]!;
    if (inClass || depth > 0) {
      if (c === '\\') i++;
      else if (inClass) inClass = c !== ']';
      else if (c === '(') depth++;
      else if (c === ')') depth--;
    } else if (c === '\\') {
      const next = alternative[++i] ?? '';
      if (/[\w]/.test(next)) end();
      else run += next;
    } else if (c === '[') {
      end();
      inClass = true;
    } else if (c === '(') {
      end();
      depth++;
    } else if (c === '?' || c === '*' || c === '{') {
      run = run.slice(0, -1); // the character before is optional
      end();
      if (c === '{') while (i < alternative.length && alternative[i] !== '}') i++;
    } else if ('+.^$|)'.includes(c)) end();
    else run += c;
  }
  end();
  return best;
}

/** Whether a user agent is a known crawler, bot or automated client. */
export function isBot(userAgent: string): boolean {
  return botAnswers.get(userAgent.slice(0, MAX_USER_AGENT), (text) => {
    const index = bots();
    for (const { pattern } of index.get('') ?? []) if (pattern.test(text)) return true;
    for (let i = 0; i + 3 <= text.length; i++) {
      const candidates = index.get(text.slice(i, i + 3));
      if (!candidates) continue;
      for (const { literal, pattern } of candidates) if (text.startsWith(literal, i) && pattern.test(text)) return true;
    }
    return false;
  });
}

/** A MaxMind-format database (GeoLite2-City, GeoIP2-City or a file of the same layout), opened once. */
export interface GeoIp {
  readonly databaseType: string;
  /** The place of an address; `undefined` for an address that is not valid or not in the database. */
  lookup(address: string): GeoDetails | undefined;
}

export class GeoIpDatabaseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GeoIpDatabaseError';
  }
}

/** Opens the database at `path` (INLET_GEOIP_DATABASE); the error names the setting and the reason. */
export async function openGeoIp(path: string, setting = 'INLET_GEOIP_DATABASE'): Promise<GeoIp> {
  let reader: Reader<CityResponse>;
  try {
    reader = await maxmind.open<CityResponse>(path);
  } catch (error) {
    throw new GeoIpDatabaseError(
      `${setting}: cannot open "${path}" as a MaxMind database (${(error as Error).message})`,
    );
  }
  return geoIpOf(reader);
}

/** The same over a database already in memory (tests). */
export function geoIpFromBuffer(buffer: Buffer): GeoIp {
  return geoIpOf(new Reader<CityResponse>(buffer));
}

function geoIpOf(reader: Reader<CityResponse>): GeoIp {
  return {
    databaseType: reader.metadata.databaseType,
    lookup(address) {
      // An IPv4 client behind a dual-stack socket arrives as ::ffff:a.b.c.d; the database files it as a.b.c.d.
      const ip = address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
      if (!maxmind.validate(ip)) return undefined;
      const found = reader.get(ip);
      if (!found) return undefined;
      const place: GeoDetails = {};
      const country = found.country?.iso_code ?? found.registered_country?.iso_code;
      if (country) place.country = country;
      const region = found.subdivisions?.[0]?.names?.en;
      if (region) place.region = region;
      if (found.city?.names?.en) place.city = found.city.names.en;
      if (typeof found.location?.latitude === 'number') place.latitude = found.location.latitude;
      if (typeof found.location?.longitude === 'number') place.longitude = found.location.longitude;
      return place;
    },
  };
}
