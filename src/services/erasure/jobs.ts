// The erasure job runner (governance.md §3): deletion in small transactions, paced so that ingest keeps going
// (gentle-batches.ts), with progress saved under a lease so that another instance takes over a job whose
// instance died. The job starts only once every instance refuses the person's ids (suppression.ts), and
// looks once more at the end for items an instance stored while its copy of the suppressions was older.
import { performance } from 'node:perf_hooks';
import { Counter, Histogram } from 'prom-client';
import { AppError } from '../../domain/errors.js';
import type { ErasureCounts, ErasureRecord, Storage } from '../../storage/types.js';
import { gentleBatches } from '../gentle-batches.js';
import type { Metrics } from '../metrics.js';

const LEASE_MS = 30_000;
/** Progress is saved (and the lease renewed) at most this often while batches run. */
const SAVE_EVERY_MS = 1000;
const SWEEP_EVERY_MS = 60_000;
const MAX_FAILURES = 5;

export interface ErasureJobOptions {
  storage: Storage;
  metrics: Metrics;
  /** The instance's name in leases. */
  holder: string;
  refreshMs: number;
  pollMs: number;
  messageKeepDays: number;
}

interface JobMetrics {
  deleted: Counter<'kind'>;
  batchSeconds: Histogram;
  phaseSeconds: Counter<'phase'>;
}

interface Jobs extends ErasureJobOptions, JobMetrics {
  /** Failed runs per job (`product/id`) in this instance: the job fails for good after MAX_FAILURES. */
  failures: Map<string, number>;
}

type Progress = (job: ErasureRecord) => void;

class LeaseLost extends Error {
  constructor() {
    super('another instance took over the erasure job');
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** What an erasure error may say: no message of the database (it could quote an id). */
function safeError(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return `the job stopped on a storage error${typeof code === 'string' ? ` (${code})` : ''}; it is retried`;
}

function jobMetrics(metrics: Metrics): JobMetrics {
  return {
    deleted: new Counter({
      name: 'inlet_erasure_deleted_total',
      help: 'Rows deleted by erasure jobs, by kind (events, identifiers, merges, identity_messages, rejections, violations)',
      labelNames: ['kind'],
      registers: [metrics.registry],
    }),
    batchSeconds: new Histogram({
      name: 'inlet_erasure_batch_seconds',
      help: 'One delete batch of an erasure job (on SQLite, ingest waits behind it for as long as it lasts)',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [metrics.registry],
    }),
    phaseSeconds: new Counter({
      name: 'inlet_erasure_phase_seconds_total',
      help: 'Time erasure jobs spent in each phase (wait: the suppression window before the first delete; reclaim: the final WAL checkpoint or VACUUM; waiting_for_wal: within the others, batches waiting for the SQLite checkpoint thread)',
      labelNames: ['phase'],
      registers: [metrics.registry],
    }),
  };
}

export function createErasureJobs(options: ErasureJobOptions) {
  const jobs: Jobs = { ...options, ...jobMetrics(options.metrics), failures: new Map() };
  const store = options.storage.erasure;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  let lastSweep = 0;

  async function tick(): Promise<void> {
    for (;;) {
      if (stopped) return;
      const job = await store.claim(options.holder, LEASE_MS);
      if (job === undefined) break;
      const done = await runClaimed(jobs, job);
      if (done.status !== 'done') break;
    }
    if (Date.now() - lastSweep >= SWEEP_EVERY_MS) {
      lastSweep = Date.now();
      for (const product of await options.storage.products.list()) {
        if (stopped) return;
        await sweepMessages(jobs, product.id);
      }
    }
  }

  function schedule(delay: number): void {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick()
        .catch(() => {})
        .finally(() => {
          running = undefined;
          schedule(options.pollMs);
        });
    }, delay);
    timer.unref();
  }

