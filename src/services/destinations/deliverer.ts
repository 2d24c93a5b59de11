// One destination's delivery (events-out §6), whatever its type: at least once, in position order, never
// skipping a message. A loop of cycles while this instance holds the destination's lease (runner.ts): each
// cycle reads the messages after the cursor, skips those the filter does not want (and those the destination's
// own transformation drops or fails on: transformation.ts), hands the rest to the type's
// driver (kind.ts), and moves the cursor only past what the receiver accepted, in the same fenced write that
// records the attempts. A crash at any point re-delivers from the stored cursor with the same message ids.
// A failure holds the destination back until its next attempt (retries.ts).
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type {
  DeliveryRecord,
  DestinationCursor,
  DestinationRecord,
  DestinationStore,
  DestinationType,
  StoredMessage,
} from '../../storage/types.js';
import type { DeliveryContext, DestinationDriver, SendOutcome } from './kind.js';
import { matches, webhookIdOf } from './messages.js';
import type { DeliveryMetrics } from './metrics.js';
import type { PageReader } from './pages.js';
import { stateAfter } from './retries.js';
import { TransformationUnavailable, type DestinationTransformer } from './transformation.js';

/** Messages read per page while looking for a batch. */
const READ_PAGE = 500;
/** Messages sent per delivery cycle at most (one read, one state commit); batching types: whole batches. */
const CYCLE_MESSAGES = 1000;

/** What the passes (runner.ts) share with the deliverers. */
export interface DeliveryRun {
  /** Set at close: no cycle starts, and sends in flight are abandoned (`abort`). */
  stopped: boolean;
  abort: AbortController;
  /** Products with several active destinations: their page reads are shared (pages.ts). */
  shared: Set<string>;
  /**
   * The database's clock less this instance's (`now`), as the runner's last pass read it: leases end on the
   * database's clock (storage/destinations/rows.ts).
   */
  clockOffset: number;
}

export interface DelivererOptions {
  store: DestinationStore;
  pages: PageReader;
  drivers: Readonly<Record<DestinationType, DestinationDriver>>;
  report: DeliveryMetrics;
  /** Each destination's own steps (transformation.ts), applied as its messages are read. */
  transform: DestinationTransformer;
  run: DeliveryRun;
  /** This instance's name in leases. */
  holder: string;
  now: () => number;
  random: () => number;
  leaseMs: number;
  disableAfterMs: number;
  /** How often the passes come (runner.ts): a held batch due sooner is waited for in the loop. */
  pollMs: number;
}

interface Deliverer extends DelivererOptions {
  /** Per destination: the last partial batch, held back for max_wait_ms (handedOver). */
  held: Map<string, Held>;
  /** Per destination: how long its last delivery took per message (ms), to start a held batch in time. */
  msPerMessage: Map<string, number>;
}

/**
 * A partial batch waiting for max_wait_ms, with the read that found it: the next cycle from the same cursor (and
 * the same filter and transformation, whose result the held messages are) reads only what came after it instead
 * of reading the whole batch again.
 */
interface Held {
  from: DestinationCursor;
  /** The filter and transformation the held messages were read with (heldKey). */
  key: string;
  wanted: Wanted;
  /** When it is handed over at the latest (ms): max_wait_ms after its oldest message, less the expected write. */
  due: number;
}

/** A cycle accepted in full whose state write may still be running (deliverLoop). */
interface Carried {
  cursor: DestinationCursor;
  /** Resolves true once written, false when not (lease lost, cursor moved by a replay, a storage error). */
  write: Promise<boolean>;
  /** Set when `write` settled. */
  written?: boolean;
}

export function createDeliverer(options: DelivererOptions): { loop(id: string): Promise<void> } {
  const deliverer: Deliverer = { ...options, held: new Map(), msPerMessage: new Map() };
  return { loop: (id) => deliverLoop(deliverer, id) };
}

