// The replication gauges (services/pool-metrics.ts): whether this process's commits wait for a standby, and the
// standbys by sync_state, from the status the storage reports (PostgreSQL; docs/scaling-out.md). The real query
// runs in test/pool-metrics.test.ts (no standby) and in the failover drill (a synchronous one).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { registerReplicationMetrics } from '../../src/services/pool-metrics.js';
import type { ReplicationStatus } from '../../src/storage/types.js';

async function scrape(status: () => Promise<ReplicationStatus>): Promise<string> {
  const registry = new Registry();
  registerReplicationMetrics(registry, status);
  return registry.metrics();
}

describe('replication gauges', () => {
  it('1 only with synchronous_standby_names set and a synchronous_commit that waits for a standby', async () => {
    const cases: Array<[string, string, 0 | 1]> = [
      ['ANY 1 (pgautofailover_standby_2)', 'on', 1],
      ['ANY 1 (pgautofailover_standby_2)', 'remote_apply', 1],
      ['ANY 1 (pgautofailover_standby_2)', 'remote_write', 1],
      ['ANY 1 (pgautofailover_standby_2)', 'local', 0],
      ['ANY 1 (pgautofailover_standby_2)', 'off', 0],
      ['', 'on', 0],
      ['  ', 'on', 0],
    ];
    for (const [names, commit, expected] of cases) {
      const text = await scrape(async () => ({
        synchronousStandbyNames: names,
        synchronousCommit: commit,
        standbys: [],
      }));
      const line = `inlet_postgres_synchronous_commit{synchronous_standby_names=${JSON.stringify(names)},synchronous_commit="${commit}"} ${expected}`;
      assert.ok(text.split('\n').includes(line), `${line} in:\n${text}`);
    }
  });

  it('counts the standbys by sync_state, unknown where the role may not see it; one status read per scrape', async () => {
    let reads = 0;
    const text = await scrape(
      async () => (
        reads++,
        {
          synchronousStandbyNames: 'ANY 1 (a, b)',
          synchronousCommit: 'on',
          standbys: [{ syncState: 'quorum' }, { syncState: 'quorum' }, { syncState: 'async' }, { syncState: null }],
        }
      ),
    );
    assert.match(text, /^inlet_postgres_standbys\{sync_state="quorum"\} 2$/m);
    assert.match(text, /^inlet_postgres_standbys\{sync_state="async"\} 1$/m);
    assert.match(text, /^inlet_postgres_standbys\{sync_state="unknown"\} 1$/m);
    assert.match(text, /^inlet_postgres_standbys\{sync_state="sync"\} 0$/m);
    assert.equal(reads, 1, 'both gauges from one read');
  });

  it('no sample while no primary answers (a failed or slow status), rather than a wrong one', async () => {
    const failed = await scrape(async () => {
      throw new Error('connect ECONNREFUSED');
    });
    assert.doesNotMatch(failed, /^inlet_postgres_synchronous_commit\{/m);
    assert.doesNotMatch(failed, /^inlet_postgres_standbys\{/m);
    const started = Date.now();
    const slow = await scrape(() => new Promise<ReplicationStatus>(() => {}));
    assert.ok(Date.now() - started < 3000, 'the scrape did not wait for the status');
    assert.doesNotMatch(slow, /^inlet_postgres_synchronous_commit\{/m);
  });
});
