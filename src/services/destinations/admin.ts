// The admin operations on destinations (events-out §6): create, list, show, edit (pause, resume, re-enable),
// delete, replay, rotate the signing secret, the delivery log, and the summary by status. The fields every
// type shares are parsed in input.ts, each type's own in its module (kind.ts). Changes that concern the
// deliverers poke them, so that they act at once rather than at the next pass.
import { AppError, validationError, type FieldError } from '../../domain/errors.js';
import { decodeCursor } from '../../domain/event-cursor.js';
import { decodeDestinationCursor } from '../../domain/destinations.js';
import { prefixedId } from '../../domain/ids.js';
import type {
  DeliveryRecord,
  DestinationCursor,
  DestinationPatch,
  DestinationRecord,
  DestinationStatus,
  DestinationStore,
  DestinationTransformation,
  DestinationType,
} from '../../storage/types.js';
import type { OutboundGuard } from '../outbound-guard.js';
import { parseBatch, parseFilter, parseName, type DestinationInput } from './input.js';
import type { DestinationKind, DestinationKinds } from './kind.js';
import { LAG_CAP } from './metrics.js';

/** How long a rotated-out secret still signs (events-out §6). */
export const SECRET_OVERLAP_MS = 24 * 3_600_000;

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

export interface DestinationView extends DestinationRecord {
  lag: number;
}

export interface AdminOptions {
  store: DestinationStore;
  kinds: DestinationKinds;
  guard: OutboundGuard;
  /** How long a warehouse's check at creation may take to connect. */
  timeoutMs: number;
  /** INLET_FILE_DESTINATIONS_ROOT, for file destinations' paths. */
  fileRoot: string | undefined;
  /** A `transformation` of the body checked like a product's (transformation.ts); throws a validation error. */
  checkTransformation(value: unknown): Promise<DestinationTransformation | null>;
  now: () => number;
  /** Asks the deliverers for a pass soon. */
  poke(): void;
  /** Lets the destination's driver go of what it keeps for it (a deleted NATS destination's connection). */
  forget(destination: DestinationRecord): Promise<void>;
}

export function createDestinationAdmin(options: AdminOptions) {
  return {
    create: (productId: string, input: DestinationInput) => createDestination(options, productId, input),
    list: async (productId: string): Promise<DestinationView[]> =>
      Promise.all((await options.store.list(productId)).map((d) => view(options.store, d))),
    show: async (productId: string, id: string): Promise<DestinationView> =>
      view(options.store, await mustGet(options.store, productId, id)),
    /** name, url, filter, batch, transformation (null: none), status (paused / active: resume, or re-enable). */
    update: (productId: string, id: string, input: DestinationInput) =>
      updateDestination(options, productId, id, input),
    async delete(productId: string, id: string): Promise<void> {
      const current = await mustGet(options.store, productId, id);
      await options.store.delete(productId, id);
      await options.forget(current);
    },
    replay: (productId: string, id: string, from: unknown) => replay(options, productId, id, from),
    rotateSecret: (productId: string, id: string) => rotateSecret(options, productId, id),
    async deliveries(productId: string, id: string, limit: number, before?: string): Promise<DeliveryRecord[]> {
      await mustGet(options.store, productId, id);
      return options.store.listDeliveries(productId, id, limit, before);
    },
    /** Destinations by status, and the disabled ones with their reasons (readiness body, stats). */
    summary: () => summary(options.store),
  };
}

async function mustGet(store: DestinationStore, productId: string, id: string): Promise<DestinationRecord> {
  const found = await store.get(productId, id);
  if (found === undefined) throw new AppError('not_found', `No destination "${id}" in product "${productId}".`);
  return found;
}

async function view(store: DestinationStore, record: DestinationRecord): Promise<DestinationView> {
  return { ...record, lag: await store.lag(record.productId, record.cursor, LAG_CAP) };
}

const iso = (now: () => number) => new Date(now()).toISOString();

function kindOf(kinds: DestinationKinds, type: unknown): DestinationKind | undefined {
  return typeof type === 'string' && Object.hasOwn(kinds, type) ? kinds[type as DestinationType] : undefined;
}

/**
 * Another type's fields in `input` (of create, or of edits: `editable`): "is for <that type> destinations".
 * The type's own fields are never foreign. Returns the keys refused.
 */
function refuseForeign(
  kinds: DestinationKinds,
  kind: DestinationKind,
  input: DestinationInput,
  fields: 'fields' | 'editable',
  errors: FieldError[],
): Set<keyof DestinationInput> {
  const own = new Set<keyof DestinationInput>(kind.fields);
  const refused = new Set<keyof DestinationInput>();
  for (const other of Object.values(kinds)) {
    for (const key of other[fields]) {
      if (own.has(key) || refused.has(key) || input[key] === undefined) continue;
      refused.add(key);
      errors.push({ pointer: `/${key}`, message: `is for ${other.label} destinations` });
    }
  }
  return refused;
}

