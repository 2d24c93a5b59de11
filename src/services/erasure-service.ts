// Erasure of a person (governance.md §3): suppression first, then deletion in small transactions, the
// `user.erased` message for destinations, and an audit record that holds an HMAC of the id, never the id.
//
// Suppression is checked on the ingest path against an in-memory set per product (HMACs of the
// suppressed ids), so a product without suppressions pays one Map lookup and a product with some pays
// one HMAC per id an item names. Correctness across instances (PostgreSQL) and processes (the CLI on
// SQLite): an instance uses its copy only while it is younger than INLET_SUPPRESSION_REFRESH_MS (R),
// counted from the moment the query that loaded it *started*; an older copy is checked against the
// database first (one cheap query for the whole instance, shared by the requests waiting on it). The
// erasure request answers 202 only R after its suppressions committed: by then every instance's copy
// was loaded after that commit, so from the answer on no instance stores an item of those ids. Items an
// instance accepted in between are deleted by the job, which starts after that window and also looks
// once more at the end.
import { createHmac, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Counter, Histogram } from 'prom-client';
import { AppError, validationError } from '../domain/errors.js';
import { checkExternalId } from '../domain/identity.js';
import { uuidv7 } from '../domain/ids.js';
import type { ErasureCounts, ErasureRecord, Storage, SuppressionRecord } from '../storage/types.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';
import type { RejectionService } from './rejection-service.js';
import { gentleBatches, gentleOptions } from './gentle-batches.js';

/** The HMAC key differs from the one the database's suppressions and audit records were made with. */
export class KeyChangedError extends Error {
  constructor() {
    super(
      'INLET_INSTALLATION_SECRET is not the key the stored suppressions and erasure audit records were made with ' +
        '(its fingerprint in table installation_secrets differs): erased people would be accepted again. Start with the ' +
        'previous secret (or unset it, if the key was the one Inlet generated). To change the key deliberately, knowing ' +
        'that every earlier suppression and audit HMAC stops matching, delete the row named hmac-fingerprint from ' +
        'installation_secrets first (docs/privacy.md).',
    );
    this.name = 'KeyChangedError';
  }
}

const LEASE_MS = 30_000;
/** Progress is saved (and the lease renewed) at most this often while batches run. */
const SAVE_EVERY_MS = 1000;
const SWEEP_EVERY_MS = 60_000;
const MAX_FAILURES = 5;

export interface ErasureOptions {
  installationSecret: string | undefined;
  refreshMs: number;
  pollMs: number;
  messageKeepDays: number;
  /** The instance's name in leases. */
  holder?: string;
}

/** The detail of a refusal: never the id (the rejection is recorded with this text and without the item). */
export const SUPPRESSED_DETAIL =
  "The item names a person whose data was erased at the product's request; items for them are refused until the suppression is lifted.";

export function suppressedError(): AppError {
  return new AppError('subject_suppressed', SUPPRESSED_DETAIL);
}

function erasureId(): string {
  return `era_${uuidv7().replace(/-/g, '')}`;
}

/** What an erasure error may say: no message of the database (it could quote an id). */
function safeError(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return `the job stopped on a storage error${typeof code === 'string' ? ` (${code})` : ''}; it is retried`;
}