  return {
    /** A job was queued: the runner, when started and idle, looks at once. */
    wake(): void {
      if (timer !== undefined && running === undefined) {
        clearTimeout(timer);
        schedule(0);
      }
    },
    runNow: (productId: string, id: string, onProgress?: Progress) => runNow(jobs, productId, id, onProgress),
    /** Starts the runner: pending jobs, and jobs whose instance died (their lease expired). */
    start(): void {
      stopped = false;
      schedule(0);
    },
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}

async function sweepMessages({ storage, messageKeepDays }: Jobs, productId: string): Promise<void> {
  const store = storage.erasure;
  const olderThan = new Date(Date.now() - messageKeepDays * 86_400_000).toISOString();
  if ((await store.sweepErasedMessages(productId, olderThan)) > 0) await store.reclaim('identity_messages');
}

/**
 * Runs one job in this process (the CLI's --wait), reporting progress; waits while another
 * instance holds it, then reads its outcome.
 */
async function runNow(jobs: Jobs, productId: string, id: string, onProgress?: Progress): Promise<ErasureRecord> {
  const store = jobs.storage.erasure;
  for (;;) {
    const job = await store.claim(jobs.holder, LEASE_MS, { productId, id });
    if (job !== undefined) {
      const done = await runClaimed(jobs, job, onProgress);
      if (done.status === 'done' || done.status === 'failed') return done;
      await sleep(jobs.pollMs);
      continue;
    }
    const current = await store.get(productId, id);
    if (current === undefined) throw new AppError('not_found', `No erasure "${id}" in product "${productId}".`);
    onProgress?.(current);
    if (current.status === 'done' || current.status === 'failed') return current;
    await sleep(jobs.pollMs);
  }
}

async function runClaimed(jobs: Jobs, job: ErasureRecord, onProgress?: Progress): Promise<ErasureRecord> {
  const { failures, holder } = jobs;
  const store = jobs.storage.erasure;
  const key = `${job.productId}/${job.id}`;
  try {
    const done = await runJob(jobs, job, onProgress);
    failures.delete(key);
    return done;
  } catch (error) {
    if (error instanceof LeaseLost) return (await store.get(job.productId, job.id)) ?? job;
    const count = (failures.get(key) ?? 0) + 1;
    failures.set(key, count);
    const current = (await store.get(job.productId, job.id).catch(() => undefined)) ?? job;
    const failed: ErasureRecord = {
      ...current,
      error: safeError(error),
      ...(count >= MAX_FAILURES ? { status: 'failed' as const, finishedAt: new Date().toISOString() } : {}),
    };
    await store.save(failed, holder, 0).catch(() => {});
    return failed;
  } finally {
    await store.release(job.productId, job.id, holder).catch(() => {});
  }
}

/**
 * Runs one claimed job to its end (or until its lease is lost). Each phase can start over: deletes
 * are idempotent, and the counts saved after each batch are what was deleted so far.
 */
async function runJob(jobs: Jobs, job: ErasureRecord, onProgress?: Progress): Promise<ErasureRecord> {
  const { storage, holder, phaseSeconds, batchSeconds, deleted } = jobs;
  const store = storage.erasure;
  const record: ErasureRecord = { ...job, counts: { ...job.counts } };
  let savedAt = 0;
  const save = async () => {
    if (!(await store.save(record, holder, LEASE_MS))) throw new LeaseLost();
    savedAt = Date.now();
    onProgress?.({ ...record, counts: { ...record.counts } });
  };
  // Between batches: saved about once a second (each save is a commit of its own); a crash forgets
  // at most that second's counts, never a deleted row's deletion.
  const saveSometimes = async () => {
    if (Date.now() - savedAt >= SAVE_EVERY_MS) await save();
  };
  const roomToWrite = async () => {
    const started = performance.now();
    await store.roomToWrite();
    phaseSeconds.inc({ phase: 'waiting_for_wal' }, (performance.now() - started) / 1000);
  };
  const batches = gentleBatches(storage.capabilities.deletePacing, {
    before: roomToWrite,
    onBatch: (seconds) => batchSeconds.observe(seconds),
  });
  let phaseStarted = performance.now();
  const phaseDone = (phase: string) => {
    const now = performance.now();
    phaseSeconds.inc({ phase }, (now - phaseStarted) / 1000);
    phaseStarted = now;
  };
  const add = (counts: Partial<ErasureCounts>) => {
    for (const [kind, n] of Object.entries(counts) as Array<[keyof ErasureCounts, number]>) {
      record.counts[kind] += n;
      if (kind !== 'ids' && n > 0) deleted.inc({ kind }, n);
    }
  };
  // Instances may accept items for these ids until their copies are R old (suppression.ts).
  const window = Date.parse(record.requestedAt) + jobs.refreshMs + 50 - Date.now();
  if (window > 0) await sleep(window);
  phaseDone('wait');
  if (record.status === 'pending') {
    record.status = 'running';
    record.startedAt = new Date().toISOString();
    await save();
  }
  const targets = await store.targets(record.productId, record.id);
  if (record.phase === 'events') {
    for (;;) {
      const size = batches.size;
      const n = await batches.run((limit) => store.deleteEvents(record.productId, targets.externalIds, limit));
      add({ events: n });
      if (n < size) break;
      await saveSometimes();
    }
    record.phase = 'identity';
    await save();
    phaseDone('events');
  }
  if (record.phase === 'identity') {
    add(await store.deleteIdentity(record.productId, targets));
    record.phase = 'records';
    await save();
    phaseDone('identity');
  }
  if (record.phase === 'records') {
    for (;;) {
      const n = await batches.run((limit) => store.deleteRecords(record.productId, targets.externalIds, limit));
      add(n);
      if (n.rejections === 0 && n.violations === 0) break;
      await saveSometimes();
    }
    record.phase = 'finish';
    await save();
    phaseDone('records');
  }
  if (record.phase === 'finish') {
    // A last look for items an instance stored while its copy of the suppressions was older.
    for (;;) {
      const size = batches.size;
      const n = await batches.run((limit) => store.deleteEvents(record.productId, targets.externalIds, limit));
      add({ events: n });
      if (n < size) break;
    }
    await store.deleteTargets(record.productId, record.id);
    const olderThan = new Date(Date.now() - jobs.messageKeepDays * 86_400_000).toISOString();
    await store.sweepErasedMessages(record.productId, olderThan);
    phaseDone('finish');
    await store.reclaim();
    phaseDone('reclaim');
    record.phase = 'done';
    record.status = 'done';
    record.finishedAt = new Date().toISOString();
    record.error = null;
    await save();
  }
  return record;
}
