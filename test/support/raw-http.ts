// Raw HTTP over a real socket (node:net): what inject() skips. Sends bytes exactly as given and
// collects the answer, or notes that the server closed or reset the connection.
import { connect, type Socket } from 'node:net';

export interface RawAnswer {
  status: number | undefined;
  headers: Record<string, string>;
  body: string;
  /** The server closed the connection (after or without an answer). */
  closed: boolean;
}

/** Parses the first HTTP/1.1 response in `text` (Content-Length bodies only, which Inlet sends). */
export function parseResponse(text: string): Omit<RawAnswer, 'closed'> | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  const body = Buffer.from(text.slice(end + 4), 'latin1');
  if (body.length < length) return undefined;
  return { status: Number(statusLine!.split(' ')[1]), headers, body: body.subarray(0, length).toString('utf8') };
}

/** Opens a socket, writes `chunks` (strings or buffers, in order), waits for one answer or the close. */
export function rawRequest(port: number, chunks: Array<string | Buffer>, timeoutMs = 5000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(port, '127.0.0.1');
    let text = '';
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const parsed = parseResponse(text);
      socket.destroy();
      resolve({ status: parsed?.status, headers: parsed?.headers ?? {}, body: parsed?.body ?? '', closed });
    };
    const timer = setTimeout(() => {
      settled = true;
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms; got so far: ${JSON.stringify(text.slice(0, 300))}`));
    }, timeoutMs);
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      if (parseResponse(text) !== undefined) finish(false);
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('connect', () => {
      for (const chunk of chunks) socket.write(chunk);
    });
  });
}

/** A request's bytes: request line, headers (Content-Length added when a body is given and none is set). */
export function requestBytes(
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Buffer,
): Buffer {
  const all = { host: 'localhost', ...headers };
  const bodyBuffer = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body);
  if (bodyBuffer !== undefined && !Object.keys(all).some((h) => h.toLowerCase() === 'content-length')) {
    (all as Record<string, string>)['content-length'] = String(bodyBuffer.length);
  }
  const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(all)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}\r\n`;
  return bodyBuffer === undefined
    ? Buffer.from(head, 'latin1')
    : Buffer.concat([Buffer.from(head, 'latin1'), bodyBuffer]);
}