/** Delivers until the destination is idle, must wait (retry, max_wait_ms), or is no longer ours. */
async function deliverLoop(x: Deliverer, id: string): Promise<void> {
  // The state write of the previous cycle, when it succeeded in full, still running: the next cycle starts from
  // its cursor meanwhile, and writes its own state only after it landed (see `cycle`).
  let carried: Carried | undefined;
  let waited = false;
  try {
    while (!x.run.stopped) {
      const stored = await x.store.getById(id);
      if (
        stored === undefined ||
        stored.status !== 'active' ||
        stored.leaseHolder !== x.holder ||
        stored.leaseUntil < x.now() + x.run.clockOffset
      ) {
        x.held.delete(id);
        return;
      }
      if (carried?.written === false) return; // lease lost or cursor moved by a replay: the next pass starts afresh
      if (carried === undefined && stored.nextAttemptAt !== null && stored.nextAttemptAt > x.now()) return;
      // The carried cycle was a success: no failures, no retry waiting, the cursor after it.
      const d =
        carried === undefined
          ? stored
          : { ...stored, cursor: carried.cursor, consecutiveFailures: 0, failingSince: null, nextAttemptAt: null };
      const next = await cycle(x, d, carried);
      if (next === false) {
        // A held batch due before the next pass: waited for here, so that it goes on time.
        const wait = (x.held.get(id)?.due ?? Infinity) - x.now();
        if (waited || wait >= x.pollMs || x.run.stopped) return;
        waited = true;
        await sleep(Math.max(0, wait), undefined, { signal: x.run.abort.signal }).catch(() => {});
        carried = undefined;
        continue;
      }
      // One write at most outstanding when the next cycle starts (the one just chained after it): the stored
      // cursor is never more than a cycle behind what the receiver accepted.
      if (next !== true && carried !== undefined) await carried.write;
      carried = next === true ? undefined : next;
    }
  } finally {
    await carried?.write;
  }
}

/** The wanted messages after the destination's cursor (up to `limit`), and where the read ended. */
interface Wanted {
  messages: StoredMessage[];
  /** The cursor just after messages[i] (and the unwanted messages before it). */
  afterEach: DestinationCursor[];
  /** After everything read, unwanted messages at the end included. */
  cursor: DestinationCursor;
  moved: boolean;
  /** Nothing more to read now. */
  exhausted: boolean;
}

async function readWanted(x: Deliverer, d: DestinationRecord, limit: number): Promise<Wanted> {
  const held = x.held.get(d.id);
  x.held.delete(d.id);
  const resumed =
    held !== undefined && sameCursor(held.from, d.cursor) && held.key === heldKey(d) ? held.wanted : undefined;
  const wanted: Wanted = resumed ?? { messages: [], afterEach: [], cursor: d.cursor, moved: false, exhausted: false };
  wanted.exhausted = false;
  const unfiltered =
    d.filter.types === undefined && d.filter.canonicalNames === undefined && d.filter.sources === undefined;
  read: while (wanted.messages.length < limit) {
    const pageSize = unfiltered ? limit - wanted.messages.length : Math.max(READ_PAGE, limit);
    const page = await x.pages.read(d.productId, wanted.cursor, pageSize, x.run.shared.has(d.productId));
    let from = 0;
    while (from < page.length) {
      // The run of the page up to the message the filter wants that no longer fits (page[to], when to < length).
      const room = limit - wanted.messages.length;
      const chosen: StoredMessage[] = [];
      let to = from;
      for (; to < page.length; to++) {
        if (!matches(d.filter, page[to]!)) continue;
        if (chosen.length === room) break;
        chosen.push(page[to]!);
      }
      // The destination's own steps: a message they drop, or that fails them, is passed like an unwanted one.
      const outcomes = d.transformation === null ? undefined : await x.transform.apply(d, chosen);
      let k = 0;
      for (let i = from; i < to; i++) {
        const message = page[i]!;
        wanted.cursor =
          message.kind === 'event'
            ? { event: message.position, identity: wanted.cursor.identity }
            : { event: wanted.cursor.event, identity: message.position };
        wanted.moved = true;
        if (chosen[k] !== message) continue;
        const outcome = outcomes?.[k];
        k++;
        if (outcome !== undefined && !('message' in outcome)) continue;
        wanted.messages.push(outcome === undefined ? message : outcome.message);
        wanted.afterEach.push(wanted.cursor);
      }
      from = to;
      if (to < page.length && wanted.messages.length === limit) break read;
    }
    if (page.length < pageSize) {
      wanted.exhausted = true;
      break;
    }
  }
  return wanted;
}

const heldKey = (d: DestinationRecord) => JSON.stringify([d.filter, d.transformation]);

