// The live stream (events-out §4) read with fetch and an SSE parser, because EventSource cannot send the
// Bearer header (clarifications §29): no token ever goes into a URL. On a dropped connection it waits the
// server's `retry:` and resumes after the last event id (Last-Event-ID), so nothing is missed or repeated.
import { EventSourceParserStream } from 'eventsource-parser/stream';
import { authHeaders, withQuery, forgetToken, type InletEvent, type Rejection } from './api';

export type StreamState = 'connecting' | 'live' | 'reconnecting' | 'closed';

export interface StreamHandlers {
  onEvent(event: InletEvent): void;
  onRejection(rejection: Rejection): void;
  onState(state: StreamState, detail?: string): void;
}

export function openEventStream(
  productId: string,
  filters: Record<string, string | undefined>,
  handlers: StreamHandlers,
): () => void {
  const abort = new AbortController();
  let lastEventId: string | undefined;
  let retryMs = 2000;

  async function connectOnce(): Promise<void> {
    const headers: Record<string, string> = { accept: 'text/event-stream', ...authHeaders() };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    const url = withQuery(`/admin/v1/products/${encodeURIComponent(productId)}/events/stream`, {
      ...filters,
      include: 'rejections',
    });
    const response = await fetch(url, { headers, signal: abort.signal, cache: 'no-store' });
    if (response.status === 401) {
      forgetToken();
      throw new Error('signed out');
    }
    if (!response.ok || response.body === null) {
      const problem = (await response.json().catch(() => ({}))) as { detail?: string };
      throw new Error(problem.detail ?? `HTTP ${response.status}`);
    }
    if (abort.signal.aborted) return;
    handlers.onState('live');
    const messages = response.body
      .pipeThrough(new TextDecoderStream())
      .pipeThrough(new EventSourceParserStream({ onRetry: (ms) => (retryMs = ms) }));
    const reader = messages.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      if (value.event === 'event') {
        if (value.id !== undefined) lastEventId = value.id;
        handlers.onEvent(JSON.parse(value.data) as InletEvent);
      } else if (value.event === 'rejection') {
        handlers.onRejection(JSON.parse(value.data) as Rejection);
      }
    }
  }

  void (async () => {
    handlers.onState('connecting');
    while (!abort.signal.aborted) {
      try {
        await connectOnce();
        if (abort.signal.aborted) break;
        handlers.onState('reconnecting', 'the stream ended');
      } catch (error) {
        if (abort.signal.aborted) break;
        if ((error as Error).message === 'signed out') return;
        handlers.onState('reconnecting', (error as Error).message);
      }
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  })();

  return () => abort.abort();
}
