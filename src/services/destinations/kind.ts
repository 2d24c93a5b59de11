// What a destination type is to the rest of the house: one module per type (webhook.ts, nats.ts, the PostgreSQL
// warehouse postgres.ts and the Parquet files parquet.ts) behind this interface. The module says what the admin API takes for
// the type, and builds the driver the deliverer (deliverer.ts) hands messages to. The deliverer keeps what
// every type shares: the cursor, the lease, the filter, order, retries and the delivery log; a driver only
// delivers, and answers how far the receiver accepted.
//
// Erasure reaches every type as the `user.erased` message, which no filter holds back (messages.ts `matches`),
// in its place in the log: webhook and NATS receivers get it like any other message. A type that keeps the data
// itself (a warehouse, Parquet files) erases on that message inside `deliver`, where the position orders it
// against the loads and a warehouse can commit it with its cursor; so there is no separate erase call to order.
import { validationError, type FieldError } from '../../domain/errors.js';
import type {
  DestinationConfig,
  DestinationCredentials,
  DestinationRecord,
  DestinationType,
  StoredMessage,
} from '../../storage/types.js';
import { guardRefusal, OutboundRefused, type OutboundGuard } from '../outbound-guard.js';
import type { DestinationInput } from './input.js';
import type { WireMessage } from './messages.js';

/** What came of one send (an HTTP request, a set of publishes). */
export interface SendOutcome {
  ok: boolean;
  status: number | null;
  error: string | null;
  /** From Retry-After on 429 and 503. */
  retryAfterMs?: number;
  /** 410 Gone: the receiver asks to stop. */
  gone?: boolean;
  /** The outbound guard refused the target: nothing was sent, and retrying cannot help until the settings change. */
  refused?: boolean;
}

/**
 * A send that threw, under the type's prefix ("NATS: "): a refusal by the outbound guard is marked as one (never
 * retried); any other error is described by `describe` (its message by default).
 */
export function failedSend(
  prefix: string,
  error: unknown,
  describe: (error: unknown) => string = (e) => (e as Error).message,
): SendOutcome {
  const refused = guardRefusal(error);
  const text = refused === undefined ? describe(error) : `refused by the outbound guard: ${refused.message}`;
  return { ok: false, status: null, error: `${prefix}${text}`.slice(0, 500), ...(refused && { refused: true }) };
}

/** What the deliverer gives a driver along with the messages of one delivery. */
export interface DeliveryContext {
  /** A message's wire form, made once per message and shared with the product's other destinations. */
  format(message: StoredMessage): WireMessage;
  /** Said after each send, in order: the deliverer logs it as an attempt and reports its duration. */
  sent(messages: WireMessage[], outcome: SendOutcome, durationMs: number): void;
  /** False once no further send should start (shutdown, or the cycle has run long against its lease). */
  goOn(): boolean;
  /** Aborted at shutdown: a send in flight may give up (the deliverer then records only what was accepted). */
  signal: AbortSignal;
  /** Whether this instance still holds the destination's lease, as stored now (a warehouse asks under its lock). */
  holds(): Promise<boolean>;
  /**
   * The end of the lease this instance held when the cycle began (epoch ms): a fencing token, since the lease of
   * an instance that takes over ends after the one it took over (Parquet files carry it).
   */
  leaseUntil: number;
}

/** The receiver accepted the first `accepted` messages; `failure` is the send that stopped it, if one did. */
export interface Delivered {
  accepted: number;
  failure?: SendOutcome;
}

/** A type's delivery side: one per type and deliverer, shared by that type's destinations. */
export interface DestinationDriver {
  /**
   * Messages per send, so that the deliverer hands over whole batches and holds a last partial one back up to
   * max_wait_ms; undefined when the type has no batches (a cycle's messages go in one delivery).
   */
  batchSize(destination: DestinationRecord): number | undefined;
  /** Delivers `messages` in order; the receiver's acceptance of a prefix of them is what moves the cursor. */
  deliver(destination: DestinationRecord, messages: StoredMessage[], context: DeliveryContext): Promise<Delivered>;
  /** Lets go of what it keeps for destinations deleted (not `present`) or no longer delivered here (not `held`). */
  prune(present: ReadonlySet<string>, held: ReadonlySet<string>): Promise<void>;
  /** The destination was deleted: lets go at once of what it keeps for it. */
  forget(destinationId: string): Promise<void>;
  close(): Promise<void>;
}

