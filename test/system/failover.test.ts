// The failover drill (issue 16): a pg_auto_failover formation of our own (monitor, primary, synchronous
// standby; test/system/support/pg-auto-failover.ts), one Inlet process on the multi-host URL that
// `pg_autoctl show uri` prints, sustained batch ingest by several writers. Twice — kill -9 of the
// primary's whole node, then (after the old node rejoined) a planned switchover — it asserts:
// - every request is answered: 2xx, or 503 problem+json with Retry-After; nothing else, no dropped
//   connection, no answer later than the client's deadline;
// - /healthz stays 200, /readyz says 503 while no primary takes writes and 200 afterwards;
// - ingest is back within 15 s of the new primary accepting writes (measured by a probe writing to it
//   directly), without restarting Inlet;
// - every acknowledged event is stored, exactly once (writers re-send a batch until it is acknowledged,
//   so a commit of unknown outcome is re-sent and must come back as a duplicate with the same uuid);
// - the Inlet process is still alive;
// - the live stream (events-out §4), opened before the drill and resumed with Last-Event-ID whenever its
//   connection ends, delivers every acknowledged event exactly once: its tailer follows the new primary
//   and never skips (issue 16 item 4).
// Before each disruption it checks its premise (the primary replicates synchronously, the monitor agrees),
// before the load and again under it; each phase prints the monitor's event log, and a loss prints where the
// missing events are (per node). A switchover during which pg_auto_failover made the primary asynchronous
// anyway (wait_primary) is drilled again, up to three times (see the second test).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { failoverToolsProblem, startFormation, type Formation, type NodeState } from './support/pg-auto-failover.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { followStream, type SseClient } from '../support/sse-client.js';

const ADMIN_TOKEN = 'drill-admin-token-0123456789abcdef';
const WRITERS = 4;
const BATCH = 20;
/** A client's deadline per request: an answer later than this counts as a hang. */
const REQUEST_DEADLINE_MS = 10_000;
const BACK_WITHIN_MS = 15_000;

// The drill does not depend on the backend under test: it runs once, in the PostgreSQL pass.
const problem =
  process.env.INLET_TEST_DIALECT === 'sqlite'
    ? 'PostgreSQL only (runs in the PostgreSQL pass)'
    : failoverToolsProblem();

