// The webhook receiver of the destinations bench (bench/destinations.ts), a separate process so that its
// CPU is not the load generator's. Every request's signature is verified, the message ids inside are
// counted once each, and the counts are served at GET /counts. The bench sets the signing secret with
// PUT /secret after creating the destination. For each request it also notes how long its first (oldest) message
// took from being received by Inlet to arriving here; GET /ages answers their count, median, p99 and maximum since
// the last GET /ages.
//
// How it verifies (VERIFY):
// - `native` (the default): every request with node:crypto's HMAC-SHA256 over the bytes received, the same
//   checks as the official `standardwebhooks` package's verify() (the three headers, the timestamp within 5
//   minutes, one of the `v1,` signatures equal in constant time), and its message ids read from those bytes
//   by a small JSON scanner (messageIds below). Every SAMPLE-th request (and the first ten) is also verified
//   with the official package, whose own signature of the request must be byte-equal to node:crypto's, and
//   parsed with JSON.parse, whose ids must equal the scanner's. A request the official package refuses, or
//   where either differs, counts in `officialFailed` / `mismatched`, and the bench fails on either.
//   Why: the receiver shares the cores with the server it measures, and the official package's JavaScript
//   SHA-256 over a body made one string costs several times the native check (docs/design.md, "How the benches
//   are set up").
// - `official`: every request with the official package, and JSON.parse (the bench's `--verify-official`).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

const MODE = process.env.VERIFY === 'official' ? 'official' : 'native';
const SAMPLE = 10;
const TOLERANCE_SECONDS = 5 * 60;

let official: Webhook | undefined;
let key: Buffer | undefined;
const seen = new Set<string>();
let requests = 0;
let messages = 0;
let invalid = 0;
/** Requests also verified with the official package, those it refused, and those where its signature differed. */
let officialChecked = 0;
let officialFailed = 0;
let mismatched = 0;

const header = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

