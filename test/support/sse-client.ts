// A live-stream client for tests, as a browser's EventSource would behave but with headers (the admin
// token): fetch with a streamed body, eventsource-parser for the framing, and on a closed or failed
// connection a reconnect after the server's `retry` with `Last-Event-ID` set to the last id seen.
import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface SseClient {
  readonly messages: EventSourceMessage[];
  /** Connections made after the first (each resumed with Last-Event-ID). */
  readonly reconnects: number;
  /** Why each earlier connection ended. */
  readonly endings: string[];
  /** Resolves once the server said the stream has joined (its ": open" comment). */
  opened(timeoutMs?: number): Promise<void>;
  close(): void;
}

export function followStream(
  url: string,
  headers: Record<string, string>,
  options: { retryMs?: number } = {},
): SseClient {
  const messages: EventSourceMessage[] = [];
  const endings: string[] = [];
  let reconnects = 0;
  let lastEventId: string | undefined;
  let retryMs = options.retryMs ?? 500;
  let open = false;
  let closed = false;
  const abort = new AbortController();

  async function connectOnce(): Promise<string> {
    const response = await fetch(url, {
      headers: {
        ...headers,
        accept: 'text/event-stream',
        ...(lastEventId === undefined ? {} : { 'last-event-id': lastEventId }),
      },
      signal: abort.signal,
    });
    if (response.status !== 200 || response.body === null)
      return `status ${response.status}: ${(await response.text()).slice(0, 200)}`;
    const parser = createParser({
      onEvent(message) {
        if (message.id !== undefined) lastEventId = message.id;
        messages.push(message);
      },
      onRetry(ms) {
        retryMs = Math.min(ms, options.retryMs ?? ms);
      },
      onComment(comment) {
        if (comment.trim() === 'open') open = true;
      },
    });
    const decoder = new TextDecoder();
    for await (const chunk of response.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    return 'ended by the server';
  }

  void (async () => {
    for (let first = true; !closed; first = false) {
      if (!first) reconnects++;
      let ending: string;
      try {
        ending = await connectOnce();
      } catch (error) {
        ending = `${(error as Error).name}: ${(error as Error).message}`;
      }
      if (closed) return;
      endings.push(ending);
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  })();

  return {
    messages,
    get reconnects() {
      return reconnects;
    },
    endings,
    async opened(timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (!open) {
        if (Date.now() > deadline) throw new Error(`the stream did not open (${endings.join('; ')})`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    close() {
      closed = true;
      abort.abort();
    },
  };
}