interface Outcome {
  startedAt: number;
  endedAt: number;
  status: number | 'error';
  detail?: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe(
  'PostgreSQL failover drill (pg_auto_failover, synchronous standby)',
  { skip: problem ?? false, timeout: 900_000 },
  () => {
    let formation: Formation | undefined;
    let inlet: ServerProcess | undefined;
    let key: string;
    let stream: SseClient | undefined;
    let streamUrl = '';
    const acknowledged = new Map<string, string>(); // external_id → uuid

    before(async () => {
      const started = Date.now();
      formation = await startFormation();
      console.log(`# formation up in ${Date.now() - started} ms: ${formation.uri}`);
      inlet = await startServerProcess(
        {
          INLET_DATABASE_URL: formation.uri,
          INLET_ADMIN_TOKEN: ADMIN_TOKEN,
          INLET_RATE_LIMIT_RPS: '0',
          INLET_PG_POOL_SIZE: '6',
          INLET_LOG_LEVEL: 'info', // startServerProcess waits for the "listening" line
          INLET_TRAFFIC_SYNC_INTERVAL_MS: '0',
        },
        120_000,
      );
      const product = await admin('POST', '/admin/v1/products', { name: 'Drill' });
      const created = await admin('POST', `/admin/v1/products/${product.data.id}/keys`, { kind: 'events' });
      key = created.data.key;
      streamUrl = `${inlet.url}/admin/v1/products/${product.data.id}/events/stream`;
      stream = followStream(streamUrl, { authorization: `Bearer ${ADMIN_TOKEN}` }, { retryMs: 250 });
      await stream.opened();
    });

    after(() => {
      stream?.close();
      if (inlet !== undefined && inlet.child.exitCode !== null)
        console.log(`# Inlet exited with ${inlet.child.exitCode}; its last output:\n${inlet.output().slice(-6000)}`);
      if (inlet !== undefined && inlet.child.exitCode === null) inlet.child.kill('SIGKILL');
      formation?.destroy();
    });

    async function admin(method: string, path: string, body: unknown) {
      const response = await fetch(`${inlet!.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
      });
      assert.equal(response.status, 201, await response.clone().text());
      return (await response.json()) as { data: { id: string; key: string } };
    }

    /** Sends one batch; returns the outcome and, when acknowledged, the uuid per external_id. */
    async function send(
      events: Array<Record<string, unknown>>,
    ): Promise<{ outcome: Outcome; uuids?: Map<string, string>; statuses?: string[] }> {
      const startedAt = Date.now();
      try {
        const response = await fetch(`${inlet!.url}/api/v2/events/batch`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ events }),
          signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
        });
        const text = await response.text();
        const endedAt = Date.now();
        if (response.status === 503) {
          const type = response.headers.get('content-type') ?? '';
          const retryAfter = response.headers.get('retry-after');
          const ok =
            type.startsWith('application/problem+json') &&
            retryAfter !== null &&
            JSON.parse(text).code === 'unavailable';
          return {
            outcome: {
              startedAt,
              endedAt,
              status: 503,
              ...(ok ? {} : { detail: `bad 503: ${type} retry-after=${retryAfter} ${text.slice(0, 200)}` }),
            },
          };
        }
        if (response.status !== 200)
          return { outcome: { startedAt, endedAt, status: response.status, detail: text.slice(0, 300) } };
        const body = JSON.parse(text) as {
          data: Array<{ index: number; status: string; event?: { uuid: string; external_id: string } }>;
        };
        const uuids = new Map<string, string>();
        for (const item of body.data)
          if (item.event !== undefined) uuids.set(String(events[item.index]!.external_id), item.event.uuid);
        return { outcome: { startedAt, endedAt, status: 200 }, uuids, statuses: body.data.map((d) => d.status) };
      } catch (error) {
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        return {
          outcome: {
            startedAt,
            endedAt: Date.now(),
            status: 'error',
            detail: `${(error as Error).name}: ${(error as Error).message} ${cause?.code ?? cause?.message ?? ''}`,
          },
        };
      }
    }

    /**
     * Runs `disrupt` under load: WRITERS loops, each sending batches of new external_ids and re-sending a
     * batch until it is acknowledged. Returns every outcome, the health checks seen, and when the probe
     * first wrote to `newPrimaryPort` after the disruption began.
     */
    async function underLoad(
      label: string,
      primaryPort: number,
      newPrimaryPort: number,
      disrupt: () => Promise<void> | void,
    ) {
      const outcomes: Outcome[] = [];
      const health: Array<{
        at: number;
        healthz: number | string;
        readyz: number | string;
        metrics: number | string;
        metricsMs: number;
      }> = [];
      let stopping = false;
      const writer = async (id: number) => {
        for (let seq = 0; !stopping; seq++) {
          const events = Array.from({ length: BATCH }, (_, i) => ({
            event_type: 'drill',
            action: 'sent',
            subject_type: 'user',
            subject_id: `${label}-w${id}`,
            external_id: `${label}-w${id}-${seq}-${i}`,
            properties: { seq, i },
          }));
          // A batch is re-sent until acknowledged (or the drill gives up after a minute).
          for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
            const { outcome, uuids, statuses } = await send(events);
            outcomes.push(outcome);
            if (uuids !== undefined) {
              assert.ok(
                statuses!.every((s) => s === 'created' || s === 'duplicate'),
                `${label}: ${statuses}`,
              );
              for (const [externalId, uuid] of uuids) {
                const earlier = acknowledged.get(externalId);
                assert.ok(earlier === undefined || earlier === uuid, `${externalId} acknowledged with two uuids`);
                acknowledged.set(externalId, uuid);
              }
              break;
            }
            await sleep(outcome.status === 503 ? 200 : 500);
          }
        }
      };
      const healthLoop = async () => {
        while (!stopping) {
          const at = Date.now();
          const get = (path: string) =>
            fetch(`${inlet!.url}${path}`, { signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) }).then(
              async (r) => (await r.text(), r.status),
              (e: Error) => e.message,
            );
          // /metrics asks the database how it replicates (inlet_postgres_synchronous_commit): it must still
          // answer, and soon, while no primary does.
          const metricsStarted = Date.now();
          const [healthz, readyz, metrics] = await Promise.all([
            get('/healthz'),
            get('/readyz'),
            get('/metrics').then((m) => [m, Date.now() - metricsStarted] as const),
          ]);
          health.push({ at, healthz, readyz, metrics: metrics[0], metricsMs: metrics[1] });
          await sleep(250);
        }
      };
      const loadStartedAt = Date.now();
      const writers = Array.from({ length: WRITERS }, (_, i) => writer(i));
      const healthDone = healthLoop();
      await sleep(3000); // steady ingest first
      const before = outcomes.length;
      assert.ok(
        outcomes.slice(0, before).some((o) => o.status === 200),
        `${label}: ingest works before the disruption`,
      );
      // The premise again, under the load: the monitor may have made the primary asynchronous since.
      await synchronous(`${label} (under load)`, primaryPort);

      const disruptedAt = Date.now();
      const probe = probeWrites(newPrimaryPort, disruptedAt);
      await disrupt();
      const writesAt = await probe;
      console.log(
        `# ${label}: new primary (port ${newPrimaryPort}) accepted a write ${writesAt - disruptedAt} ms after the disruption began`,
      );
      console.log(
        `# ${label}: the monitor's events, times from the disruption:\n${await formationEvents(new Date(loadStartedAt - 1000), disruptedAt)}`,
      );
      // Keep the load on until ingest has been back for a few seconds (or the limit has clearly passed).
      for (const limit = writesAt + BACK_WITHIN_MS + 10_000; Date.now() < limit;) {
        const lastFailure = Math.max(0, ...outcomes.filter((o) => o.status !== 200).map((o) => o.endedAt));
        const okSince = outcomes.some((o) => o.status === 200 && o.startedAt > Math.max(lastFailure, writesAt));
        if (okSince && Date.now() - Math.max(lastFailure, writesAt) > 4000) break;
        await sleep(250);
      }
      stopping = true;
      await Promise.all(writers);
      await healthDone;
      return { outcomes, health, loadStartedAt, disruptedAt, writesAt };
    }

    /**
     * Waits until the primary on `port` replicates synchronously: synchronous_standby_names set and a
     * standby streaming as sync or quorum, and the monitor showing this node primary and the other
     * secondary, seen twice a second apart. The drill's promise (nothing acknowledged is lost) rests on
     * that premise, so the drill checks it instead of assuming it from the monitor's states alone.
     */
    async function synchronous(label: string, port: number) {
      let facts: Awaited<ReturnType<Formation['replication']>> | string = 'not asked yet';
      let states: NodeState[] | string = [];
      let seen = 0;
      let unsynchronised = 0;
      const standby = port === formation!.ports.node1 ? 'node2' : 'node1';
      for (const deadline = Date.now() + 90_000; Date.now() < deadline;) {
        facts = await formation!.replication(port).catch((error: Error) => error.message);
        states = await formation!.states().catch((error: Error) => error.message);
        // The monitor agrees: this node primary and the other secondary, each as assigned.
        const stable =
          typeof states !== 'string' &&
          states.every((n) => n.assigned === n.reported && n.reported === (n.port === port ? 'primary' : 'secondary'));
        const ok =
          stable &&
          typeof facts !== 'string' &&
          facts.synchronousStandbyNames !== '' &&
          facts.standbys.some((s) => s.state === 'streaming' && (s.syncState === 'sync' || s.syncState === 'quorum'));
        seen = ok ? seen + 1 : 0;
        // pg_auto_failover 2.0 can leave a two-node primary without synchronous_standby_names while its
        // monitor shows primary and secondary: the primary fetches the setting on its way from wait_primary
        // to primary, and the monitor answers '' whenever the standby's goal is not secondary at that moment
        // (a standby flagged unhealthy for a second). Nothing sets it again, so every commit is then
        // asynchronous and a switchover loses what the standby had not received. Ask for the settings again.
        unsynchronised =
          stable && typeof facts !== 'string' && facts.synchronousStandbyNames === '' ? unsynchronised + 1 : 0;
        if (unsynchronised === 3) {
          console.log(
            `# ${label}: the monitor shows primary and secondary but the primary has synchronous_standby_names = '' (${JSON.stringify(facts)}); asking the monitor to apply the settings again`,
          );
          formation!.applySettings(standby);
          unsynchronised = 0;
        }
        if (seen >= 2) {
          console.log(
            `# ${label}: before the disruption the primary replicates synchronously: ${JSON.stringify(facts)}`,
          );
          // Inlet's own metrics see the same (what an operator would watch).
          const metrics = await (
            await fetch(`${inlet!.url}/metrics`, { signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) })
          ).text();
          const commitLine = metrics.split('\n').find((line) => line.startsWith('inlet_postgres_synchronous_commit{'));
          assert.match(
            commitLine ?? '',
            /\} 1$/,
            `${label}: Inlet's inlet_postgres_synchronous_commit says its commits wait for a standby (${commitLine})`,
          );
          assert.match(
            metrics,
            /^inlet_postgres_standbys\{sync_state="(sync|quorum)"\} 1$/m,
            `${label}: Inlet's inlet_postgres_standbys counts the synchronous standby`,
          );
          console.log(`# ${label}: Inlet's metrics agree: ${commitLine}`);
          return;
        }
        await sleep(1000);
      }
      assert.fail(
        `${label}: the primary on port ${port} never replicated synchronously within 90 s (last: ${JSON.stringify(facts)}, states ${JSON.stringify(states)})`,
      );
    }