export function createErasureService(
  storage: Storage,
  metrics: Metrics,
  rejections: RejectionService | undefined,
  options: ErasureOptions,
) {
  const store = storage.erasure;
  const holder = options.holder ?? `erasure-${randomBytes(6).toString('hex')}`;
  const deleted = new Counter({
    name: 'inlet_erasure_deleted_total',
    help: 'Rows deleted by erasure jobs, by kind (events, identifiers, merges, identity_messages, rejections, violations)',
    labelNames: ['kind'],
    registers: [metrics.registry],
  });
  const batchSeconds = new Histogram({
    name: 'inlet_erasure_batch_seconds',
    help: 'One delete batch of an erasure job (on SQLite, ingest waits behind it for as long as it lasts)',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [metrics.registry],
  });
  const phaseSeconds = new Counter({
    name: 'inlet_erasure_phase_seconds_total',
    help: 'Time erasure jobs spent in each phase (wait: the suppression window before the first delete; reclaim: the final WAL checkpoint or VACUUM; waiting_for_wal: within the others, batches waiting for the SQLite checkpoint thread)',
    labelNames: ['phase'],
    registers: [metrics.registry],
  });
  const suppressedItems = new Counter({
    name: 'inlet_suppressed_items_total',
    help: 'Items refused because they name an erased (suppressed) id',
    registers: [metrics.registry],
  });

  let secret: string | undefined = options.installationSecret;
  let secretLoading: Promise<string> | undefined;
  async function loadSecret(): Promise<string> {
    if (secret !== undefined) return secret;
    secretLoading ??= store.installationSecret(() => randomBytes(32).toString('base64url'));
    secret = await secretLoading;
    return secret;
  }
  function hmacWith(key: string, productId: string, externalId: string): string {
    return createHmac('sha256', key).update(`${productId}\u0000${externalId}`).digest('hex');
  }

  // The in-memory copy of the suppressions (see the header).
  let byProduct = new Map<string, Set<string>>();
  let marker: string | undefined;
  let loadedAt = -Infinity;
  let loading: Promise<void> | undefined;

  async function reload(): Promise<void> {
    const started = performance.now();
    await loadSecret();
    const current = await store.suppressionsMarker();
    if (current !== marker) {
      const next = new Map<string, Set<string>>();
      for (const row of await store.allSuppressions()) {
        let set = next.get(row.productId);
        if (set === undefined) next.set(row.productId, (set = new Set()));
        set.add(row.idHmac);
      }
      byProduct = next;
      marker = current;
    }
    loadedAt = started;
  }

  function fresh(): Promise<void> | undefined {
    if (performance.now() - loadedAt < options.refreshMs) return undefined;
    loading ??= reload().finally(() => {
      loading = undefined;
    });
    return loading;
  }

  /**
   * The check for one request: undefined when the product has no suppressions (the usual case: a Map
   * lookup), else a function telling whether any of an item's ids is suppressed (one HMAC per id).
   * The copy is refreshed first when too old.
   */
  async function suppressionCheck(productId: string): Promise<((ids: Iterable<string>) => boolean) | undefined> {
    const refreshing = fresh();
    if (refreshing !== undefined) await refreshing;
    const set = byProduct.get(productId);
    if (set === undefined || set.size === 0) return undefined;
    const key = secret!;
    return (ids) => {
      for (const id of ids) if (set.has(hmacWith(key, productId, id))) return true;
      return false;
    };
  }

  async function anySuppressed(productId: string, ids: Iterable<string>): Promise<boolean> {
    return (await suppressionCheck(productId))?.(ids) ?? false;
  }

  // The job runner.
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  let lastSweep = 0;
  const failures = new Map<string, number>();

  async function sweepMessages(productId: string): Promise<void> {
    const olderThan = new Date(Date.now() - options.messageKeepDays * 86_400_000).toISOString();
    if ((await store.sweepErasedMessages(productId, olderThan)) > 0) await store.reclaim('identity_messages');
  }

  /**
   * Runs one claimed job to its end (or until its lease is lost). Each phase can start over: deletes
   * are idempotent, and the counts saved after each batch are what was deleted so far.
   */
  async function runJob(job: ErasureRecord, onProgress?: (job: ErasureRecord) => void): Promise<ErasureRecord> {
    const record: ErasureRecord = { ...job, counts: { ...job.counts } };
    let savedAt = 0;
    const save = async () => {
      if (!(await store.save(record, holder, Date.now() + LEASE_MS))) throw new LeaseLost();
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
    const batches = gentleBatches(gentleOptions(storage.dialect), {
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
    // Instances may accept items for these ids until their copies are R old (see the header).
    const window = Date.parse(record.requestedAt) + options.refreshMs + 50 - Date.now();
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
      const olderThan = new Date(Date.now() - options.messageKeepDays * 86_400_000).toISOString();
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

  async function runClaimed(job: ErasureRecord, onProgress?: (job: ErasureRecord) => void): Promise<ErasureRecord> {
    const key = `${job.productId}/${job.id}`;
    try {
      const done = await runJob(job, onProgress);
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

  async function tick(): Promise<void> {
    for (;;) {
      if (stopped) return;
      const job = await store.claim(holder, Date.now(), LEASE_MS);
      if (job === undefined) break;
      const done = await runClaimed(job);
      if (done.status !== 'done') break;
    }
    if (Date.now() - lastSweep >= SWEEP_EVERY_MS) {
      lastSweep = Date.now();
      for (const product of await storage.products.list()) {
        if (stopped) return;
        await sweepMessages(product.id);
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
    hmac: async (productId: string, externalId: string) => hmacWith(await loadSecret(), productId, externalId),

    /**
     * Checks that the HMAC key is the one the stored suppressions and audit records were made with: a
     * changed or newly set INLET_INSTALLATION_SECRET would silently make every suppression unmatchable (the
     * erased ids accepted again). The database keeps a fingerprint of the key (an HMAC of a constant under
     * it, which tells nothing of the key); a different key is refused with KeyChangedError while anything
     * was keyed with the old one, and simply recorded while nothing was. Called at start (services.ts).
     */
    async verifyKey(): Promise<void> {
      const fingerprint = createHmac('sha256', await loadSecret())
        .update('inlet installation secret fingerprint v1')
        .digest('hex');
      const { stored } = await store.keyFingerprint(fingerprint);
      if (stored !== fingerprint) throw new KeyChangedError();
    },

    /**
     * Suppresses every id linked to the person and queues the job; answers once every instance refuses
     * those ids (R after the commit, see the header). An id that resolves to nobody is suppressed too.
     */
    async request(productId: string, externalId: string, reason: string | null): Promise<ErasureRecord> {
      const invalid = checkExternalId(externalId, '/external_id');
      if (invalid !== undefined) throw validationError([invalid]);
      if (reason !== null && reason.length > 500)
        throw validationError([{ pointer: '/reason', message: 'at most 500 characters' }]);
      const key = await loadSecret();
      const { record, externalIds } = await store.request({
        productId,
        erasureId: erasureId(),
        externalId,
        reason,
        requestedAt: new Date().toISOString(),
        hmac: (id) => hmacWith(key, productId, id),
        newSuppressionId: () => `sup_${uuidv7().replace(/-/g, '')}`,
        messageId: `idm_${uuidv7().replace(/-/g, '')}`,
      });
      // This instance refuses at once; the others once their copies are younger than the commit.
      let set = byProduct.get(productId);
      if (set === undefined) byProduct.set(productId, (set = new Set()));
      for (const id of externalIds) set.add(hmacWith(key, productId, id));
      await sleep(options.refreshMs);
      if (timer !== undefined && running === undefined) {
        clearTimeout(timer);
        schedule(0);
      }
      return record;
    },

    async get(productId: string, id: string): Promise<ErasureRecord> {
      const record = await store.get(productId, id);
      if (record === undefined) throw new AppError('not_found', `No erasure "${id}" in product "${productId}".`);
      return record;
    },

    /** Newest first; `externalId` narrows to the jobs of that id (found by its HMAC). */
    async list(
      productId: string,
      query: { beforeId?: string | undefined; limit: number; externalId?: string | undefined },
    ): Promise<ErasureRecord[]> {
      const idHmac =
        query.externalId === undefined ? undefined : hmacWith(await loadSecret(), productId, query.externalId);
      return store.list(productId, { beforeId: query.beforeId, limit: query.limit, idHmac });
    },

    async suppressions(
      productId: string,
      query: { beforeId?: string | undefined; limit: number; externalId?: string | undefined },
    ): Promise<SuppressionRecord[]> {
      const idHmac =
        query.externalId === undefined ? undefined : hmacWith(await loadSecret(), productId, query.externalId);
      return store.listSuppressions(productId, { beforeId: query.beforeId, limit: query.limit, idHmac });
    },

    async lift(productId: string, id: string): Promise<void> {
      if (!(await store.liftSuppression(productId, id)))
        throw new AppError('not_found', `No suppression "${id}" in product "${productId}".`);
      byProduct.get(productId)?.clear();
      loadedAt = -Infinity;
      marker = undefined;
    },

    /** True when an item naming these ids must be refused (`subject_suppressed`). */
    anySuppressed,
    suppressionCheck,

    /**
     * The identity routes: refuses (409 subject_suppressed) when an id is suppressed, recording the
     * rejection without the request body.
     */
    async refuseSuppressed(auth: AuthContext, ids: string[], route: string): Promise<void> {
      if (!(await anySuppressed(auth.productId, ids))) return;
      suppressedItems.inc();
      rejections?.record(
        auth,
        route,
        [
          {
            index: 0,
            messageId: null,
            code: 'subject_suppressed',
            detail: SUPPRESSED_DETAIL,
            severity: 'rejected',
            item: null,
          },
        ],
        new Date().toISOString(),
      );
      throw suppressedError();
    },

    /** Counts refused items (the accept pipeline refuses them). */
    countSuppressed(n: number): void {
      suppressedItems.inc(n);
    },

    /**
     * Runs one job in this process (the CLI's --wait), reporting progress; waits while another
     * instance holds it, then reads its outcome.
     */
    async runNow(productId: string, id: string, onProgress?: (job: ErasureRecord) => void): Promise<ErasureRecord> {
      for (;;) {
        const job = await store.claim(holder, Date.now(), LEASE_MS, { productId, id });
        if (job !== undefined) {
          const done = await runClaimed(job, onProgress);
          if (done.status === 'done' || done.status === 'failed') return done;
          await sleep(options.pollMs);
          continue;
        }
        const current = await store.get(productId, id);
        if (current === undefined) throw new AppError('not_found', `No erasure "${id}" in product "${productId}".`);
        onProgress?.(current);
        if (current.status === 'done' || current.status === 'failed') return current;
        await sleep(options.pollMs);
      }
    },

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

class LeaseLost extends Error {
  constructor() {
    super('another instance took over the erasure job');
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export type ErasureService = ReturnType<typeof createErasureService>;
