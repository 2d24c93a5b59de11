// Sends raw bytes on a fresh TCP connection and reads back HTTP/1.1 responses, with a deadline:
// what node:net lets a test control and an HTTP client would not (lying Content-Length, truncated
// bodies, half-closed connections, pipelined garbage).
import { connect } from 'node:net';
import type { After } from './generator.js';

export interface RawResponse {
  status: number;
  /** Header names in lower case; repeated headers keep every value. */
  headers: Record<string, string[]>;
  body: Buffer;
}

export interface Exchange {
  responses: RawResponse[];
  /**
   * answered: we stopped reading after the answer(s); closed: the server closed (FIN);
   * reset: the connection was reset (RST); aborted: we gave up by design (After "abort");
   * timeout: neither an answer nor a close within the deadline.
   */
  outcome: 'answered' | 'closed' | 'reset' | 'aborted' | 'timeout';
  /** The server sent bytes that are not a valid HTTP/1.1 response. */
  malformed?: string;
  elapsedMs: number;
}

export interface ExchangeOptions {
  after: After;
  /** The request is HEAD: the first response has no body. */
  headOnly?: boolean;
  /** More than one answer may come: keep reading until the server closes or stays quiet for idleMs. */
  pipelined?: boolean;
  deadlineMs: number;
  idleMs?: number;
}

interface Parsed {
  response?: RawResponse;
  /** Bytes consumed by the response (0 while incomplete). */
  consumed: number;
  /** The response is complete only at the close of the connection (no length, not chunked). */
  untilClose?: boolean;
  error?: string;
}

function parseChunked(buffer: Buffer, start: number): { body: Buffer; end: number } | { error: string } | undefined {
  const parts: Buffer[] = [];
  let offset = start;
  for (;;) {
    const lineEnd = buffer.indexOf('\r\n', offset);
    if (lineEnd < 0) return undefined;
    const sizeText = buffer.subarray(offset, lineEnd).toString('latin1').split(';')[0]!.trim();
    if (!/^[0-9a-fA-F]+$/.test(sizeText)) return { error: `bad chunk size ${JSON.stringify(sizeText)}` };
    const size = parseInt(sizeText, 16);
    if (size === 0) {
      // Trailers end with an empty line.
      const end = buffer.indexOf('\r\n\r\n', lineEnd);
      if (buffer.subarray(lineEnd, lineEnd + 4).toString('latin1') === '\r\n\r\n')
        return { body: Buffer.concat(parts), end: lineEnd + 4 };
      if (end < 0) return undefined;
      return { body: Buffer.concat(parts), end: end + 4 };
    }
    if (buffer.length < lineEnd + 2 + size + 2) return undefined;
    parts.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
    offset = lineEnd + 2 + size + 2;
  }
}

function parseResponse(buffer: Buffer, headOnly: boolean, closed: boolean): Parsed {
  const headEnd = buffer.indexOf('\r\n\r\n');
  if (headEnd < 0) {
    if (buffer.length > 64 * 1024) return { consumed: 0, error: 'response head larger than 64 KiB' };
    return { consumed: 0 };
  }
  const lines = buffer.subarray(0, headEnd).toString('latin1').split('\r\n');
  const statusLine = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(lines[0]!);
  if (statusLine === null) return { consumed: 0, error: `bad status line ${JSON.stringify(lines[0]!.slice(0, 100))}` };
  const status = Number(statusLine[1]);
  const headers: Record<string, string[]> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) return { consumed: 0, error: `bad header line ${JSON.stringify(line.slice(0, 100))}` };
    const name = line.slice(0, colon).trim().toLowerCase();
    (headers[name] ??= []).push(line.slice(colon + 1).trim());
  }
  const bodyStart = headEnd + 4;
  if ((status >= 100 && status < 200) || status === 204 || status === 304 || headOnly) {
    return { response: { status, headers, body: Buffer.alloc(0) }, consumed: bodyStart };
  }
  // A live stream (server-sent events) is answered once its head has arrived; it does not end by design.
  if (status < 300 && (headers['content-type'] ?? []).some((v) => /text\/event-stream/i.test(v))) {
    return { response: { status, headers, body: Buffer.alloc(0) }, consumed: buffer.length };
  }
  if ((headers['transfer-encoding'] ?? []).some((v) => /chunked/i.test(v))) {
    const chunkedBody = parseChunked(buffer, bodyStart);
    if (chunkedBody === undefined) return { consumed: 0 };
    if ('error' in chunkedBody) return { consumed: 0, error: chunkedBody.error };
    return { response: { status, headers, body: chunkedBody.body }, consumed: chunkedBody.end };
  }
  const lengths = headers['content-length'];
  if (lengths !== undefined) {
    if (lengths.length !== 1 || !/^\d+$/.test(lengths[0]!))
      return { consumed: 0, error: `bad Content-Length ${JSON.stringify(lengths)}` };
    const length = Number(lengths[0]);
    if (buffer.length < bodyStart + length) return { consumed: 0 };
    return {
      response: { status, headers, body: buffer.subarray(bodyStart, bodyStart + length) },
      consumed: bodyStart + length,
    };
  }
  if (!closed) return { consumed: 0, untilClose: true };
  return { response: { status, headers, body: buffer.subarray(bodyStart) }, consumed: buffer.length };
}