const sameCursor = (a: DestinationCursor, b: DestinationCursor) => a.event === b.event && a.identity === b.identity;

/** When a message was received (events) or made (identity messages), in ms; NaN when unknown. */
const receivedAt = (message: StoredMessage) =>
  Date.parse(message.kind === 'event' ? message.event.receivedAt : message.createdAt);

/**
 * How many wanted messages go now: all, or for a type with batches all but a last partial batch, which waits
 * (only when nothing more is there yet) until max_wait_ms after its oldest message was received, less the time
 * the last delivery took for as many messages (at most half the wait), so that it has arrived by then.
 */
function handedOver(x: Deliverer, d: DestinationRecord, wanted: Wanted, batchSize: number | undefined): number {
  const count = wanted.messages.length;
  const partial = batchSize === undefined ? 0 : count % batchSize;
  if (partial > 0 && d.batch.maxWaitMs > 0 && wanted.exhausted) {
    const now = x.now();
    const oldest = receivedAt(wanted.messages[count - partial]!);
    const since = Number.isNaN(oldest) ? now : Math.min(now, oldest);
    // Before the destination's first delivery here (its code still cold): half the wait.
    const perMessage = x.msPerMessage.get(d.id) ?? Infinity;
    const delivery = Math.min(d.batch.maxWaitMs / 2, perMessage * partial);
    const due = since + d.batch.maxWaitMs - delivery;
    if (now < due) {
      // Only a batch read from the cursor is kept: after whole batches go, the cursor moves past them.
      if (partial === count) x.held.set(d.id, { from: d.cursor, key: heldKey(d), wanted, due });
      return count - partial;
    }
  }
  return count;
}

/**
 * One delivery cycle: reads up to CYCLE_MESSAGES wanted messages after the cursor, has the driver deliver them
 * (webhooks: batches of `max_messages`, one after another, each only after the previous was accepted; NATS:
 * every publish pipelined, all acks awaited), then writes the cursor after the last accepted message and the
 * attempts of the delivery log in one fenced transaction. A crash before that write re-delivers the cycle from
 * the stored cursor with the same ids (at least once). Returns whether to go on at once.
 */
async function cycle(x: Deliverer, d: DestinationRecord, previous?: Carried): Promise<boolean | Carried> {
  const driver = x.drivers[d.type];
  const batchSize = driver.batchSize(d);
  const limit =
    batchSize === undefined ? CYCLE_MESSAGES : batchSize * Math.max(1, Math.floor(CYCLE_MESSAGES / batchSize));
  let wanted: Wanted;
  try {
    wanted = await readWanted(x, d, limit);
  } catch (error) {
    if (!(error instanceof TransformationUnavailable)) throw error;
    return holdBack(x, d, previous, error.message);
  }
  if (wanted.messages.length === 0) {
    if (previous !== undefined && !(await previous.write)) return false;
    const now = new Date(x.now()).toISOString();
    if (wanted.moved && !(await x.store.writeState(d.id, x.holder, { cursor: wanted.cursor }, now, [], d.cursor)))
      return false;
    return wanted.moved && !wanted.exhausted;
  }
  const count = handedOver(x, d, wanted, batchSize);
  if (count === 0) {
    if (previous !== undefined) await previous.write;
    return false;
  }
  const handed = count === wanted.messages.length ? wanted.messages : wanted.messages.slice(0, count);
  const attempts: Array<Omit<DeliveryRecord, 'id'>> = [];
  const started = performance.now();
  const delivered = await driver.deliver(d, handed, deliveryContext(x, d, attempts));
  if (batchSize !== undefined && delivered.failure === undefined)
    x.msPerMessage.set(d.id, (performance.now() - started) / handed.length);
  const accepted = delivered.accepted;
  let failure = delivered.failure;
  if (x.run.stopped) {
    // A send cut off by shutdown is not the receiver's failure: record only what was accepted.
    if (accepted === 0) {
      if (previous !== undefined) await previous.write;
      return false;
    }
    if (failure !== undefined) {
      failure = undefined;
      attempts.pop();
    }
  }
  // Everything read was accepted: the cursor also passes the unwanted messages after the last one.
  const cursor =
    accepted === 0 ? undefined : accepted === wanted.messages.length ? wanted.cursor : wanted.afterEach[accepted - 1]!;
  if (failure !== undefined) x.report.failed(d.id);
  const nowMs = x.now();
  const patch = stateAfter(d, { accepted, cursor, failure }, nowMs, x);
  const newest = accepted === 0 ? undefined : handed[accepted - 1]!;
  const write = writeCycle(x, d, previous, { patch, attempts, accepted, newest, now: new Date(nowMs).toISOString() });
  const whole = failure === undefined && !x.run.stopped && accepted === wanted.messages.length;
  if (!whole) return (await write.catch(() => false)) && failure === undefined && !x.run.stopped;
  // Accepted in full: the next cycle goes on from here while this state is written (a crash before it lands
  // re-delivers this cycle: at least once). Its outcome decides whether the loop goes on.
  const carried: Carried = { cursor: cursor!, write: write.catch(() => false) };
  void carried.write.then((ok) => (carried.written = ok));
  return carried;
}

