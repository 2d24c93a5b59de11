// What the system tests that run the real server as child processes share (destinations-crash,
// warehouse-crash): the environment an instance starts with on the test's database, a load of events sent until
// stopped (recording what was acknowledged), and a wait for a condition with a deadline.
import type { TestDatabase } from '../../helpers.js';
import type { ServerProcess } from '../../support/server-process.js';

/** Loopback targets allowed (clarifications §33): the test's receivers and warehouses. */
export const GUARD = { INLET_OUTBOUND_ALLOW: '127.0.0.0/8,::1', INLET_OUTBOUND_ALLOW_PRIVATE: 'true' };

/** An instance's environment on `database`, delivering every 100 ms. */
export function serverEnv(database: TestDatabase, extra: Record<string, string> = {}): Record<string, string> {
  const url =
    database.postgresSchema === undefined
      ? database.databaseUrl
      : `${database.databaseUrl}?schema=${database.postgresSchema}`;
  return { INLET_DATABASE_URL: url, INLET_LOG_LEVEL: 'info', INLET_DESTINATION_POLL_MS: '100', ...GUARD, ...extra };
}

/**
 * Sends events (`body(n)` for the n-th) to /api/v2/events from `workers` loops until stopped or the server is
 * gone; adds each acknowledged uuid to `acknowledged`.
 */
export function sendEvents(
  server: ServerProcess,
  key: string,
  workers: number,
  acknowledged: Set<string>,
  body: (n: number) => object,
) {
  let stopped = false;
  let sent = 0;
  const loops = Array.from({ length: workers }, async () => {
    while (!stopped) {
      try {
        const response = await fetch(`${server.url}/api/v2/events`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body(sent++)),
        });
        const answer = (await response.json()) as { data?: { uuid: string } };
        if (response.status === 201 && answer.data) acknowledged.add(answer.data.uuid);
      } catch {
        return;
      }
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** Waits until `check` holds, looking every `everyMs`; fails naming `what` after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
  everyMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