    /** The monitor's event log since `since`, a line per event, times relative to `zero`. */
    async function formationEvents(since: Date, zero: number): Promise<string> {
      const events = await formation!.events(since).catch((error: Error) => error.message);
      if (typeof events === 'string') return `(monitor's event log unreadable: ${events})`;
      return events
        .map(
          (e) =>
            `#   ${e.at.getTime() - zero >= 0 ? '+' : ''}${e.at.getTime() - zero} ms ${e.node}: reported ${e.reported}, goal ${e.goal}, replication ${e.replication ?? '-'}, lsn ${e.lsn}: ${e.description}`,
        )
        .join('\n');
    }

    /**
     * The monitor's events since `since` in which `node` (the phase's primary) was made asynchronous: assigned or
     * reporting wait_primary, which empties synchronous_standby_names (the monitor thought the standby unhealthy).
     * Acknowledged commits are then on that node alone, and a failover or switchover may lose them.
     */
    async function madeAsynchronous(node: 'node1' | 'node2', since: number): Promise<string[]> {
      const events = await formation!.events(new Date(since - 1000));
      return events
        .filter((e) => e.node === node && (e.goal === 'wait_primary' || e.reported === 'wait_primary'))
        .map(
          (e) =>
            `#   +${e.at.getTime() - since} ms ${e.node}: reported ${e.reported}, goal ${e.goal}: ${e.description}`,
        );
    }

