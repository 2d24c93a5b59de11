// One autocannon run against 127.0.0.1, summarised into the figures the report prints.
import autocannon, { type Result } from 'autocannon';

export interface LoadOptions {
  url: string;
  path: string;
  headers: Record<string, string>;
  /** Builds the body of the next request (called once per request). */
  body: () => string;
  connections: number;
  durationSeconds: number;
}

export interface LoadResult {
  seconds: number;
  /** Requests answered with the expected status. */
  ok: number;
  statusCounts: Record<string, number>;
  errors: number;
  timeouts: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

let running: { stop(): void } | undefined;

/** Stops a run in progress (Ctrl-C). */
export function stopLoad(): void {
  running?.stop();
}

export function runLoad(options: LoadOptions, okStatus: number): Promise<LoadResult> {
  const headers = { 'content-type': 'application/json', ...options.headers };
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        duration: options.durationSeconds,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: options.path,
            headers,
            setupRequest: (request) => ({ ...request, body: options.body() }),
          },
        ],
      },
      (error, result: Result) => {
        running = undefined;
        if (error) {
          reject(error);
          return;
        }
        const statusCounts: Record<string, number> = {};
        for (const [status, { count }] of Object.entries(result.statusCodeStats ?? {})) statusCounts[status] = Number(count);
        const ok = statusCounts[String(okStatus)] ?? 0;
        resolve({
          seconds: result.duration,
          ok,
          statusCounts,
          errors: result.errors,
          timeouts: result.timeouts,
          requestsPerSecond: ok / result.duration,
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
        });
      },
    );
    running = instance;
  });
}