/** A cursor from `start`/`from`: "now", "beginning", an events cursor, a destination cursor, or (replay) a received time. */
async function cursorFrom(
  store: DestinationStore,
  productId: string,
  value: unknown,
  pointer: string,
  allowTime: boolean,
): Promise<DestinationCursor> {
  if (value === undefined || value === 'now') return store.endCursor(productId);
  if (value === 'beginning') return { event: null, identity: null };
  if (typeof value === 'string') {
    const destinationCursor = decodeDestinationCursor(value);
    if (destinationCursor !== undefined) {
      const valid = (p: string | null) => p === null || store.isEventPosition(p);
      if (valid(destinationCursor.event) && valid(destinationCursor.identity)) return destinationCursor;
    }
    const position = decodeCursor(value);
    if (position !== undefined && store.isEventPosition(position)) return store.cursorAfterEvent(productId, position);
    if (allowTime && RFC3339.test(value) && !Number.isNaN(Date.parse(value))) {
      // Events are received before they commit, so one received just before `at` may have committed
      // after one received at `at`: the replay starts RECEIVE slack earlier (a few more re-deliveries, none missed).
      const before = await store.eventPositionBefore(
        productId,
        new Date(Date.parse(value) - 10 * 60_000).toISOString(),
      );
      return before === null ? { event: null, identity: null } : store.cursorAfterEvent(productId, before);
    }
  }
  const expected = allowTime
    ? 'a cursor (from a destination or the event reads) or an RFC 3339 time'
    : '"now", "beginning" or a cursor (from a destination or the event reads)';
  throw validationError([{ pointer, message: `must be ${expected}` }]);
}

/** The body's `transformation`, checked (steps validated, functions compiled); its problems go to `errors`. */
async function parseTransformation(
  options: AdminOptions,
  value: unknown,
  errors: FieldError[],
): Promise<DestinationTransformation | null | undefined> {
  if (value === undefined) return undefined;
  try {
    return await options.checkTransformation(value);
  } catch (error) {
    if (!(error instanceof AppError) || error.errors === undefined) throw error;
    errors.push(...error.errors);
    return undefined;
  }
}

async function createDestination(
  options: AdminOptions,
  productId: string,
  input: DestinationInput,
): Promise<{ destination: DestinationView; secret: string | null }> {
  const { store, kinds } = options;
  const errors: FieldError[] = [];
  const kind = kindOf(kinds, input.type);
  if (kind === undefined)
    errors.push({
      pointer: '/type',
      message: `must be ${Object.keys(kinds)
        .map((t) => `"${t}"`)
        .join(' or ')}`,
    });
  const name = parseName(input.name, errors);
  const filter = parseFilter(input.filter, errors);
  const batch = parseBatch(input.batch, errors, kind?.batch);
  const { config, credentials } = kind?.parse(input, errors, { productId, fileRoot: options.fileRoot }) ?? {
    config: {},
    credentials: null,
  };
  if (kind !== undefined) refuseForeign(kinds, kind, input, 'fields', errors);
  const transformation = await parseTransformation(options, input.transformation, errors);
  if (errors.length > 0) throw validationError(errors);
  await kind!.check(config, {
    guard: options.guard,
    credentials,
    timeoutMs: options.timeoutMs,
    fileRoot: options.fileRoot,
  });
  const start = input.start ?? kind!.defaultStart;
  const cursor = await cursorFrom(store, productId, start, '/start', false);
  const now = iso(options.now);
  const secret = kind!.newSecret?.() ?? null;
  const record: DestinationRecord = {
    id: prefixedId('dst'),
    productId,
    type: input.type as DestinationType,
    name: name!,
    status: 'active',
    disabledReason: null,
    config,
    credentials,
    filter: filter!,
    batch: batch!,
    secret,
    previousSecret: null,
    previousSecretUntil: null,
    cursor,
    consecutiveFailures: 0,
    failingSince: null,
    nextAttemptAt: null,
    lastSuccessAt: null,
    lastError: null,
    lastErrorAt: null,
    delivered: 0,
    createdAt: now,
    updatedAt: now,
    leaseHolder: null,
    leaseUntil: 0,
    warnings: [],
    columnsAdded: 0,
    typeWidenings: 0,
    transformation: transformation ?? null,
  };
  await store.insert(record);
  options.poke();
  return { destination: await view(store, record), secret };
}