    /** Resolves with the time a direct write to the server at `port` first committed after `since`. */
    async function probeWrites(port: number, since: number): Promise<number> {
      for (const deadline = since + 180_000; Date.now() < deadline;) {
        const client = new pg.Client({
          host: '127.0.0.1',
          port,
          user: 'postgres',
          database: 'events',
          connectionTimeoutMillis: 2000,
        });
        try {
          await client.connect();
          const { rows } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery');
          if (!rows[0]!.recovery) {
            await client.query('CREATE TABLE IF NOT EXISTS inlet_drill_probe (at timestamptz NOT NULL)');
            await client.query('INSERT INTO inlet_drill_probe VALUES (now())');
            const at = Date.now();
            if (at > since) return at;
          }
        } catch {
          // not up, not primary yet, or went away
        } finally {
          await client.end().catch(() => {});
        }
        await sleep(200);
      }
      throw new Error(`no write reached port ${port} within 180 s`);
    }

    function check(label: string, run: Awaited<ReturnType<typeof underLoad>>) {
      const { outcomes, health, disruptedAt, writesAt } = run;
      const bad = outcomes.filter((o) => o.detail !== undefined || (o.status !== 200 && o.status !== 503));
      assert.deepEqual(
        bad.slice(0, 5),
        [],
        `${label}: only 2xx and 503 problem+json with Retry-After (${bad.length} others)`,
      );
      const failures = outcomes.filter((o) => o.status === 503);
      const lastFailure = Math.max(disruptedAt, ...failures.map((o) => o.endedAt));
      const firstBack = outcomes
        .filter((o) => o.status === 200 && o.startedAt >= lastFailure)
        .sort((a, b) => a.endedAt - b.endedAt)[0];
      assert.ok(firstBack !== undefined, `${label}: ingest came back`);
      const slowest = Math.max(...outcomes.map((o) => o.endedAt - o.startedAt));
      console.log(
        `# ${label}: ${outcomes.length} requests, ${failures.length} answered 503 (from +${Math.min(...failures.map((o) => o.startedAt - disruptedAt))} ms to +${lastFailure - disruptedAt} ms), ` +
          `ingest back ${firstBack.endedAt - writesAt} ms after the new primary took writes; slowest answer ${slowest} ms`,
      );
      assert.ok(slowest < REQUEST_DEADLINE_MS, `${label}: an answer took ${slowest} ms`);
      assert.ok(
        lastFailure - writesAt < BACK_WITHIN_MS,
        `${label}: 503s went on ${lastFailure - writesAt} ms after the new primary took writes`,
      );
      assert.ok(
        health.every((h) => h.healthz === 200),
        `${label}: /healthz stayed 200 (${JSON.stringify(health.filter((h) => h.healthz !== 200).slice(0, 3))})`,
      );
      assert.ok(
        health.every((h) => h.readyz === 200 || h.readyz === 503),
        `${label}: /readyz answered 200 or 503`,
      );
      const slowMetrics = health.filter((h) => h.metrics !== 200 || h.metricsMs > 3000);
      assert.equal(
        slowMetrics.length,
        0,
        `${label}: /metrics answered 200 within 3 s throughout (${slowMetrics.length} did not: ${JSON.stringify(slowMetrics.slice(0, 3).map((h) => [h.metrics, h.metricsMs]))})`,
      );
      assert.equal(health.at(-1)!.readyz, 200, `${label}: ready again at the end`);
      assert.equal(inlet!.child.exitCode, null, `${label}: the Inlet process is alive`);
      return failures.length;
    }

