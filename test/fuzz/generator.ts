// The HTTP fuzz case generator: (seed, case index, context) → one raw HTTP/1.1 request and what the
// harness must expect of the connection. Pure and deterministic: the same seed and index give the
// same case (only the keys and ids of the context, created per run, differ between runs), so a
// failing case is reproduced with INLET_FUZZ_SEED and INLET_FUZZ_ONLY.
//
// A case starts from a valid request for a route of the app (method, path, query, auth, body) and
// then, by mode, stays valid ("valid"), has one field of its body, query or path broken ("field",
// so that validation is reached and not only the first 401), one header or its framing broken
// ("header"), or several things at once ("chaos").
import { gzipSync } from 'node:zlib';
import { Random } from './random.js';
import {
  deepNesting,
  JsonObject,
  keyOf,
  RawJson,
  removeAt,
  replaceAt,
  serialize,
  slotsOf,
  toTree,
  type JsonNode,
} from './json-tree.js';

export type RouteAuth = 'events' | 'reports' | 'admin' | 'segment' | 'none';

export interface RouteInfo {
  method: string;
  /** Fastify's path: ":name" parameters, "*" wildcard. */
  path: string;
  auth: RouteAuth;
}

export interface FuzzContext {
  routes: readonly RouteInfo[];
  keys: {
    events: string;
    reports: string;
    revoked: string;
    expired: string;
    otherEvents: string;
    otherReports: string;
  };
  adminToken: string;
  productId: string;
  otherProductId: string;
  /** Keys that DELETE /admin/v1/keys/:key_id may revoke (never the keys above). */
  spareKeyIds: readonly string[];
  /** A Plausible fake on 127.0.0.1 that answers site "acme.example" with api key "fuzz-plausible-key". */
  plausibleUrl: string;
  /** A loopback URL nobody listens on. */
  closedUrl: string;
  /** Body limits of the app, for oversized bodies just above them. */
  maxBodyBytes: number;
  maxEventBytes: number;
  maxBatchEvents: number;
}

/** What the harness does after sending the request. */
export type After =
  | { kind: 'read' }
  /** Ends our side after sending: the server sees EOF where it may still expect body bytes. */
  | { kind: 'half-close' }
  /** Waits, then destroys the socket: a client that gives up mid-request. */
  | { kind: 'abort'; afterMs: number };

export interface FuzzCase {
  seed: number;
  index: number;
  /** "POST /api/v2/events", or "unknown" for a path the app does not have. */
  route: string;
  mode: 'valid' | 'field' | 'header' | 'chaos';
  /** What was done to the valid request, in order. */
  mutations: string[];
  method: string;
  /** The whole request, as sent on the socket. */
  bytes: Buffer;
  /** The request is HEAD: its answer has no body whatever Content-Length says. */
  headOnly: boolean;
  after: After;
  /** A complete, correctly framed request: the server must answer it (closing without an answer fails). */
  mustAnswer: boolean;
  /** The bytes may hold more than one request (Content-Length shorter than the body, no length). */
  pipelined: boolean;
  /** 502 upstream_error is allowed (an admin-triggered traffic sync, clarifications §11). */
  allow502: boolean;
}

// ---------------------------------------------------------------------------------------------
// Valid requests per route

const V1_TYPES = ['user_signed_up', 'user_active', 'session_start', 'session_end', 'user_deleted'];
const SUBJECT_TYPES = ['user', 'account', 'subscription'];
const SUBJECT_IDS = ['u1', 'u2', 'u3', 'acct_1', 'sub_9', 'user_1'];
const USER_IDS = ['user_1', 'user_2', 'user_3', 'anon_1', 'anon_2', 'anon_3'];
const ENTITY_NAMES = ['project', 'user', 'invoice', 'session', 'a', 'report_export'];
const ACTIONS = ['created', 'signed_up', 'paid', 'x1', 'deleted'];
const DIMENSIONS = ['date', 'source', 'medium', 'campaign', 'landing_page'];
const METRICS = [
  'sessions',
  'users',
  'new_users',
  'pageviews',
  'engaged_sessions',
  'bounce_rate',
  'avg_session_duration',
  'conversions',
];
const BASE_TIME = Date.UTC(2026, 9, 15, 12, 0, 0);

function isoTime(rng: Random): string {
  const at = new Date(BASE_TIME - rng.int(0, 400 * 86_400) * 1000 - rng.int(0, 999));
  const iso = at.toISOString();
  return rng.pick([iso, iso.replace('Z', '+02:00'), iso.slice(0, 19) + 'Z', iso.replace('Z', '-11:30')]);
}

function day(rng: Random, spread = 60): string {
  return new Date(BASE_TIME - rng.int(0, spread) * 86_400_000).toISOString().slice(0, 10);
}

function randomValue(rng: Random, depth: number): unknown {
  const kind = rng.int(0, depth > 2 ? 4 : 6);
  switch (kind) {
    case 0:
      return rng.string(rng.int(0, 12));
    case 1:
      return rng.int(-1000, 100000);
    case 2:
      return rng.bool();
    case 3:
      return null;
    case 4:
      return rng.next() * 1000;
    case 5:
      return Array.from({ length: rng.int(0, 3) }, () => randomValue(rng, depth + 1));
    default:
      return randomProps(rng, depth + 1);
  }
}

function randomProps(rng: Random, depth = 0): Record<string, unknown> {
  const props: Record<string, unknown> = {};
  const count = rng.int(0, 5);
  for (let i = 0; i < count; i++)
    props[rng.pick(['plan', 'amount', 'seats', 'tags', 'meta', 'source', 'ok', rng.string(rng.int(1, 8))])] =
      randomValue(rng, depth);
  return props;
}

function v2Event(rng: Random): Record<string, unknown> {
  const event: Record<string, unknown> = {};
  const form = rng.weighted([
    [5, 'preferred'],
    [3, 'unified'],
    [1, 'legacy'],
  ] as const);
  if (form === 'preferred') {
    event.event_type = rng.pick(ENTITY_NAMES);
    event.action = rng.pick(ACTIONS);
  } else if (form === 'unified') {
    event.event = `${rng.pick(ENTITY_NAMES)}${rng.pick(['.', ':', '_'])}${rng.pick(ACTIONS)}`;
  } else {
    event.event_type = rng.pick(V1_TYPES);
  }
  event.subject_type = rng.pick(SUBJECT_TYPES);
  event.subject_id = rng.pick(SUBJECT_IDS);
  if (rng.bool(0.6)) event.occurred_at = isoTime(rng);
  if (rng.bool(0.7)) event[rng.bool(0.85) ? 'properties' : 'metadata'] = randomProps(rng);
  if (rng.bool(0.5)) event.external_id = `ev_${rng.int(1, 60)}`;
  return event;
}

function v1Event(rng: Random): Record<string, unknown> {
  const event: Record<string, unknown> = {
    event_type: rng.pick(V1_TYPES),
    subject_type: rng.pick(SUBJECT_TYPES),
    subject_id: rng.pick(SUBJECT_IDS),
    occurred_at: isoTime(rng),
  };
  if (rng.bool(0.5)) event.metadata = randomProps(rng);
  if (rng.bool(0.5)) event.external_id = `v1_${rng.int(1, 60)}`;
  return event;
}