async function updateDestination(
  options: AdminOptions,
  productId: string,
  id: string,
  input: DestinationInput,
): Promise<DestinationView> {
  const { store, kinds } = options;
  const current = await mustGet(store, productId, id);
  const kind = kinds[current.type];
  const errors: FieldError[] = [];
  const patch: DestinationPatch = { updatedAt: iso(options.now) };
  if (input.name !== undefined) patch.name = parseName(input.name, errors);
  if (input.filter !== undefined) patch.filter = parseFilter(input.filter, errors);
  if (input.batch !== undefined) patch.batch = parseBatch(input.batch, errors, kind.batch);
  const config = kind.edit(current.config, input, errors, { productId, fileRoot: options.fileRoot });
  if (config !== undefined) patch.config = config;
  const credentials = kind.editCredentials?.(input, errors);
  if (credentials !== undefined) patch.credentials = credentials;
  const foreign = refuseForeign(kinds, kind, input, 'editable', errors);
  // What no edit changes: the type, the start (replay moves the cursor), and every type's fields that this type
  // cannot edit (another type's editable fields were refused above as theirs).
  const fixed = new Set<keyof DestinationInput>(['type', 'start']);
  for (const k of Object.values(kinds))
    for (const key of k.fields) if (!kind.editable.includes(key) && !foreign.has(key)) fixed.add(key);
  for (const key of fixed) {
    if (input[key] !== undefined)
      errors.push({
        pointer: `/${key}`,
        message: 'cannot be changed (create a new destination, or use replay for the cursor)',
      });
  }
  const status = parseStatus(input.status, errors);
  const transformation = await parseTransformation(options, input.transformation, errors);
  if (transformation !== undefined) patch.transformation = transformation;
  if (errors.length > 0) throw validationError(errors);
  if (patch.config !== undefined || patch.credentials !== undefined)
    await kind.check(patch.config ?? current.config, {
      guard: options.guard,
      credentials: patch.credentials ?? current.credentials,
      timeoutMs: options.timeoutMs,
      fileRoot: options.fileRoot,
    });
  // "active" on an active destination that waits for a retry: retry now (the failure count and clock stay).
  if (status === 'active' && current.status === 'active') patch.nextAttemptAt = null;
  if (status !== undefined && status !== current.status) {
    patch.status = status;
    patch.disabledReason = null;
    if (status === 'active') {
      // Resume or re-enable: from the cursor, with a fresh retry schedule and failure clock.
      patch.consecutiveFailures = 0;
      patch.failingSince = null;
      patch.nextAttemptAt = null;
    }
  }
  const updated = await store.update(productId, id, patch);
  options.poke();
  return view(store, updated!);
}

function parseStatus(value: unknown, errors: FieldError[]): DestinationStatus | undefined {
  if (value === undefined) return undefined;
  if (value === 'active' || value === 'paused') return value;
  errors.push({
    pointer: '/status',
    message: 'must be "paused" or "active" (resume, or re-enable a disabled destination)',
  });
  return undefined;
}

/** Rewinds (or moves) the cursor to `from`; failures are forgotten so the replay starts now. */
async function replay(options: AdminOptions, productId: string, id: string, from: unknown): Promise<DestinationView> {
  const { store } = options;
  await mustGet(store, productId, id);
  if (from === undefined) throw validationError([{ pointer: '/from', message: 'is required' }]);
  const cursor = await cursorFrom(store, productId, from, '/from', true);
  const updated = await store.update(productId, id, {
    cursor,
    consecutiveFailures: 0,
    failingSince: null,
    nextAttemptAt: null,
    updatedAt: iso(options.now),
  });
  options.poke();
  return view(store, updated!);
}

/** A new signing secret; the previous one keeps signing (a second signature) for 24 h. */
async function rotateSecret(
  options: AdminOptions,
  productId: string,
  id: string,
): Promise<{ destination: DestinationView; secret: string }> {
  const { store } = options;
  const current = await mustGet(store, productId, id);
  const newSecret = options.kinds[current.type].newSecret;
  if (newSecret === undefined)
    throw validationError([{ pointer: '/', message: 'only webhook destinations have a signing secret' }]);
  const secret = newSecret();
  const updated = await store.update(productId, id, {
    secret,
    previousSecret: current.secret,
    previousSecretUntil: options.now() + SECRET_OVERLAP_MS,
    updatedAt: iso(options.now),
  });
  return { destination: await view(store, updated!), secret };
}

async function summary(store: DestinationStore): Promise<{
  byStatus: Record<DestinationStatus, number>;
  disabled: Array<{ id: string; product_id: string; name: string; reason: string | null }>;
}> {
  const byStatus: Record<DestinationStatus, number> = { active: 0, paused: 0, disabled: 0 };
  const disabled: Array<{ id: string; product_id: string; name: string; reason: string | null }> = [];
  for (const d of await store.listAll()) {
    byStatus[d.status]++;
    if (d.status === 'disabled')
      disabled.push({ id: d.id, product_id: d.productId, name: d.name, reason: d.disabledReason });
  }
  return { byStatus, disabled };
}
