// The webhook receiver of the destinations bench (bench/destinations.ts), a separate process so that its
// CPU is not the load generator's. Every request is verified with the official `standardwebhooks` package
// (as a real receiver would), the message ids inside are counted once each, and the counts are served at
// GET /counts. The bench sets the signing secret with PUT /secret after creating the destination.
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

let verifier: Webhook | undefined;
const seen = new Set<string>();
let requests = 0;
let messages = 0;
let invalid = 0;

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    if (req.method === 'PUT' && req.url === '/secret') {
      verifier = new Webhook(body.trim());
      res.writeHead(204).end();
      return;
    }
    if (req.method === 'GET' && req.url === '/counts') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ requests, messages, distinct: seen.size, invalid }));
      return;
    }
    if (req.method === 'POST' && verifier !== undefined) {
      try {
        const payload = verifier.verify(body, req.headers as Record<string, string>) as { type: string; id?: string; data: unknown };
        requests++;
        const items = payload.type === 'batch' ? (payload.data as Array<{ id: string }>) : [payload as { id: string }];
        for (const item of items) {
          messages++;
          seen.add(item.id);
        }
        res.writeHead(204).end();
      } catch {
        invalid++;
        res.writeHead(400).end();
      }
      return;
    }
    res.writeHead(404).end();
  });
});

server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1');