    /** `since`: when the phase's load began (the monitor's events from then are printed if events are missing). */
    async function checkStored(label: string, since: number, options: { lossExcused?: boolean } = {}) {
      // Every acknowledged event is stored once, with the uuid it was acknowledged with.
      const primary = (await formation!.states()).find(
        (s) => s.assigned === 'primary' || s.assigned === 'wait_primary' || s.assigned === 'single',
      )!;
      const direct = new pg.Client({ host: '127.0.0.1', port: primary.port, user: 'postgres', database: 'events' });
      await direct.connect();
      try {
        const { rows } = await direct.query<{ external_id: string; id: string }>(
          "SELECT external_id, id FROM events WHERE event_type = 'drill'",
        );
        const stored = new Map<string, string[]>();
        for (const row of rows) stored.set(row.external_id, [...(stored.get(row.external_id) ?? []), row.id]);
        const missing = [...acknowledged].filter(([externalId, uuid]) => stored.get(externalId)?.[0] !== uuid);
        if (missing.length > 0) await explainMissing(label, missing, since);
        if (options.lossExcused) {
          // Lost by the database, not by Inlet: each acknowledged event is there with its uuid, or not at all.
          const different = missing.filter(([externalId]) => stored.has(externalId));
          assert.deepEqual(different.slice(0, 5), [], `${label}: stored with another uuid than acknowledged`);
          console.log(
            `# ${label}: ${missing.length} of ${acknowledged.size} acknowledged events lost with the asynchronous commits; the rest are checked as always`,
          );
          for (const [externalId] of missing) acknowledged.delete(externalId);
          missing.length = 0;
        }
        assert.deepEqual(
          missing.slice(0, 5),
          [],
          `${label}: ${missing.length} of ${acknowledged.size} acknowledged events missing or different`,
        );
        const twice = [...stored].filter(([, ids]) => ids.length > 1);
        assert.deepEqual(twice.slice(0, 5), [], `${label}: stored more than once`);
        assert.equal(stored.size, acknowledged.size, `${label}: nothing stored that was not acknowledged`);
      } finally {
        await direct.end();
      }
      // Re-sending everything acknowledged gives duplicates with the same uuids.
      const all = [...acknowledged.keys()];
      for (let i = 0; i < all.length; i += 500) {
        const events = all.slice(i, i + 500).map((externalId) => ({
          event_type: 'drill',
          action: 'sent',
          subject_type: 'user',
          subject_id: 'resend',
          external_id: externalId,
        }));
        const { outcome, uuids, statuses } = await send(events);
        assert.equal(outcome.status, 200, `${label}: re-send answered ${outcome.status} ${outcome.detail ?? ''}`);
        assert.ok(
          statuses!.every((s) => s === 'duplicate'),
          `${label}: re-sent events are duplicates`,
        );
        for (const [externalId, uuid] of uuids!)
          assert.equal(uuid, acknowledged.get(externalId), `${label}: same uuid for ${externalId}`);
      }
      console.log(
        `# ${label}: ${acknowledged.size} acknowledged events all stored once; re-sent → duplicates with the same uuids`,
      );
    }