/** What a driver is built with. */
export interface DriverOptions {
  timeoutMs: number;
  guard: OutboundGuard;
  now: () => number;
  /** Warehouse types: their bounds, and where a load's figures go (metrics.ts `WarehouseMetrics`). */
  warehouse: WarehouseOptions;
  /** INLET_FILE_DESTINATIONS_ROOT (file destinations write only under it). */
  fileRoot: string | undefined;
  /** Orders two message positions (the storage's order). */
  orderPositions(a: string, b: string): number;
}

export interface WarehouseOptions {
  /** INLET_WAREHOUSE_MAX_TABLES: event tables per schema. */
  maxTables: number;
  /** INLET_WAREHOUSE_MAX_COLUMNS: property columns per table. */
  maxColumns: number;
  /** Reports one load (rows, duration, columns added, widenings, warnings); never fails. */
  loaded(destinationId: string, load: WarehouseLoad): Promise<void>;
}

/** What one warehouse load did. */
export interface WarehouseLoad {
  rows: number;
  seconds: number;
  columnsAdded: number;
  widenings: number;
  warnings: string[];
}

/** A type's own bounds of `batch` (events-out §6 for webhooks and NATS; warehouses.md for warehouses). */
export interface BatchBounds {
  defaultMessages: number;
  maxMessages: number;
  defaultWaitMs: number;
  maxWaitMs: number;
}

/** A type's module: its admin fields and checks, and its driver. */
export interface DestinationKind {
  /** As it is named in messages ("is for NATS destinations"). */
  label: string;
  /** Its own fields of the create body: another type's are refused with "is for <label> destinations". */
  fields: ReadonlyArray<keyof DestinationInput>;
  /** Its fields that an edit (PATCH) may change. */
  editable: ReadonlyArray<keyof DestinationInput>;
  /** Its bounds of `batch`; default: 1–1000 messages (default 1), 0–60000 ms (default 0). */
  batch?: BatchBounds;
  /** Where a new destination starts without `start`; default "now" (warehouses load the history: "beginning"). */
  defaultStart?: 'now' | 'beginning';
  /** A new signing secret, for a type whose deliveries are signed: made at create, and on rotation. */
  newSecret?(): string;
  /** Its config and credentials from a create body; problems go to `errors`. */
  parse(
    input: DestinationInput,
    errors: FieldError[],
    context: ParseContext,
  ): { config: DestinationConfig; credentials: DestinationCredentials | null };
  /** The config after an edit of its editable fields; undefined when the edit changes none. */
  edit(
    current: DestinationConfig,
    input: DestinationInput,
    errors: FieldError[],
    context: ParseContext,
  ): DestinationConfig | undefined;
  /** The credentials after an edit (a type whose editable fields are credentials); undefined when unchanged. */
  editCredentials?(input: DestinationInput, errors: FieldError[]): DestinationCredentials | undefined;
  /**
   * The outbound guard's checks of the addresses in `config` (and `credentials`); a refusal is a validation
   * error (refusedAs). A warehouse also connects, and creates its schema, here.
   */
  check(config: DestinationConfig, context: CheckContext): Promise<void>;
  driver(options: DriverOptions): DestinationDriver;
}

/** What parsing a create body may need besides the body. */
export interface ParseContext {
  productId: string;
  /** INLET_FILE_DESTINATIONS_ROOT: where file destinations may write; undefined: file destinations are off. */
  fileRoot: string | undefined;
}

/** What the checks at creation (and after an edit) are given. */
export interface CheckContext {
  guard: OutboundGuard;
  credentials: DestinationCredentials | null;
  /** How long a connection made by the check may take. */
  timeoutMs: number;
  fileRoot: string | undefined;
}

export type DestinationKinds = Readonly<Record<DestinationType, DestinationKind>>;

/** Runs a guard check; its refusal becomes a validation error of the field at `pointer`. */
export async function refusedAs(pointer: string, check: () => Promise<unknown>): Promise<void> {
  try {
    await check();
  } catch (error) {
    if (error instanceof OutboundRefused)
      throw validationError([{ pointer, message: `refused by the outbound guard: ${error.message}` }]);
    throw error;
  }
}