/** node:crypto's `v1,` signature of the request (over its bytes), or an error (standardwebhooks' verify(), natively). */
function nativeVerify(body: Buffer, headers: Record<string, string | string[] | undefined>): string {
  const id = header(headers['webhook-id']);
  const timestamp = header(headers['webhook-timestamp']);
  const signatures = header(headers['webhook-signature']);
  if (!id || !timestamp || !signatures) throw new Error('Missing required headers');
  const seconds = Number.parseInt(timestamp, 10);
  const now = Math.floor(Date.now() / 1000);
  if (Number.isNaN(seconds) || now - seconds > TOLERANCE_SECONDS || seconds > now + TOLERANCE_SECONDS)
    throw new Error('bad timestamp');
  const expected = createHmac('sha256', key!).update(`${id}.${seconds}.`).update(body).digest('base64');
  const expectedBytes = Buffer.from(expected);
  for (const versioned of signatures.split(' ')) {
    const [version, signature] = versioned.split(',');
    if (version !== 'v1' || signature === undefined) continue;
    const given = Buffer.from(signature);
    if (given.length === expectedBytes.length && timingSafeEqual(given, expectedBytes)) return `v1,${expected}`;
  }
  throw new Error('No matching signature found');
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const ID_KEY = Buffer.from('"id":"');

/**
 * The `id` of each message in a verified body, read from its bytes: a batch's messages are the objects at depth
 * 3 (`{ "data": [ {…}, … ] }`), a single message is the body itself (depth 1); each must start with its
 * `"id":"…"` (as Inlet writes them; ids have no escapes). Strings are skipped with their escapes, so braces
 * inside them do not count. Throws on anything else; checked against JSON.parse on the sampled requests.
 */
function messageIds(body: Buffer): string[] {
  const batch = body.subarray(0, 16).toString('latin1').startsWith('{"type":"batch"');
  const at = batch ? 3 : 1;
  const ids: string[] = [];
  let depth = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c === QUOTE) {
      for (i++; i < body.length && body[i] !== QUOTE; i++) if (body[i] === BACKSLASH) i++;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (c === 0x7b && depth === at) {
        if (!body.subarray(i + 1, i + 1 + ID_KEY.length).equals(ID_KEY))
          throw new Error('a message that does not start with its id');
        const start = i + 1 + ID_KEY.length;
        const end = body.indexOf(QUOTE, start);
        ids.push(body.toString('latin1', start, end));
      }
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  if (depth !== 0 || ids.length === 0) throw new Error('not a complete body');
  return ids;
}

/** Per request: milliseconds from its first message's `received_at` to its arrival here. */
let ages: number[] = [];
const RECEIVED_AT = Buffer.from('"received_at":"');

/** The first message's `received_at` in a body (the oldest: a batch is in position order), in ms, or undefined. */
function firstReceivedAt(body: Buffer): number | undefined {
  const at = body.indexOf(RECEIVED_AT);
  if (at < 0) return undefined;
  const start = at + RECEIVED_AT.length;
  const time = Date.parse(body.toString('latin1', start, body.indexOf(QUOTE, start)));
  return Number.isNaN(time) ? undefined : time;
}

function agesSummary(): { count: number; p50Ms: number; p99Ms: number; maxMs: number } {
  const sorted = ages.sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { count: sorted.length, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: sorted.at(-1) ?? 0 };
}

let scratch = Buffer.allocUnsafeSlow(256 * 1024);
/** The request using `scratch`, if any: only it may hand it back (its 'end' and its 'close' both do). */
let scratchHolder: object | undefined;

const server = createServer((req, res) => {
  const arrived = Date.now();
  // The body is copied into memory reused from request to request (a fresh 130 KB Buffer per request costs
  // ~0.5 ms in page faults on the bench machine), unless another request is using it (then its own).
  const own = scratchHolder !== undefined;
  const token = {};
  if (!own) scratchHolder = token;
  const release = () =>
    setImmediate(() => {
      if (scratchHolder === token) scratchHolder = undefined;
    });
  let buffer = own ? Buffer.alloc(0) : scratch;
  let length = 0;
  req.on('data', (chunk: Buffer) => {
    if (buffer.length < length + chunk.length) {
      const bigger = Buffer.allocUnsafeSlow(Math.max(2 * buffer.length, length + chunk.length));
      buffer.copy(bigger, 0, 0, length);
      buffer = bigger;
    }
    length += chunk.copy(buffer, length);
  });
  // An aborted request never ends: it frees the memory when it closes.
  if (!own) req.once('close', release);
  req.on('end', () => {
    if (!own) {
      scratch = buffer;
      // Released when this handler returns: everything below is synchronous.
      release();
    }
    const raw = buffer.subarray(0, length);
    if (req.method === 'PUT' && req.url === '/secret') {
      const secret = raw.toString('utf8').trim();
      official = new Webhook(secret);
      key = Buffer.from(secret.slice('whsec_'.length), 'base64');
      res.writeHead(204).end();
      return;
    }
    if (req.method === 'GET' && req.url === '/ages') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(agesSummary()));
      ages = [];
      return;
    }
    if (req.method === 'GET' && req.url === '/counts') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          mode: MODE,
          requests,
          messages,
          distinct: seen.size,
          invalid,
          officialChecked,
          officialFailed,
          mismatched,
        }),
      );
      return;
    }
    if (req.method === 'POST' && official !== undefined) {
      let ids: string[];
      try {
        if (MODE === 'official') {
          const payload = official.verify(raw.toString('utf8'), req.headers as Record<string, string>) as {
            type: string;
            id?: string;
            data: unknown;
          };
          ids = payload.type === 'batch' ? (payload.data as Array<{ id: string }>).map((m) => m.id) : [payload.id!];
        } else {
          const native = nativeVerify(raw, req.headers);
          ids = messageIds(raw);
          if (requests < 10 || requests % SAMPLE === 0) {
            officialChecked++;
            const body = raw.toString('utf8');
            try {
              const payload = official.verify(body, req.headers as Record<string, string>) as {
                type: string;
                id?: string;
                data: unknown;
              };
              // The official package's own signature of this request, byte for byte; and the ids JSON.parse sees.
              const ours = official.sign(
                header(req.headers['webhook-id'])!,
                new Date(Number(header(req.headers['webhook-timestamp'])) * 1000),
                body,
              );
              const parsed =
                payload.type === 'batch' ? (payload.data as Array<{ id: string }>).map((m) => m.id) : [payload.id!];
              if (ours !== native || parsed.join(' ') !== ids.join(' ')) mismatched++;
            } catch {
              officialFailed++;
            }
          }
        }
      } catch {
        invalid++;
        res.writeHead(400).end();
        return;
      }
      requests++;
      const received = firstReceivedAt(raw);
      if (received !== undefined) ages.push(arrived - received);
      for (const id of ids) {
        messages++;
        seen.add(id);
      }
      res.writeHead(204).end();
      return;
    }
    res.writeHead(404).end();
  });
});

server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1');