function trafficSource(rng: Random, ctx: FuzzContext): Record<string, unknown> {
  if (rng.bool(0.75)) {
    return {
      provider: 'plausible',
      site_id: rng.bool(0.9) ? 'acme.example' : 'other.example',
      api_key: rng.bool(0.85) ? 'fuzz-plausible-key' : 'wrong-key',
      base_url: ctx.plausibleUrl,
    };
  }
  return {
    provider: 'ga4',
    property_id: String(rng.int(1, 999999)),
    credentials: {
      type: 'service_account',
      client_email: 'fuzz@test-project.iam.gserviceaccount.com',
      private_key: rng.bool(0.5)
        ? '-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n'
        : 'not a key',
    },
    base_url: ctx.closedUrl,
    token_url: ctx.closedUrl,
  };
}

function trafficQuery(rng: Random): Array<[string, string]> {
  const query: Array<[string, string]> = [];
  if (rng.bool(0.5)) query.push(['from', day(rng, 120)]);
  if (rng.bool(0.5)) query.push(['to', day(rng, 30)]);
  if (rng.bool(0.4)) {
    const dims = DIMENSIONS.filter(() => rng.bool(0.5));
    query.push(['group_by', (dims.length > 0 ? dims : ['source']).join(',')]);
  }
  if (rng.bool(0.2))
    query.push([
      rng.pick(['source', 'medium', 'campaign', 'landing_page']),
      encodeURIComponent(rng.pick(['google', '(direct)', 'organic', '/pricing', 'spring sale'])),
    ]);
  if (rng.bool(0.3)) query.push(['sort', `${rng.bool() ? '-' : ''}${rng.pick([...METRICS, 'source', 'date'])}`]);
  if (rng.bool(0.3)) query.push(['limit', String(rng.int(1, 1000))]);
  if (rng.bool(0.05))
    query.push([
      'cursor',
      rng.string(rng.int(4, 40), 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'),
    ]);
  return query;
}

const SEGMENT_TYPES = ['track', 'identify', 'alias', 'page', 'screen', 'group'];

/** A Segment message of `type` (the tracking API's shape: messageId, userId/anonymousId, context). */
function segmentMessage(rng: Random, type: string): Record<string, unknown> {
  const message: Record<string, unknown> = { type, messageId: `msg-${rng.int(1, 80)}` };
  if (rng.bool(0.7)) message.userId = rng.pick(USER_IDS);
  if (rng.bool(0.6) || message.userId === undefined) message.anonymousId = `anon-${rng.int(1, 9)}`;
  if (rng.bool(0.6)) message.timestamp = isoTime(rng);
  if (type === 'track')
    message.event = rng.pick(['Order Completed', 'Step 2', '2fa enabled', 'signedUp', 'project.created']);
  if (type === 'alias') message.previousId = `anon-${rng.int(1, 9)}`;
  if (type === 'group') message.groupId = `g${rng.int(1, 5)}`;
  if (type === 'page' || type === 'screen') message.name = 'Pricing';
  if (rng.bool(0.5)) message[type === 'identify' || type === 'group' ? 'traits' : 'properties'] = randomProps(rng);
  if (rng.bool(0.4)) message.context = { library: { name: 'analytics-node', version: '3.1.0' }, ip: '127.0.0.1' };
  return message;
}

function segmentBody(rng: Random, path: string): Record<string, unknown> {
  const last = path.split('/').pop() ?? '';
  if (last === 'batch' || last === 'import' || last === 'b') {
    return {
      batch: Array.from({ length: rng.int(1, 8) }, () => segmentMessage(rng, rng.pick(SEGMENT_TYPES))),
      ...(rng.bool(0.3) ? { sentAt: isoTime(rng) } : {}),
    };
  }
  const type = SEGMENT_TYPES.find((t) => t === last || t[0] === last) ?? rng.pick(SEGMENT_TYPES);
  return segmentMessage(rng, type);
}

interface ValidRequest {
  body?: unknown;
  query?: Array<[string, string]>;
}

/** A valid body and query for each route the generator knows; other routes get a small JSON object. */
function validRequest(rng: Random, ctx: FuzzContext, route: RouteInfo): ValidRequest {
  const key = `${route.method} ${route.path}`;
  switch (key) {
    case 'POST /api/v1/events':
      return { body: v1Event(rng) };
    case 'POST /api/v2/events':
      return { body: v2Event(rng) };
    case 'POST /api/v2/events/batch': {
      const size = rng.weighted([
        [80, rng.int(1, 5)],
        [15, rng.int(6, 60)],
        [3, ctx.maxBatchEvents],
        [2, ctx.maxBatchEvents + 1],
      ] as const);
      return { body: { events: Array.from({ length: size }, () => v2Event(rng)) } };
    }
    case 'POST /api/v2/identify': {
      const body: Record<string, unknown> = { external_id: rng.pick(USER_IDS) };
      if (rng.bool(0.6)) {
        const n = rng.int(1, 8);
        body.identifiers = rng.pick([
          { email: `u${n}@example.com` },
          { stripe_customer: `cus_${n}` },
          { email: `U${n}@Example.com `, stripe_customer: null },
        ]);
      }
      if (rng.bool(0.6)) body.traits = randomProps(rng);
      return { body };
    }
    case 'POST /api/v2/alias':
      return { body: { from_external_id: rng.pick(USER_IDS), to_external_id: rng.pick(USER_IDS) } };
    case 'GET /api/v2/traffic_reports':
      return { query: trafficQuery(rng) };
    case 'POST /admin/v1/products':
      return { body: { name: `Fuzz ${rng.string(6)}` } };
    case 'POST /admin/v1/products/:product_id/keys': {
      const body: Record<string, unknown> = { kind: rng.pick(['events', 'reports']) };
      if (rng.bool(0.4)) body.name = rng.bool(0.8) ? `fuzz ${rng.string(4)}` : null;
      if (rng.bool(0.3)) body.expires_at = rng.bool(0.8) ? '2099-01-01T00:00:00Z' : null;
      return { body };
    }
    case 'PUT /admin/v1/products/:product_id/traffic_source':
      return { body: trafficSource(rng, ctx) };
    case 'POST /admin/v1/products/:product_id/traffic_source/sync': {
      const body = rng.weighted<unknown>([
        [3, undefined],
        [3, {}],
        [2, { from: day(rng, 20), to: day(rng, 5) }],
        [1, { from: day(rng, 5) }],
      ]);
      return body === undefined ? {} : { body };
    }
    case 'GET /admin/v1/products/:product_id/traffic_source/runs':
      return { query: rng.bool(0.5) ? [['limit', String(rng.int(1, 1000))]] : [] };
    case 'GET /admin/v1/products/:product_id/users/:external_id':
      return { query: rng.bool(0.5) ? [['events_limit', String(rng.int(0, 200))]] : [] };
    default:
      if (route.auth === 'segment' && route.method === 'POST') return { body: segmentBody(rng, route.path) };
      if (route.method === 'POST' || route.method === 'PUT' || route.method === 'PATCH')
        return { body: randomProps(rng) };
      return {};
  }
}

function paramValue(rng: Random, ctx: FuzzContext, name: string): string {
  switch (name) {
    case 'product_id':
      return rng.weighted([
        [8, ctx.productId],
        [1, ctx.otherProductId],
        [1, 'prd_doesnotexist'],
      ]);
    case 'external_id':
      return encodeURIComponent(rng.pick([...USER_IDS, 'nobody']));
    case 'key_id':
      return rng.bool(0.7) ? rng.pick(ctx.spareKeyIds) : `key_${rng.string(12)}`;
    case 'key':
      return rng.weighted([
        [8, ctx.keys.events],
        [1, ctx.keys.revoked],
        [1, ctx.keys.reports],
      ]);
    case '*':
      return rng.pick([
        'swagger-ui.css',
        'index.css',
        'swagger-ui-bundle.js',
        'favicon-32x32.png',
        'nope.txt',
        'static/nope',
      ]);
    default:
      return rng.string(6);
  }
}

function fillPath(rng: Random, ctx: FuzzContext, template: string, override?: { name: string; value: string }): string {
  return template
    .split('/')
    .map((segment) => {
      const name = segment === '*' ? '*' : segment.startsWith(':') ? segment.slice(1) : undefined;
      if (name === undefined) return segment;
      return override !== undefined && override.name === name ? override.value : paramValue(rng, ctx, name);
    })
    .join('/');
}

// ---------------------------------------------------------------------------------------------
// The plan: a request under construction

type Framing =
  | 'exact'
  | 'none'
  | 'chunked'
  | 'chunked-bad-size'
  | 'chunked-unterminated'
  | 'cl-short'
  | 'cl-long'
  | 'cl-bogus'
  | 'cl-duplicate'
  | 'cl-and-chunked'
  | 'truncated'
  | 'expect-continue';

type Encoding =
  | 'none'
  | 'gzip'
  | 'gzip-upper'
  | 'gzip-not-gzip'
  | 'gzip-truncated'
  | 'gzip-trailing-garbage'
  | 'gzip-bomb'
  | 'gzip-twice'
  | 'identity'
  | 'other';

interface Plan {
  route: RouteInfo | undefined;
  method: string;
  path: string;
  /** Already encoded name/value pairs; a value of undefined means "name" without "=". */
  query: Array<[string, string | undefined]>;
  version: string;
  headers: Array<[string, string]>;
  body: JsonNode | undefined;
  /** Replaces the serialised body (body-level mutations). */
  bodyBytes: Buffer | undefined;
  encoding: Encoding;
  encodingHeader: string | undefined;
  framing: Framing;
  after: After;
  /** Cleared by mutations that break HTTP syntax (the server may then close without answering). */
  wellFormed: boolean;
  mutations: string[];
  /** The request line as sent, when a mutation wrote it by hand. */
  requestLine: string | undefined;
}

function setHeader(plan: Plan, name: string, value: string | undefined): void {
  plan.headers = plan.headers.filter(([n]) => n.toLowerCase() !== name.toLowerCase());
  if (value !== undefined) plan.headers.push([name, value]);
}

function authHeader(ctx: FuzzContext, auth: RouteAuth): string | undefined {
  switch (auth) {
    case 'events':
      return `Bearer ${ctx.keys.events}`;
    case 'reports':
      return `Bearer ${ctx.keys.reports}`;
    case 'admin':
      return `Bearer ${ctx.adminToken}`;
    case 'segment':
      return `Basic ${Buffer.from(`${ctx.keys.events}:`).toString('base64')}`;
    default:
      return undefined;
  }
}

const UNKNOWN_PATHS = [
  '/',
  '/api',
  '/api/v2',
  '/api/v3/events',
  '/api/v2/event',
  '/api/v2/events/batch/extra',
  '/admin',
  '/admin/v1',
  '/admin/v1/products/x/y/z',
  '/admin/v1/keys',
  '/favicon.ico',
  '/robots.txt',
  '/.env',
  '/.git/config',
  '/docs/static/../../package.json',
  '/docs/static/%2e%2e/%2e%2e/package.json',
  '/docs/%2e%2e%2fpackage.json',
  '/%2e%2e/%2e%2e/etc/passwd',
  '/healthz/x',
  '/api/v2/events;x=1',
  '/API/V2/EVENTS',
];

function basePlan(rng: Random, ctx: FuzzContext, route: RouteInfo | undefined): Plan {
  const valid: ValidRequest =
    route === undefined ? (rng.bool(0.5) ? { body: randomProps(rng) } : {}) : validRequest(rng, ctx, route);
  const method = route?.method ?? rng.pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
  const path =
    route === undefined
      ? rng.bool(0.7)
        ? rng.pick(UNKNOWN_PATHS)
        : '/' + Array.from({ length: rng.int(1, 4) }, () => rng.string(rng.int(1, 10))).join('/')
      : fillPath(rng, ctx, route.path);
  const headers: Array<[string, string]> = [['Host', '127.0.0.1']];
  const auth = authHeader(ctx, route?.auth ?? rng.pick(['events', 'reports', 'admin', 'segment', 'none'] as const));
  if (auth !== undefined) headers.push(['Authorization', auth]);
  if (valid.body !== undefined) headers.push(['Content-Type', 'application/json']);
  if (rng.bool(0.1)) headers.push(['User-Agent', 'inlet-fuzz/1']);
  return {
    route,
    method,
    path,
    query: (valid.query ?? []).map(([k, v]) => [k, v]),
    version: 'HTTP/1.1',
    headers,
    body: valid.body === undefined ? undefined : toTree(valid.body),
    bodyBytes: undefined,
    encoding: 'none',
    encodingHeader: undefined,
    framing: 'exact',
    after: { kind: 'read' },
    wellFormed: true,
    mutations: [],
    requestLine: undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// Mutations. Each records what it did in plan.mutations.

const BIG_STRING_LENGTHS = [255, 256, 1025, 32 * 1024 + 1, 200_000];

/** A value of the wrong type, or at an edge, for any field. */
function hostileValue(rng: Random, ctx: FuzzContext): { value: JsonNode; label: string } {
  const choice = rng.int(0, 33);
  switch (choice) {
    case 0:
      return { value: null, label: 'null' };
    case 1:
      return { value: true, label: 'true' };
    case 2:
      return { value: 0, label: '0' };
    case 3:
      return { value: -1, label: '-1' };
    case 4:
      return { value: 1.5, label: '1.5' };
    case 5:
      return { value: new RawJson('1e400'), label: '1e400' };
    case 6:
      return { value: new RawJson('-1e400'), label: '-1e400' };
    case 7:
      return { value: new RawJson('123456789012345678901234567890'), label: 'huge integer' };
    case 8:
      return { value: new RawJson('-0'), label: '-0' };
    case 9:
      return { value: new RawJson('1e-400'), label: '1e-400' };
    case 10:
      return { value: '', label: 'empty string' };
    case 11:
      return { value: '   ', label: 'blank string' };
    case 12: {
      const length = rng.pick(BIG_STRING_LENGTHS);
      return { value: 'x'.repeat(length), label: `string of ${length}` };
    }
    case 13:
      return { value: `a\u0000b`, label: 'NUL in string' };
    case 14:
      return { value: '\u0000', label: 'lone NUL' };
    case 15:
      return { value: `x\ud800y`, label: 'lone high surrogate' };
    case 16:
      return { value: '\udfff', label: 'lone low surrogate' };
    case 17:
      return { value: '\udc00\ud800', label: 'reversed surrogate pair' };
    case 18:
      return { value: 'é🎉\u202e\u200b', label: 'unicode' };
    case 19:
      return { value: [], label: '[]' };
    case 20:
      return { value: [1, 'a', null], label: 'array' };
    case 21:
      return { value: new JsonObject(), label: '{}' };
    case 22:
      return { value: new JsonObject([['a', 1]]), label: 'object' };
    case 23: {
      const depth = rng.pick([65, 1000, 20_000]);
      const kind = rng.pick(['object', 'array'] as const);
      return { value: deepNesting(depth, kind), label: `${kind} nested ${depth} deep` };
    }
    case 24:
      return { value: '123', label: 'numeric string' };
    case 25:
      return { value: '2026-02-30T25:61:00Z', label: 'impossible date' };
    case 26:
      return { value: new RawJson('"\\u0000"'), label: 'escaped NUL' };
    case 27:
      return { value: new RawJson('"\\ud800"'), label: 'escaped lone surrogate' };
    case 28:
      return { value: new RawJson('1.7976931348623157e309'), label: 'just over MAX_VALUE' };
    case 29:
      return { value: new RawJson('9007199254740993'), label: '2^53+1' };
    case 30:
      return { value: "'; DROP TABLE events; --", label: 'SQL text' };
    case 31:
      return { value: new JsonObject([['__proto__', new JsonObject([['polluted', true]])]]), label: '{"__proto__":…}' };
    case 32:
      return { value: 'x'.repeat(ctx.maxEventBytes), label: 'string of the event limit' };
    default:
      return { value: `${'ab'.repeat(3)}\n\t\r"\\`, label: 'control characters' };
  }
}

function hostileKey(rng: Random): { key: string; label: string } {
  return rng.pick([
    { key: '__proto__', label: '"__proto__" key' },
    { key: 'constructor', label: '"constructor" key' },
    { key: 'prototype', label: '"prototype" key' },
    { key: '', label: 'empty key' },
    { key: 'a\u0000b', label: 'NUL in key' },
    { key: 'k\ud800', label: 'lone surrogate in key' },
    { key: 'k'.repeat(10_000), label: 'key of 10000' },
    { key: 'zzz_unknown', label: 'unknown key' },
    { key: 'toString', label: '"toString" key' },
    { key: 'hasOwnProperty', label: '"hasOwnProperty" key' },
  ]);
}

function mutateBodyField(rng: Random, plan: Plan, ctx: FuzzContext): void {
  if (plan.body === undefined) {
    plan.body = toTree(randomProps(rng));
    setHeader(plan, 'Content-Type', 'application/json');
    plan.mutations.push('body added');
    return;
  }
  const slots = slotsOf(plan.body);
  // Never remove or rewrite where a traffic source may fetch from: those stay on loopback.
  const editable = slots.filter((slot) => !['base_url', 'token_url'].includes(keyOf(slot) ?? ''));
  const action = rng.weighted([
    [editable.length > 0 ? 5 : 0, 'replace'],
    [editable.length > 0 ? 2 : 0, 'remove'],
    [2, 'add-key'],
    [1, 'duplicate-key'],
    [plan.body instanceof JsonObject ? 0 : 1, 'root'],
  ] as const);
  if (action === 'replace') {
    const slot = rng.pick(editable);
    const hostile = hostileValue(rng, ctx);
    replaceAt(slot, hostile.value);
    plan.mutations.push(`${slot.pointer} = ${hostile.label}`);
  } else if (action === 'remove') {
    const slot = rng.pick(editable);
    removeAt(slot);
    plan.mutations.push(`${slot.pointer} removed`);
  } else if (action === 'add-key' || action === 'duplicate-key') {
    const objects = [plan.body, ...slots.map((s) => s.node)].filter((n): n is JsonObject => n instanceof JsonObject);
    if (objects.length === 0) return;
    const target = rng.pick(objects);
    if (action === 'duplicate-key' && target.entries.length > 0) {
      const [key] = rng.pick(target.entries);
      const hostile = hostileValue(rng, ctx);
      target.entries.push([key, hostile.value]);
      plan.mutations.push(`duplicate key "${key}" = ${hostile.label}`);
    } else {
      const { key, label } = hostileKey(rng);
      const value =
        key === 'constructor'
          ? new JsonObject([['prototype', new JsonObject([['polluted', true]])]])
          : hostileValue(rng, ctx).value;
      target.entries.splice(rng.int(0, target.entries.length), 0, [key, value]);
      plan.mutations.push(`added ${label}`);
    }
  } else {
    const hostile = hostileValue(rng, ctx);
    plan.body = hostile.value;
    plan.mutations.push(`body = ${hostile.label}`);
  }
}

/** The whole body replaced or broken as bytes (not JSON, truncated, other encodings of text). */
function mutateBodyBytes(rng: Random, plan: Plan, ctx: FuzzContext): void {
  const text = Buffer.from(plan.body === undefined ? '{"a":1}' : serialize(plan.body), 'utf8');
  const choice = rng.int(0, 21);
  const set = (bytes: Buffer, label: string) => {
    plan.bodyBytes = bytes;
    plan.mutations.push(`body bytes: ${label}`);
  };
  switch (choice) {
    case 0:
      return set(text.subarray(0, rng.int(0, Math.max(0, text.length - 1))), 'truncated JSON');
    case 1:
      return set(Buffer.alloc(0), 'empty');
    case 2:
      return set(
        Buffer.from(rng.pick(['null', 'true', '[]', '"x"', '123', '{}', '[{}]', '-'])),
        'JSON scalar or empty container',
      );
    case 3: {
      const depth = rng.pick([1000, 10_000, 100_000]);
      return set(Buffer.from(deepNesting(depth, rng.pick(['object', 'array'] as const)).text), `nested ${depth} deep`);
    }
    case 4:
      return set(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), text]), 'UTF-8 BOM first');
    case 5:
      return set(
        Buffer.concat([text, Buffer.from(rng.pick(['}', 'x', '{"a":1}', '\n\n', '\u0000']))]),
        'trailing bytes',
      );
    case 6:
      return set(Buffer.from(`/* c */${text.toString()}`), 'comment');
    case 7:
      return set(
        Buffer.from(rng.pick(['{"a":NaN}', '{"a":Infinity}', "{'a':1}", '{a:1}', '{"a":1,}', '[1,]', '{"a" 1}'])),
        'JSON5-isms',
      );
    case 8:
      return set(Buffer.from('{"subject_id":"a\u0000b","x":"\u0001"}'), 'raw control characters in strings');
    case 9:
      return set(
        Buffer.concat([Buffer.from('{"subject_id":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}')]),
        'invalid UTF-8',
      );
    case 10:
      return set(
        Buffer.concat([Buffer.from('{"subject_id":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]),
        'surrogate encoded as UTF-8',
      );
    case 11:
      return set(Buffer.from(text.toString(), 'utf16le'), 'UTF-16LE');
    case 12:
      return set(rng.bytes(rng.int(1, 2000)), 'random bytes');
    case 13:
      return set(Buffer.from('a=1&b=2&subject_id=u1'), 'form body');
    case 14:
      return set(
        Buffer.from('--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xyz--\r\n'),
        'multipart body',
      );
    case 15: {
      const size = ctx.maxBodyBytes + rng.int(1, 1024);
      return set(
        Buffer.concat([Buffer.from('{"events":["'), Buffer.alloc(size, 'x'), Buffer.from('"]}')]),
        `${size} bytes (over the body limit)`,
      );
    }
    case 16:
      return set(Buffer.from(`{"events":[${'1,'.repeat(rng.pick([1000, 50_000]))}1]}`), 'many numbers');
    case 17:
      return set(Buffer.from(`{${Array.from({ length: 5000 }, (_, i) => `"k${i}":${i}`).join(',')}}`), '5000 keys');
    case 18:
      return set(Buffer.from(`{"a":"${'\\u0000'.repeat(1000)}"}`), 'many escaped NULs');
    case 19:
      return set(
        Buffer.from(`{"__proto__":{"isAdmin":true},"constructor":{"prototype":{"x":1}}}`),
        '__proto__ and constructor.prototype',
      );
    case 20:
      return set(Buffer.from(`{"a":${'9'.repeat(5000)}}`), 'number of 5000 digits');
    default:
      return set(Buffer.from(`${text.toString()}${text.toString()}`), 'two JSON documents');
  }
}

const CONTENT_TYPES = [
  'application/json; charset=utf-8',
  'application/json;charset=UTF-8',
  'application/json; charset="utf-8"',
  'application/json; charset=latin1',
  'application/json; charset=utf-16le',
  'application/json; charset=',
  'APPLICATION/JSON',
  'Application/Json ; Charset = UTF-8',
  'application/json;',
  'application/json; foo=bar',
  'application/jsonx',
  'application/vnd.api+json',
  'application/problem+json',
  'text/json',
  'text/plain',
  'text/plain; charset=utf-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=xyz',
  'multipart/form-data',
  'application/octet-stream',
  '*/*',
  '',
  ' ',
  ';',
  'application/',
  '/json',
  'json',
  'a'.repeat(5000),
];

function mutateContentType(rng: Random, plan: Plan): void {
  const choice = rng.int(0, CONTENT_TYPES.length + 3);
  if (choice < CONTENT_TYPES.length) {
    setHeader(plan, 'Content-Type', CONTENT_TYPES[choice]);
    plan.mutations.push(`Content-Type: ${JSON.stringify(CONTENT_TYPES[choice]!.slice(0, 60))}`);
  } else if (choice === CONTENT_TYPES.length) {
    setHeader(plan, 'Content-Type', undefined);
    plan.mutations.push('no Content-Type');
  } else if (choice === CONTENT_TYPES.length + 1) {
    plan.headers.push(['Content-Type', 'text/plain']);
    plan.mutations.push('two Content-Type headers');
  } else {
    const value = Buffer.from(rng.bytes(rng.int(1, 40)).map((b) => (b < 0x20 || b === 0x7f ? 0x41 : b))).toString(
      'latin1',
    );
    setHeader(plan, 'Content-Type', value);
    plan.mutations.push('Content-Type of random bytes');
    plan.wellFormed = false;
  }
}

function mutateEncoding(rng: Random, plan: Plan): void {
  const encoding = rng.weighted<Encoding>([
    [5, 'gzip'],
    [1, 'gzip-upper'],
    [4, 'gzip-not-gzip'],
    [3, 'gzip-truncated'],
    [2, 'gzip-trailing-garbage'],
    [1, 'gzip-bomb'],
    [1, 'gzip-twice'],
    [2, 'identity'],
    [4, 'other'],
  ]);
  plan.encoding = encoding;
  if (encoding === 'other') {
    plan.encodingHeader = rng.pick([
      'deflate',
      'br',
      'compress',
      'zstd',
      'x-unknown',
      '',
      'gzip;q=1',
      'identity, gzip',
      'gzip, identity',
      'GZIP ',
      'x'.repeat(300),
    ]);
  }
  plan.mutations.push(
    `encoding ${encoding}${plan.encodingHeader === undefined ? '' : ` (${JSON.stringify(plan.encodingHeader.slice(0, 40))})`}`,
  );
}

function mutateAuth(rng: Random, plan: Plan, ctx: FuzzContext): void {
  const options: Array<[string, string | undefined]> = [
    ['missing', undefined],
    ['scheme only', 'Bearer'],
    ['empty token', 'Bearer '],
    ['lower-case scheme', `bearer ${ctx.keys.events}`],
    ['double space', `Bearer  ${ctx.keys.events}`],
    ['Basic', 'Basic dXNlcjpwYXNzd29yZA=='],
    ['Basic with the events key', `Basic ${Buffer.from(`${ctx.keys.events}:`).toString('base64')}`],
    ['Basic with the reports key', `Basic ${Buffer.from(ctx.keys.reports).toString('base64')}`],
    ['Basic with the revoked key', `Basic ${Buffer.from(`${ctx.keys.revoked}:`).toString('base64')}`],
    ['Basic, not base64', 'Basic ***'],
    ['no scheme', ctx.keys.events],
    ['trailing word', `Bearer ${ctx.keys.events} extra`],
    ['events key', `Bearer ${ctx.keys.events}`],
    ['reports key', `Bearer ${ctx.keys.reports}`],
    ['admin token', `Bearer ${ctx.adminToken}`],
    ['revoked key', `Bearer ${ctx.keys.revoked}`],
    ['expired key', `Bearer ${ctx.keys.expired}`],
    ["other product's events key", `Bearer ${ctx.keys.otherEvents}`],
    ["other product's reports key", `Bearer ${ctx.keys.otherReports}`],
    ['unknown events-looking key', `Bearer inlet_ev_${'a'.repeat(40)}`],
    ['key prefix only', 'Bearer inlet_ev_'],
    ['key of 8000', `Bearer inlet_ev_${'x'.repeat(8000)}`],
    ['key of 40000 (over the header limit)', `Bearer ${'x'.repeat(40_000)}`],
    ['non-ASCII token', 'Bearer \u00e9\u00e8\u00ff'],
    ['tab separated', `Bearer\t${ctx.keys.events}`],
    ['admin token with a suffix', `Bearer ${ctx.adminToken}x`],
  ];
  const choice = rng.int(0, options.length);
  if (choice === options.length) {
    plan.headers.push(['Authorization', `Bearer ${ctx.keys.reports}`]);
    plan.mutations.push('two Authorization headers');
    return;
  }
  const [label, value] = options[choice]!;
  setHeader(plan, 'Authorization', value);
  plan.mutations.push(`auth: ${label}`);
}

function mutateFraming(rng: Random, plan: Plan): void {
  plan.framing = rng.weighted<Framing>([
    [3, 'chunked'],
    [2, 'chunked-bad-size'],
    [2, 'chunked-unterminated'],
    [4, 'cl-short'],
    [4, 'cl-long'],
    [2, 'cl-bogus'],
    [1, 'cl-duplicate'],
    [1, 'cl-and-chunked'],
    [2, 'none'],
    [3, 'truncated'],
    [2, 'expect-continue'],
  ]);
  plan.mutations.push(`framing ${plan.framing}`);
}

function mutateOtherHeader(rng: Random, plan: Plan): void {
  const choice = rng.int(0, 17);
  const label = (text: string): void => {
    plan.mutations.push(text);
  };
  switch (choice) {
    case 0:
      // HTTP/1.1 requires Host: Inlet answers 400 problem+json naming the header (not Node's bare 400).
      setHeader(plan, 'Host', undefined);
      return label('no Host');
    case 1:
      setHeader(plan, 'Host', 'h'.repeat(3000));
      return label('long Host');
    case 2:
      plan.headers.push(['Host', 'evil.example']);
      plan.wellFormed = false;
      return label('two Host headers');
    case 3:
      setHeader(
        plan,
        'X-Request-Id',
        rng.pick(['fuzz-req-1', 'r'.repeat(129), 'has space', 'ünïcode', '', '../../x', 'a'.repeat(128)]),
      );
      return label('X-Request-Id');
    case 4:
      plan.headers.push(['X-Request-Id', 'one'], ['X-Request-Id', 'two']);
      return label('two X-Request-Id headers');
    case 5:
      setHeader(
        plan,
        'Accept',
        rng.pick(['text/html', '*/*', 'application/xml', 'application/problem+json', ';;;', 'x'.repeat(2000)]),
      );
      return label('Accept');
    case 6:
      setHeader(plan, 'Connection', rng.pick(['close', 'keep-alive', 'Keep-Alive, close', 'garbage']));
      return label('Connection');
    case 7:
      setHeader(plan, 'Connection', 'Upgrade');
      setHeader(plan, 'Upgrade', rng.pick(['websocket', 'h2c', 'x']));
      plan.wellFormed = false;
      return label('Upgrade');
    case 8:
      for (let i = 0; i < rng.pick([50, 500]); i++) plan.headers.push([`X-Fuzz-${i}`, rng.string(8)]);
      return label('many headers');
    case 9:
      plan.headers.push(['X-Big', 'b'.repeat(rng.pick([8000, 20_000]))]);
      return label('big header');
    case 10:
      plan.headers.push([rng.pick(['X Bad', 'X\u0000Bad', ':x', 'X(', 'X"y', '']), '1']);
      plan.wellFormed = false;
      return label('invalid header name');
    case 11:
      plan.headers.push(['X-Ctl', rng.pick(['a\u0000b', 'a\rb', 'a\u0001b', 'a\u007fb'])]);
      plan.wellFormed = false;
      return label('control character in a header value');
    case 12:
      plan.headers.push(['X-Folded', 'a\r\n b']);
      plan.wellFormed = false;
      return label('obs-fold header');
    case 13:
      plan.headers.push(['X-Latin', '\u00e9\u00ff\u00a0']);
      plan.wellFormed = false;
      return label('obs-text in a header value');
    case 14:
      setHeader(plan, 'Transfer-Encoding', rng.pick(['gzip', 'chunked, gzip', 'identity', 'x']));
      plan.wellFormed = false;
      return label('Transfer-Encoding other than chunked');
    case 15:
      setHeader(plan, 'Origin', rng.pick(['https://example.com', 'null', 'http://127.0.0.1']));
      return label('Origin');
    case 16:
      setHeader(plan, 'X-Forwarded-For', rng.pick(['1.2.3.4', '::1, 10.0.0.1', 'garbage', 'x'.repeat(1000)]));
      return label('X-Forwarded-For');
    default:
      setHeader(plan, 'Cookie', `session=${rng.string(20)}; a=${'c'.repeat(rng.int(1, 3000))}`);
      return label('Cookie');
  }
}

const QUERY_VALUES: Array<[string, string]> = [
  ['%00', 'NUL'],
  ['a%00b', 'NUL inside'],
  ['%ED%A0%80', 'lone surrogate (UTF-8 encoded)'],
  ['%F0%9F%8E%89', 'emoji'],
  ['%C0%AF', 'overlong UTF-8'],
  ['%FF', 'invalid UTF-8'],
  ['%zz', 'malformed percent'],
  ['%', 'bare percent'],
  ['', 'empty'],
  ['+', 'plus'],
  ['%2C%2C%2C', 'commas'],
  ['-1', '-1'],
  ['0', '0'],
  ['1e3', '1e3'],
  ['0x10', '0x10'],
  ['99999999999999999999', 'huge number'],
  ['2026-02-30', 'impossible date'],
  ['9999-12-31', 'far date'],
  ['-', 'minus'],
  ['%27%3B%20DROP%20TABLE%20traffic%3B--', 'SQL text'],
  ['true', 'true'],
];

function mutateQuery(rng: Random, plan: Plan): void {
  const names = [
    ...new Set([
      ...plan.query.map(([n]) => n),
      'source',
      'limit',
      'from',
      'to',
      'group_by',
      'sort',
      'cursor',
      'events_limit',
    ]),
  ];
  const name = rng.pick(names);
  const choice = rng.int(0, 11);
  const replace = (value: string | undefined) => {
    plan.query = plan.query.filter(([n]) => n !== name);
    plan.query.push([name, value]);
  };
  if (choice <= 4) {
    const [value, label] = rng.pick(QUERY_VALUES);
    replace(value);
    plan.mutations.push(`query ${name}=${label}`);
  } else if (choice === 5) {
    const length = rng.pick([2000, 7000, 20_000]);
    replace('q'.repeat(length));
    plan.mutations.push(`query ${name} of ${length}`);
  } else if (choice === 6) {
    plan.query.push([name, 'a'], [name, 'b']);
    plan.mutations.push(`query ${name} repeated`);
  } else if (choice === 7) {
    plan.query.push([rng.pick([`${name}[]`, `${name}[0]`, `${name}[a]`, `${name}.x`]), 'a']);
    plan.mutations.push(`query ${name} array-style`);
  } else if (choice === 8) {
    plan.query.push(
      rng.pick<[string, string | undefined]>([
        ['__proto__', 'x'],
        ['__proto__[polluted]', '1'],
        ['constructor[prototype][x]', '1'],
        ['toString', '1'],
        ['hasOwnProperty', 'x'],
        ['', 'x'],
        ['%00', 'x'],
        ['unknown_param', '1'],
        [name, undefined],
      ]),
    );
    plan.mutations.push('query odd name');
  } else if (choice === 9) {
    plan.query.push(...Array.from({ length: rng.pick([100, 1000]) }, (_, i): [string, string] => [`p${i}`, String(i)]));
    plan.mutations.push('many query parameters');
  } else if (choice === 10) {
    replace(undefined);
    plan.mutations.push(`query ${name} without a value`);
  } else {
    plan.query.push(['x', '%00%ED%A0%80%zz']);
    plan.mutations.push('query mixed garbage');
  }
}

const PARAM_VALUES: Array<[string, string]> = [
  ['', 'empty'],
  ['%00', 'NUL'],
  ['a%00b', 'NUL inside'],
  ['%zz', 'malformed percent'],
  ['%', 'bare percent'],
  ['%ED%A0%80', 'lone surrogate'],
  ['%FF%FE', 'invalid UTF-8'],
  ['..', 'dot dot'],
  ['%2e%2e', 'encoded dot dot'],
  ['a%2Fb', 'encoded slash'],
  ['__proto__', '__proto__'],
  ['constructor', 'constructor'],
  ['%27%3B%20DROP%20TABLE%20products%3B--', 'SQL text'],
  ['x'.repeat(65), '65 characters'],
  ['x'.repeat(300), '300 characters'],
  ['%E2%82%AC%F0%9F%8E%89', 'unicode'],
  ['%20', 'space'],
];

function mutateParam(rng: Random, plan: Plan, ctx: FuzzContext): void {
  const template = plan.route?.path;
  const names =
    template === undefined ? [] : [...template.matchAll(/(?:^|\/)(?::([^/]+)|(\*))/g)].map((m) => m[1] ?? '*');
  if (template === undefined || names.length === 0) {
    mutatePath(rng, plan);
    return;
  }
  const name = rng.pick(names);
  const [value, label] = rng.pick(PARAM_VALUES);
  plan.path = fillPath(rng, ctx, template, { name, value });
  plan.mutations.push(`path parameter ${name} = ${label}`);
}

function mutatePath(rng: Random, plan: Plan): void {
  const choice = rng.int(0, 15);
  const p = plan.path;
  const edits: Array<[string, string]> = [
    [`${p}%zz`, 'malformed percent at the end'],
    [`${p}/%`, 'bare percent segment'],
    [`${p}%00`, 'NUL at the end'],
    [`${p}/`, 'trailing slash'],
    [`/${p}`, 'double slash first'],
    [p.replace(/\//g, '//'), 'double slashes'],
    [`${p}/../${p.split('/').pop() ?? ''}`, 'dot-dot segment'],
    [`${p}/./`, 'dot segment'],
    [p.toUpperCase(), 'upper case'],
    [`${p}/${'s'.repeat(3000)}`, 'long segment'],
    [`${p}${'/x'.repeat(1000)}`, '1000 segments'],
    [`/${'p'.repeat(rng.pick([9000, 70_000]))}`, 'very long path'],
    [p.replace(/\//g, '%2F'), 'all slashes encoded'],
    [`${p};x=1`, 'matrix parameter'],
    [`http://127.0.0.1${p}`, 'absolute-form target'],
    [`${p}%ED%A0%80`, 'encoded lone surrogate'],
  ];
  const [path, label] = edits[choice]!;
  plan.path = path;
  plan.mutations.push(`path: ${label}`);
}

const KNOWN_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE', 'PROPFIND', 'SEARCH'];

function mutateMethod(rng: Random, plan: Plan): void {
  const method = rng.pick([...KNOWN_METHODS, 'CONNECT', 'post', 'P0ST', 'GETT', 'x'.repeat(100), 'QUERY', 'M-SEARCH']);
  plan.method = method;
  if (!KNOWN_METHODS.includes(method)) plan.wellFormed = false;
  plan.mutations.push(`method ${method.slice(0, 20)}`);
}

function mutateRequestLine(rng: Random, plan: Plan): void {
  const choice = rng.int(0, 8);
  switch (choice) {
    case 0:
      plan.version = 'HTTP/1.0';
      plan.mutations.push('HTTP/1.0');
      return;
    case 1:
      plan.version = rng.pick(['HTTP/2.0', 'HTTP/1.2', 'HTTP/9.9', 'http/1.1', 'HTTP/1', 'HTTP/1.1 x']);
      plan.wellFormed = false;
      plan.mutations.push(`version ${plan.version}`);
      return;
    case 2:
      plan.requestLine = `${plan.method} ${plan.path}`;
      plan.wellFormed = false;
      plan.mutations.push('request line without version');
      return;
    case 3:
      plan.path = `${plan.path} x`;
      plan.wellFormed = false;
      plan.mutations.push('space in target');
      return;
    case 4:
      plan.path = `${plan.path}\u0000`;
      plan.wellFormed = false;
      plan.mutations.push('raw NUL in target');
      return;
    case 5:
      plan.path = `${plan.path}${Buffer.from('é€', 'utf8').toString('latin1')}`;
      plan.wellFormed = false;
      plan.mutations.push('raw UTF-8 in target');
      return;
    case 6:
      plan.path = rng.pick(['*', 'example.com:443', '']);
      plan.wellFormed = false;
      plan.mutations.push(`target ${JSON.stringify(plan.path)}`);
      return;
    case 7:
      plan.path = `${plan.path}#fragment`;
      plan.mutations.push('fragment in target');
      plan.wellFormed = false;
      return;
    default:
      plan.requestLine = rng.pick(['\r\n', 'GARBAGE', 'GET', '\u0016\u0003\u0001\u0000\u00a5\u0001\u0000\u0000']);
      plan.wellFormed = false;
      plan.mutations.push('garbage request line');
  }
}

// ---------------------------------------------------------------------------------------------
// Assembly: body → encoding → framing → bytes

const bombs = new Map<number, Buffer>();
/** Gzip of `size` zero bytes: a few KB that inflate to far more than any body limit. Cached. */
function gzipBomb(size: number): Buffer {
  let bomb = bombs.get(size);
  if (bomb === undefined) {
    bomb = gzipSync(Buffer.alloc(size, 0x20), { level: 9 });
    bombs.set(size, bomb);
  }
  return bomb;
}

function encodeBody(rng: Random, plan: Plan, body: Buffer): { body: Buffer; header: string | undefined } {
  switch (plan.encoding) {
    case 'none':
      return { body, header: undefined };
    case 'gzip':
      return { body: gzipSync(body), header: 'gzip' };
    case 'gzip-upper':
      return { body: gzipSync(body), header: 'GZIP' };
    case 'gzip-not-gzip':
      return { body, header: 'gzip' };
    case 'gzip-truncated': {
      const zipped = gzipSync(body);
      return { body: zipped.subarray(0, rng.int(0, Math.max(0, zipped.length - 1))), header: 'gzip' };
    }
    case 'gzip-trailing-garbage':
      return { body: Buffer.concat([gzipSync(body), rng.bytes(rng.int(1, 64))]), header: 'gzip' };
    case 'gzip-bomb':
      return { body: gzipBomb(rng.pick([6, 16]) * 1024 * 1024), header: 'gzip' };
    case 'gzip-twice':
      return { body: gzipSync(gzipSync(body)), header: rng.pick(['gzip, gzip', 'gzip']) };
    case 'identity':
      return { body, header: 'identity' };
    default:
      return { body: rng.bool(0.5) ? gzipSync(body) : body, header: plan.encodingHeader };
  }
}

function chunked(rng: Random, body: Buffer): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset < body.length) {
    const size = Math.min(body.length - offset, rng.int(1, 4096));
    parts.push(Buffer.from(`${size.toString(16)}\r\n`), body.subarray(offset, offset + size), Buffer.from('\r\n'));
    offset += size;
  }
  return Buffer.concat(parts);
}

function queryString(query: Array<[string, string | undefined]>): string {
  return query.map(([name, value]) => (value === undefined ? name : `${name}=${value}`)).join('&');
}

function assemble(rng: Random, plan: Plan, seed: number, index: number, mode: FuzzCase['mode']): FuzzCase {
  const rawBody =
    plan.bodyBytes ?? (plan.body === undefined ? Buffer.alloc(0) : Buffer.from(serialize(plan.body), 'utf8'));
  const hasBody = rawBody.length > 0 || plan.bodyBytes !== undefined;
  const encoded =
    hasBody || plan.encoding !== 'none' ? encodeBody(rng, plan, rawBody) : { body: rawBody, header: undefined };
  const body = encoded.body;
  if (encoded.header !== undefined) setHeader(plan, 'Content-Encoding', encoded.header);

  let framedBody = body;
  let after: After = { kind: 'read' };
  let mustAnswer = plan.wellFormed;
  let pipelined = false;
  const sendsBody = body.length > 0 || ['POST', 'PUT', 'PATCH'].includes(plan.method);
  switch (plan.framing) {
    case 'exact':
      if (sendsBody) setHeader(plan, 'Content-Length', String(body.length));
      break;
    case 'none':
      // No length: the body bytes are the start of a next request on this connection.
      pipelined = true;
      break;
    case 'chunked':
      setHeader(plan, 'Transfer-Encoding', 'chunked');
      framedBody = Buffer.concat([
        chunked(rng, body),
        Buffer.from(rng.bool(0.8) ? '0\r\n\r\n' : '0\r\nX-Trailer: 1\r\n\r\n'),
      ]);
      break;
    case 'chunked-bad-size':
      setHeader(plan, 'Transfer-Encoding', 'chunked');
      framedBody = Buffer.concat([
        Buffer.from(`${rng.pick(['zz', '-1', 'fffffffffffffffff', '10;x=\u0000', ''])}\r\n`),
        body,
        Buffer.from('\r\n0\r\n\r\n'),
      ]);
      mustAnswer = false;
      after = { kind: 'half-close' };
      break;
    case 'chunked-unterminated':
      setHeader(plan, 'Transfer-Encoding', 'chunked');
      framedBody = chunked(rng, body);
      mustAnswer = false;
      after = rng.bool(0.5) ? { kind: 'half-close' } : { kind: 'abort', afterMs: rng.int(20, 200) };
      break;
    case 'cl-short': {
      const shortBy = body.length === 0 ? 0 : rng.int(1, Math.min(body.length, 64));
      setHeader(plan, 'Content-Length', String(body.length - shortBy));
      pipelined = shortBy > 0;
      break;
    }
    case 'cl-long':
      setHeader(plan, 'Content-Length', String(body.length + rng.pick([1, 10, 1000, 1_000_000])));
      mustAnswer = false;
      after = rng.bool(0.5) ? { kind: 'half-close' } : { kind: 'abort', afterMs: rng.int(20, 200) };
      break;
    case 'cl-bogus':
      setHeader(
        plan,
        'Content-Length',
        rng.pick(['-1', 'abc', '1e3', ' 10', '0x10', '99999999999999999999', '1,1', '']),
      );
      mustAnswer = false;
      after = { kind: 'half-close' };
      break;
    case 'cl-duplicate':
      setHeader(plan, 'Content-Length', String(body.length));
      plan.headers.push(['Content-Length', String(body.length + 1)]);
      mustAnswer = false;
      after = { kind: 'half-close' };
      break;
    case 'cl-and-chunked':
      setHeader(plan, 'Content-Length', String(body.length));
      setHeader(plan, 'Transfer-Encoding', 'chunked');
      framedBody = Buffer.concat([chunked(rng, body), Buffer.from('0\r\n\r\n')]);
      mustAnswer = false;
      after = { kind: 'half-close' };
      break;
    case 'truncated':
      setHeader(plan, 'Content-Length', String(body.length));
      framedBody = body.subarray(0, body.length === 0 ? 0 : rng.int(0, body.length - 1));
      mustAnswer = body.length === 0 && plan.wellFormed;
      after = body.length === 0 ? { kind: 'read' } : { kind: 'half-close' };
      break;
    case 'expect-continue':
      setHeader(plan, 'Content-Length', String(body.length));
      setHeader(plan, 'Expect', rng.bool(0.8) ? '100-continue' : 'something-else');
      break;
  }
  if (!plan.wellFormed) mustAnswer = false;

  const query = queryString(plan.query);
  const target = query.length > 0 || rng.bool(0.02) ? `${plan.path}?${query}` : plan.path;
  const requestLine = plan.requestLine ?? `${plan.method} ${target} ${plan.version}`;
  const head = `${requestLine}\r\n${plan.headers.map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n`;
  return {
    seed,
    index,
    route: plan.route === undefined ? 'unknown' : `${plan.route.method} ${plan.route.path}`,
    mode,
    mutations: plan.mutations,
    method: plan.method,
    bytes: Buffer.concat([Buffer.from(head, 'latin1'), framedBody]),
    headOnly: plan.method === 'HEAD',
    after,
    mustAnswer,
    pipelined,
    allow502: plan.route?.path === '/admin/v1/products/:product_id/traffic_source/sync',
  };
}

// ---------------------------------------------------------------------------------------------

type Mutator = (rng: Random, plan: Plan, ctx: FuzzContext) => void;

/** Every mutator, in the order chaos applies them (path before query, body before its bytes, …). */
const ORDERED: Array<[string, Mutator]> = [
  ['method', mutateMethod],
  ['param', mutateParam],
  ['path', mutatePath],
  ['query', mutateQuery],
  ['field', mutateBodyField],
  ['bytes', mutateBodyBytes],
  ['content-type', mutateContentType],
  ['encoding', mutateEncoding],
  ['auth', mutateAuth],
  ['header', mutateOtherHeader],
  ['request-line', mutateRequestLine],
  ['framing', mutateFraming],
];

export function generateCase(seed: number, index: number, ctx: FuzzContext): FuzzCase {
  const rng = new Random(seed, index);
  const route = rng.bool(0.06) ? undefined : rng.pick(ctx.routes);
  const plan = basePlan(rng, ctx, route);
  const mode = rng.weighted<FuzzCase['mode']>([
    [12, 'valid'],
    [38, 'field'],
    [25, 'header'],
    [25, 'chaos'],
  ]);
  if (mode === 'valid') {
    if (plan.body !== undefined && rng.bool(0.2)) {
      plan.encoding = 'gzip';
      plan.mutations.push('gzip');
    }
  } else if (mode === 'field') {
    const hasQuery = plan.query.length > 0;
    const hasParam = route?.path.includes(':') === true || route?.path.includes('*') === true;
    const which = rng.weighted<Mutator>([
      [plan.body !== undefined ? 6 : 1, mutateBodyField],
      [plan.body !== undefined ? 2 : 0, mutateBodyBytes],
      [hasQuery ? 4 : 1, mutateQuery],
      [hasParam ? 2 : 0, mutateParam],
    ]);
    which(rng, plan, ctx);
  } else if (mode === 'header') {
    const which = rng.weighted<Mutator>([
      [3, mutateContentType],
      [4, mutateEncoding],
      [4, mutateAuth],
      [4, mutateFraming],
      [3, mutateOtherHeader],
    ]);
    which(rng, plan, ctx);
  } else {
    const count = rng.int(2, 5);
    const chosen = new Set<number>();
    while (chosen.size < count) chosen.add(rng.int(0, ORDERED.length - 1));
    for (const i of [...chosen].sort((a, b) => a - b)) ORDERED[i]![1](rng, plan, ctx);
  }
  return assemble(rng, plan, seed, index, mode);
}

/** A short printable form of a case, for failure reports. */
export function describeCase(c: FuzzCase, maxBytes = 1500): string {
  const shown = c.bytes.subarray(0, maxBytes).toString('latin1');
  const more = c.bytes.length > maxBytes ? ` … (${c.bytes.length} bytes in all)` : '';
  return [
    `case ${c.index} of seed ${c.seed}: ${c.route} [${c.mode}] ${c.mutations.join('; ')}`,
    `  after sending: ${c.after.kind}${c.after.kind === 'abort' ? ` after ${c.after.afterMs} ms` : ''}; must answer: ${c.mustAnswer}`,
    `  request: ${JSON.stringify(shown)}${more}`,
  ].join('\n');
}
