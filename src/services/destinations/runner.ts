// The passes that share the destinations out between instances (events-out §6): one deliverer across
// instances per destination, by a lease on its row (storage/destinations/state.ts). Every instance makes a pass every
// `pollMs`: it takes or renews the leases it can and runs a delivery loop (deliverer.ts) for each destination
// it holds. A lease lasts `leaseMs` (15 s by default) and is renewed well before it ends, so when its instance
// dies another takes over within leaseMs + pollMs.
import type { DestinationStore } from '../../storage/types.js';
import type { DeliveryRun } from './deliverer.js';
import type { DestinationDriver } from './kind.js';

export interface RunnerOptions {
  store: DestinationStore;
  /** Shared with the deliverers: the runner sets `stopped` and `shared`, and aborts at close. */
  run: DeliveryRun;
  /** One destination's delivery loop, until it is idle or no longer ours. */
  loop(id: string): Promise<void>;
  /** Every type's driver: each lets go of what it keeps for destinations gone, and closes with the runner. */
  drivers: readonly DestinationDriver[];
  /** Lets go of what is kept for destinations not held here (their prepared transformation). */
  release?(held: ReadonlySet<string>): void;
  holder: string;
  now: () => number;
  pollMs: number;
  leaseMs: number;
  logRetentionMs: number;
}

interface Runner extends RunnerOptions {
  loops: Map<string, Promise<void>>;
  /** The destinations whose lease this instance holds. */
  held: Set<string>;
  lastPrune: number;
}

export function createDeliveryRunner(options: RunnerOptions) {
  const runner: Runner = { ...options, loops: new Map(), held: new Set(), lastPrune: 0 };
  let timer: NodeJS.Timeout | undefined;
  let passing: Promise<void> | undefined;
  let running = false;

  function schedule(delay: number): void {
    if (runner.run.stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      passing = tick(runner)
        .catch(() => {})
        .finally(() => {
          passing = undefined;
          if (timer === undefined) schedule(options.pollMs);
        });
    }, delay);
    timer.unref();
  }

  return {
    /** One pass: take or renew leases and start a delivery loop for each destination held. */
    tick: () => tick(runner),
    /** Asks for a pass soon (after an admin change), once started. */
    poke(): void {
      if (running && !runner.run.stopped) schedule(0);
    },
    /** Starts the periodic passes. */
    start(): void {
      running = true;
      schedule(0);
    },
    /** Waits for the delivery loops now running (tests). */
    async idle(): Promise<void> {
      while (runner.loops.size > 0) await Promise.all([...runner.loops.values()]);
    },
    /** Stops the passes and the loops (a send in flight is abandoned), releases the leases, closes the drivers. */
    async close(): Promise<void> {
      runner.run.stopped = true;
      clearTimeout(timer);
      runner.run.abort.abort();
      await passing;
      await Promise.all([...runner.loops.values()]);
      for (const id of runner.held) await runner.store.releaseLease(id, runner.holder).catch(() => {});
      for (const driver of runner.drivers) await driver.close();
    },
  };
}

async function tick(x: Runner): Promise<void> {
  if (x.run.stopped) return;
  const now = x.now();
  // Leases are judged on the database's clock (an instance's own may be off): read once a pass.
  const databaseNow = await x.store.databaseNow();
  x.run.clockOffset = databaseNow - now;
  const all = await x.store.listAll();
  const present = new Set(all.map((d) => d.id));
  for (const id of x.held) if (!present.has(id)) x.held.delete(id);
  // Products with several active destinations share their page reads.
  const perProduct = new Map<string, number>();
  for (const d of all) if (d.status === 'active') perProduct.set(d.productId, (perProduct.get(d.productId) ?? 0) + 1);
  x.run.shared.clear();
  for (const [productId, n] of perProduct) if (n > 1) x.run.shared.add(productId);
  for (const driver of x.drivers) await driver.prune(present, x.held);
  x.release?.(x.held);
  for (const d of all) {
    if (d.status !== 'active') {
      if (d.leaseHolder === x.holder) {
        await x.store.releaseLease(d.id, x.holder);
        x.held.delete(d.id);
      }
      continue;
    }
    const fresh = d.leaseHolder === x.holder && d.leaseUntil - databaseNow > (x.leaseMs * 2) / 3;
    // Ours already: a delivery worker restarted after a crash goes on under its predecessor's name.
    if (fresh) x.held.add(d.id);
    else {
      const taken = await x.store.acquireLease(d.id, x.holder, x.leaseMs);
      // Its row stayed locked (a holder stopped inside its state write): nothing known, tried next pass.
      if (taken === undefined) continue;
      if (taken) x.held.add(d.id);
      else {
        x.held.delete(d.id);
        continue;
      }
    }
    if (!x.loops.has(d.id)) {
      const loop = x
        .loop(d.id)
        .catch(() => {})
        .finally(() => x.loops.delete(d.id));
      x.loops.set(d.id, loop);
    }
  }
  if (now - x.lastPrune > 3_600_000) {
    x.lastPrune = now;
    await x.store.pruneDeliveries(new Date(now - x.logRetentionMs).toISOString()).catch(() => {});
  }
}