/**
 * A cycle that cannot deliver at all (the destination's steps cannot run here): a failure like a send's, so the
 * destination waits for its next attempt, shows the error, and is disabled after disableAfterMs like any other.
 */
async function holdBack(
  x: Deliverer,
  d: DestinationRecord,
  previous: Carried | undefined,
  error: string,
): Promise<false> {
  if (previous !== undefined && !(await previous.write)) return false;
  x.report.failed(d.id);
  const nowMs = x.now();
  const failure = { ok: false, status: null, error: error.slice(0, 500) };
  const patch = stateAfter(d, { accepted: 0, cursor: undefined, failure }, nowMs, x);
  await x.store.writeState(d.id, x.holder, patch, new Date(nowMs).toISOString(), [], d.cursor).catch(() => false);
  return false;
}

/** What the driver is given for one cycle: its sends are logged in `attempts`, in order. */
function deliveryContext(
  x: Deliverer,
  d: DestinationRecord,
  attempts: Array<Omit<DeliveryRecord, 'id'>>,
): DeliveryContext {
  const cycleStarted = x.now();
  return {
    format: x.pages.format,
    sent(wire, outcome: SendOutcome, durationMs) {
      x.report.attempt(d.id, durationMs / 1000);
      attempts.push({
        productId: d.productId,
        destinationId: d.id,
        attemptedAt: new Date(x.now()).toISOString(),
        // A send after the first one follows an accepted one: its messages are tried for the first time.
        attempt: attempts.length === 0 ? d.consecutiveFailures + 1 : 1,
        webhookId: webhookIdOf(wire),
        messageIds: wire.map((m) => m.id),
        outcome: outcome.ok ? 'success' : 'failure',
        status: outcome.status,
        error: outcome.error,
        durationMs,
      });
    },
    // Keep the unrecorded part of a cycle well inside the lease.
    goOn: () => !x.run.stopped && x.now() - cycleStarted <= x.leaseMs / 3,
    signal: x.run.abort.signal,
    holds: async () => (await x.store.getById(d.id))?.leaseHolder === x.holder,
    leaseUntil: d.leaseUntil,
  };
}

/**
 * The cycle's state write. Fenced by the cursor the cycle started from too: an admin replay while the cycle ran
 * stands, and the loop ends (false); the next pass delivers from the replayed cursor. The cycle started from the
 * previous cycle's cursor, which is stored only once that cycle's write landed: this write waits for it, and is
 * not made when it failed.
 */
async function writeCycle(
  x: Deliverer,
  d: DestinationRecord,
  previous: Carried | undefined,
  state: {
    patch: ReturnType<typeof stateAfter>;
    attempts: Array<Omit<DeliveryRecord, 'id'>>;
    accepted: number;
    /** The newest accepted message (its receipt time gives the latency). */
    newest: StoredMessage | undefined;
    now: string;
  },
): Promise<boolean> {
  if (previous !== undefined && !(await previous.write)) return false;
  const ok = await x.store.writeState(d.id, x.holder, state.patch, state.now, state.attempts, d.cursor);
  if (ok && state.newest !== undefined) {
    x.report.delivered(d.id, state.accepted);
    const newest = Date.parse(x.pages.format(state.newest).timestamp);
    if (!Number.isNaN(newest)) x.report.latency(d.id, Math.max(0, Date.now() - newest) / 1000);
  }
  return ok;
}
