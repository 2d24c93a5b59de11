// The webhook receiver of the destinations bench (bench/destinations.ts), a separate process so that its
// CPU is not the load generator's. Every request's signature is verified, the message ids inside are
// counted once each, and the counts are served at GET /counts. The bench sets the signing secret with
// PUT /secret after creating the destination.
//
// How it verifies (VERIFY):
// - `native` (the default): every request with node:crypto's HMAC-SHA256, the same checks as the official
//   `standardwebhooks` package's verify() (the three headers, the timestamp within 5 minutes, one of the
//   `v1,` signatures equal in constant time); and every SAMPLE-th request (and the first ten) also with the
//   official package, whose own signature of the request must be byte-equal to node:crypto's. A request the
//   official package refuses, or where the two differ, counts in `officialFailed` / `mismatched`, and the
//   bench fails on either. The official package hashes with a SHA-256 written in JavaScript: verifying every
//   100-message body with it cost about 36 µs of CPU per message (bench/README.md "Destinations"), on the
//   same two cores as the server it measures.
// - `official`: every request with the official package (as before; the bench's `--verify-official`).
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

/** node:crypto's `v1,` signature of the request, or an error (standardwebhooks' verify(), natively). */
function nativeVerify(body: string, headers: Record<string, string | string[] | undefined>): string {
  const id = header(headers['webhook-id']);
  const timestamp = header(headers['webhook-timestamp']);
  const signatures = header(headers['webhook-signature']);
  if (!id || !timestamp || !signatures) throw new Error('Missing required headers');
  const seconds = Number.parseInt(timestamp, 10);
  const now = Math.floor(Date.now() / 1000);
  if (Number.isNaN(seconds) || now - seconds > TOLERANCE_SECONDS || seconds > now + TOLERANCE_SECONDS) throw new Error('bad timestamp');
  const expected = createHmac('sha256', key!).update(`${id}.${seconds}.${body}`).digest('base64');
  const expectedBytes = Buffer.from(expected);
  for (const versioned of signatures.split(' ')) {
    const [version, signature] = versioned.split(',');
    if (version !== 'v1' || signature === undefined) continue;
    const given = Buffer.from(signature);
    if (given.length === expectedBytes.length && timingSafeEqual(given, expectedBytes)) return `v1,${expected}`;
  }
  throw new Error('No matching signature found');
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    if (req.method === 'PUT' && req.url === '/secret') {
      official = new Webhook(body.trim());
      key = Buffer.from(body.trim().slice('whsec_'.length), 'base64');
      res.writeHead(204).end();
      return;
    }
    if (req.method === 'GET' && req.url === '/counts') {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ mode: MODE, requests, messages, distinct: seen.size, invalid, officialChecked, officialFailed, mismatched }));
      return;
    }
    if (req.method === 'POST' && official !== undefined) {
      let payload: { type: string; id?: string; data: unknown };
      try {
        if (MODE === 'official') payload = official.verify(body, req.headers as Record<string, string>) as typeof payload;
        else {
          const native = nativeVerify(body, req.headers);
          if (requests < 10 || requests % SAMPLE === 0) {
            officialChecked++;
            try {
              official.verify(body, req.headers as Record<string, string>);
              // The official package's own signature of this request, byte for byte.
              const ours = official.sign(header(req.headers['webhook-id'])!, new Date(Number(header(req.headers['webhook-timestamp'])) * 1000), body);
              if (ours !== native) mismatched++;
            } catch {
              officialFailed++;
            }
          }
          payload = JSON.parse(body) as typeof payload;
        }
      } catch {
        invalid++;
        res.writeHead(400).end();
        return;
      }
      requests++;
      const items = payload.type === 'batch' ? (payload.data as Array<{ id: string }>) : [payload as { id: string }];
      for (const item of items) {
        messages++;
        seen.add(item.id);
      }
      res.writeHead(204).end();
      return;
    }
    res.writeHead(404).end();
  });
});

server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1');