    /**
     * When acknowledged events are missing, says where they are: for each node, whether it is in recovery,
     * its timeline, how many drill events it holds and how many of the missing ones; with the formation's
     * states and each node's state-machine transitions (pg_autoctl's log), so a failure in CI can be read.
     */
    async function explainMissing(label: string, missing: Array<[string, string]>, since: number) {
      const ids = missing.map(([externalId]) => externalId);
      const lines: string[] = [
        `# ${label}: ${missing.length} acknowledged events missing; first ${ids[0]}, last ${ids.at(-1)}`,
      ];
      for (const [name, port] of Object.entries(formation!.ports)) {
        const client = new pg.Client({
          host: '127.0.0.1',
          port,
          user: 'postgres',
          database: 'events',
          connectionTimeoutMillis: 3000,
        });
        try {
          await client.connect();
          const facts = await client.query<{ recovery: boolean; timeline: number; lsn: string }>(
            'SELECT pg_is_in_recovery() AS recovery, (SELECT timeline_id FROM pg_control_checkpoint()) AS timeline, ' +
              'CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text AS lsn',
          );
          const held = await client.query<{ total: string; missing: string }>(
            "SELECT count(*)::text AS total, count(*) FILTER (WHERE external_id = ANY($1))::text AS missing FROM events WHERE event_type = 'drill'",
            [ids],
          );
          const settings = await client.query<{ name: string; setting: string }>(
            "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_standby_names', 'synchronous_commit', 'default_transaction_read_only')",
          );
          lines.push(
            `# ${name} (port ${port}): ${JSON.stringify(facts.rows[0])}, drill events ${held.rows[0]!.total}, of the missing ${held.rows[0]!.missing}, ` +
              settings.rows.map((r) => `${r.name}=${JSON.stringify(r.setting)}`).join(' '),
          );
        } catch (error) {
          lines.push(`# ${name} (port ${port}): ${(error as Error).message}`);
        } finally {
          await client.end().catch(() => {});
        }
      }
      lines.push(`# states: ${JSON.stringify(await formation!.states().catch((e: Error) => e.message))}`);
      lines.push(
        `# the monitor's events since this phase's load began (times from then):\n${await formationEvents(new Date(since - 1000), since)}`,
      );
      for (const name of ['monitor', 'node1', 'node2']) {
        const transitions = formation!
          .log(name)
          .split('\n')
          .filter((line) =>
            /FSM transition|Transition complete|rewind|promot|demote|Setting goal state|synchronous_standby_names/i.test(
              line,
            ),
          );
        lines.push(`# ${name} log (state changes, last 60):\n${transitions.slice(-60).join('\n')}`);
      }
      console.log(lines.join('\n'));
    }

    /**
     * The live stream has every acknowledged event (or, given `prefix`, every one whose external_id starts with it:
     * a stream opened later), each once, with the uuid it was acknowledged with.
     */
    async function checkStream(label: string, prefix?: string) {
      const expected = new Map(
        [...acknowledged].filter(([externalId]) => prefix === undefined || externalId.startsWith(prefix)),
      );
      const seen = () => {
        const byExternalId = new Map<string, string[]>();
        for (const message of stream!.messages) {
          if (message.event !== 'event') continue;
          const event = JSON.parse(message.data) as { uuid: string; external_id: string };
          byExternalId.set(event.external_id, [...(byExternalId.get(event.external_id) ?? []), event.uuid]);
        }
        return byExternalId;
      };
      const deadline = Date.now() + 30_000;
      let byExternalId = seen();
      let missing = [...expected.keys()].filter((id) => !byExternalId.has(id));
      while (missing.length > 0 && Date.now() < deadline) {
        await sleep(500);
        byExternalId = seen();
        missing = [...expected.keys()].filter((id) => !byExternalId.has(id));
      }
      assert.deepEqual(
        missing.slice(0, 5),
        [],
        `${label}: ${missing.length} of ${expected.size} acknowledged events never reached the live stream (endings: ${stream!.endings.join('; ')})`,
      );
      const twice = [...byExternalId].filter(([, uuids]) => uuids.length > 1);
      assert.deepEqual(twice.slice(0, 5), [], `${label}: events streamed more than once`);
      for (const [externalId, uuid] of expected)
        assert.deepEqual(byExternalId.get(externalId), [uuid], `${label}: ${externalId} streamed with its uuid`);
      console.log(
        `# ${label}: the live stream delivered all ${expected.size} acknowledged events once each; ${stream!.reconnects} reconnect(s) with Last-Event-ID (${stream!.endings.join('; ') || 'none'})`,
      );
    }

