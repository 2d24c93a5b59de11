// The checkpoint advice (services/postgres-checkpoints.ts): when PostgreSQL keeps checkpointing because its WAL
// reaches max_wal_size, Inlet says so in its log, at most once an hour, and never on counters that went back (a
// failover to another server). The real server's counters are read in test/pool-metrics.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import {
  checkpointAdvice,
  createCheckpointWatch,
  registerWalMetrics,
} from '../../src/services/postgres-checkpoints.js';
import type { PostgresWalStats } from '../../src/storage/types.js';

const base: PostgresWalStats = {
  server: '10.0.0.5:5432',
  timedCheckpoints: 10,
  requestedCheckpoints: 4,
  walBytes: 50 * 1024 ** 3,
  walFullPageImages: 1_000_000,
  maxWalSize: '1GB',
  checkpointTimeout: '5min',
};
const FIVE_MIN = 5 * 60_000;

describe('checkpoint advice', () => {
  it('none for checkpoints by time, or a single requested one (a manual CHECKPOINT, a base backup)', () => {
    assert.equal(checkpointAdvice(base, { ...base, timedCheckpoints: 11 }, FIVE_MIN), undefined);
    assert.equal(checkpointAdvice(base, { ...base, requestedCheckpoints: 5 }, FIVE_MIN), undefined);
  });

  it('two or more requested: names the counts, the WAL written, max_wal_size and where the docs say what to do', () => {
    const after = {
      ...base,
      requestedCheckpoints: 16,
      walBytes: base.walBytes! + 12 * 1024 ** 3,
      walFullPageImages: 2_500_000,
    };
    const advice = checkpointAdvice(base, after, FIVE_MIN)!;
    assert.ok(advice !== undefined);
    assert.match(
      advice.message,
      /^PostgreSQL made 12 requested checkpoints in the last 5 min, against 0 by checkpoint_timeout \(5min\)/,
    );
    assert.match(advice.message, /it wrote 12\.0 GB of WAL meanwhile, with 1,500,000 whole pages in it/);
    assert.match(advice.message, /max_wal_size \(1GB\)/);
    assert.match(advice.message, /docs\/scaling-out\.md, "PostgreSQL settings for sustained ingest"/);
    assert.deepEqual(advice.details, {
      requestedCheckpoints: 12,
      timedCheckpoints: 0,
      minutes: 5,
      maxWalSize: '1GB',
      checkpointTimeout: '5min',
      walBytes: 12 * 1024 ** 3,
      walFullPageImages: 1_500_000,
    });
  });

  it('without pg_stat_wal (PostgreSQL 13): the advice without the WAL figures', () => {
    const { walBytes: _b, walFullPageImages: _f, ...old } = base;
    const advice = checkpointAdvice(old, { ...old, requestedCheckpoints: 7 }, FIVE_MIN)!;
    assert.doesNotMatch(advice.message, /wrote/);
    assert.equal(advice.details.walBytes, undefined);
  });

  it("none when the counters are another server's (after a failover) or went back (a statistics reset)", () => {
    assert.equal(
      checkpointAdvice(base, { ...base, server: '10.0.0.6:5432', requestedCheckpoints: 90 }, FIVE_MIN),
      undefined,
    );
    assert.equal(
      checkpointAdvice(base, { ...base, timedCheckpoints: 0, requestedCheckpoints: 9 }, FIVE_MIN),
      undefined,
    );
    assert.equal(checkpointAdvice(base, { ...base, requestedCheckpoints: 1 }, FIVE_MIN), undefined);
  });
});

describe('checkpoint watch', () => {
  function watched(reads: Array<PostgresWalStats | Error>) {
    let clock = 0;
    const warnings: string[] = [];
    const watch = createCheckpointWatch(
      async () => {
        const next = reads.shift()!;
        if (next instanceof Error) throw next;
        return next;
      },
      { intervalMs: 0, now: () => clock },
    );
    watch.start({ warn: (_details, message) => warnings.push(message) });
    return {
      warnings,
      async at(ms: number) {
        clock = ms;
        await watch.check();
      },
    };
  }

  it('the first read is the baseline; then at most one warning an hour; a failed read is skipped, the next compares from the last good one', async () => {
    const step = (requested: number) => ({ ...base, requestedCheckpoints: requested });
    const w = watched([step(100), step(110), step(120), new Error('the primary is away'), step(130)]);
    await w.at(0); // baseline, even though the server made many checkpoints before
    assert.equal(w.warnings.length, 0);
    await w.at(FIVE_MIN);
    assert.equal(w.warnings.length, 1);
    assert.match(w.warnings[0]!, /made 10 requested checkpoints in the last 5 min/);
    await w.at(2 * FIVE_MIN); // within the hour: quiet
    await w.at(3 * FIVE_MIN); // the read fails: nothing, and no crash
    assert.equal(w.warnings.length, 1);
    await w.at(60 * 60_000 + FIVE_MIN); // an hour after the first warning, compared with the last good read (120, 55 min before)
    assert.equal(w.warnings.length, 2);
    assert.match(w.warnings[1]!, /made 10 requested checkpoints in the last 55 min/);
  });
});

describe('checkpoint and WAL counters', () => {
  it('one read per scrape for the three; no samples when the read fails', async () => {
    let reads = 0;
    const registry = new Registry();
    registerWalMetrics(registry, async () => (reads++, base));
    const text = await registry.metrics();
    assert.equal(reads, 1);
    assert.match(text, /^inlet_postgres_checkpoints_total\{server="10.0.0.5:5432",kind="timed"\} 10$/m);
    assert.match(text, /^inlet_postgres_checkpoints_total\{server="10.0.0.5:5432",kind="requested"\} 4$/m);
    assert.match(
      text,
      new RegExp(`^inlet_postgres_wal_bytes_total\\{server="10.0.0.5:5432"\\} ${50 * 1024 ** 3}$`, 'm'),
    );
    assert.match(text, /^inlet_postgres_wal_full_page_images_total\{server="10.0.0.5:5432"\} 1000000$/m);

    const failing = new Registry();
    registerWalMetrics(failing, async () => {
      throw new Error('connection refused');
    });
    const none = await failing.metrics();
    assert.doesNotMatch(none, /^inlet_postgres_(checkpoints|wal_bytes|wal_full_page_images)_total[{ ]/m);
  });
});
