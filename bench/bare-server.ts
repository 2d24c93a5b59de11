// The bare baseline: a node:http server that reads the whole body, parses it as JSON and answers
// 201 with a small JSON body — the floor any JSON-over-HTTP service pays. Run as its own process.
import { createServer } from 'node:http';

const port = Number(process.env.PORT ?? '0');
const answer = JSON.stringify({ data: { ok: true } });

const server = createServer((request, response) => {
  if (request.method === 'GET') {
    response.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    return;
  }
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    try {
      JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      response.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"invalid json"}');
      return;
    }
    response.writeHead(201, { 'content-type': 'application/json' }).end(answer);
  });
});

server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
process.on('SIGINT', () => server.close(() => process.exit(0)));