    it('kill -9 of the primary node: only 503s until the standby takes writes, back within 15 s, nothing lost', async () => {
      await synchronous('kill', formation!.ports.node1);
      const run = await underLoad('kill', formation!.ports.node1, formation!.ports.node2, () =>
        formation!.killNode('node1'),
      );
      const premiseBroke = await madeAsynchronous('node1', run.loadStartedAt);
      if (premiseBroke.length > 0)
        console.log(`# kill: pg_auto_failover made node1 asynchronous during the phase:\n${premiseBroke.join('\n')}`);
      const failed = check('kill', run);
      assert.ok(failed > 0, 'the kill was felt (some 503s): otherwise the drill tested nothing');
      assert.ok(
        run.health.some((h) => h.readyz === 503),
        '/readyz said 503 during the failover',
      );
      await checkStored('kill', run.loadStartedAt);
      await checkStream('kill');
    });

    it('the old primary rejoins as a standby, then a planned switchover under load: same guarantees', async () => {
      const rejoinStarted = Date.now();
      formation!.runNode('node1');
      await formation!.waitFor(
        (s) =>
          s.some((n) => n.name === 'node1' && n.reported === 'secondary') &&
          s.some((n) => n.name === 'node2' && n.reported === 'primary'),
        'node1 secondary again',
        180_000,
      );
      console.log(`# node1 rejoined as secondary in ${Date.now() - rejoinStarted} ms`);
      // A switchover drilled while pg_auto_failover made its primary asynchronous (wait_primary: the monitor
      // thought the standby unhealthy) tests pg_auto_failover, not Inlet: commits acknowledged then are on the
      // old primary only, and a switchover promotes the standby without them (pg_auto_failover 2.0 goes ahead
      // while the old primary sits in wait_primary; CI saw 44,340 events lost so, stop 27). Such an attempt
      // checks what it can (nothing twice, every stored event with the uuid it was acknowledged with), says
      // what was lost and why, and the switchover is drilled again the other way, on a fresh live stream.
      const ports = formation!.ports;
      let primary: 'node1' | 'node2' = 'node2';
      let standby: 'node1' | 'node2' = 'node1';
      for (let attempt = 1; ; attempt++) {
        const label = attempt === 1 ? 'switchover' : `switchover${attempt}`;
        await synchronous(label, ports[primary]);
        const run = await underLoad(label, ports[primary], ports[standby], () => formation!.switchover());
        check(label, run);
        const premiseBroke = await madeAsynchronous(primary, run.loadStartedAt);
        if (premiseBroke.length === 0 || attempt === 3) {
          await checkStored(label, run.loadStartedAt);
          await checkStream(label, attempt === 1 ? undefined : `${label}-`);
          if (premiseBroke.length > 0)
            console.log(
              `# ${label}: pg_auto_failover made ${primary} asynchronous during this attempt too, and nothing was lost`,
            );
          return;
        }
        console.log(
          `# ${label}: pg_auto_failover made ${primary} asynchronous during the phase, so the drill's premise broke:\n${premiseBroke.join('\n')}`,
        );
        await checkStored(label, run.loadStartedAt, { lossExcused: true });
        stream?.close();
        stream = followStream(streamUrl, { authorization: `Bearer ${ADMIN_TOKEN}` }, { retryMs: 250 });
        await stream.opened();
        [primary, standby] = [standby, primary];
      }
    });
  },
);