export function exchange(port: number, bytes: Buffer, options: ExchangeOptions): Promise<Exchange> {
  const started = Date.now();
  const idleMs = options.idleMs ?? 250;
  return new Promise((resolve) => {
    const responses: RawResponse[] = [];
    let buffer: Buffer = Buffer.alloc(0);
    let finished = false;
    let malformed: string | undefined;
    let idleTimer: NodeJS.Timeout | undefined;
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    socket.setNoDelay(true);

    const finish = (outcome: Exchange['outcome']) => {
      if (finished) return;
      finished = true;
      clearTimeout(deadline);
      clearTimeout(idleTimer);
      clearTimeout(abortTimer);
      socket.destroy();
      resolve({
        responses,
        outcome,
        ...(malformed === undefined ? {} : { malformed }),
        elapsedMs: Date.now() - started,
      });
    };

    // After a live stream's head, every later byte on the connection is that stream's events (they are
    // separated by blank lines, not HTTP heads): not another answer to parse.
    let streaming = false;
    const drain = (closed: boolean) => {
      for (;;) {
        if (streaming) buffer = Buffer.alloc(0);
        if (buffer.length === 0) return;
        const parsed = parseResponse(buffer, options.headOnly === true && responses.length === 0, closed);
        if (parsed.error !== undefined) {
          malformed = parsed.error;
          return;
        }
        if (parsed.response === undefined) {
          // After an answer to HEAD, a server that could not parse the request (so did not know it was
          // HEAD) may have sent a body before closing: not a broken answer.
          const afterHead = options.headOnly === true && responses.length > 0;
          if (closed && !parsed.untilClose && !afterHead)
            malformed = `the connection closed inside a response (${buffer.length} bytes pending)`;
          return;
        }
        buffer = buffer.subarray(parsed.consumed);
        // 1xx answers (100 Continue) are interim: the final answer follows.
        if (parsed.response.status < 200 && parsed.response.status !== 101) continue;
        responses.push(parsed.response);
        if (
          parsed.response.status < 300 &&
          (parsed.response.headers['content-type'] ?? []).some((v) => /text\/event-stream/i.test(v))
        )
          streaming = true;
      }
    };

    const deadline = setTimeout(() => finish('timeout'), options.deadlineMs);
    let abortTimer: NodeJS.Timeout | undefined;

    socket.on('connect', () => {
      if (options.after.kind === 'half-close') socket.end(bytes);
      else socket.write(bytes);
      if (options.after.kind === 'abort') abortTimer = setTimeout(() => finish('aborted'), options.after.afterMs);
    });
    socket.on('data', (chunk: Buffer) => {
      buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
      drain(false);
      if (malformed !== undefined) return finish('closed');
      if (responses.length === 0) return;
      if (!options.pipelined && options.after.kind !== 'abort') return finish('answered');
      // More answers may follow (pipelined bytes): wait for the close or a quiet moment.
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => finish('answered'), idleMs);
    });
    socket.on('end', () => {
      drain(true);
      finish('closed');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => {
      drain(true);
      finish(error.code === 'ECONNRESET' || error.code === 'EPIPE' ? 'reset' : 'closed');
    });
    socket.on('close', () => {
      drain(true);
      finish('closed');
    });
  });
}
