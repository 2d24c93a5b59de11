// The destinations page's forms (events-out §6, warehouses.md): create a webhook, NATS, PostgreSQL warehouse or
// Parquet destination with each type's own fields, and edit one. A refused create or edit shows the API's message
// next to the field it names.
import { useState } from 'preact/hooks';
import { ApiError, patch, post, productPath, type Envelope, type Product } from '../api';
import { ErrorLine, messageOf, useAction } from '../ui';

export interface Destination {
  id: string;
  type: Kind;
  name: string;
  status: 'active' | 'paused' | 'disabled';
  disabled_reason: string | null;
  url?: string | null;
  servers?: string[];
  subject?: string;
  schema?: string;
  columns_added?: number;
  type_widenings?: number;
  path?: string;
  partition?: string;
  batch: { max_messages: number; max_wait_ms: number };
  warnings?: Array<{ at: string; message: string }>;
  cursor: string;
  lag: number | null;
  delivered: number;
  consecutive_failures: number;
  next_attempt_at: string | null;
  last_success_at: string | null;
  last_error: string | null;
  last_error_at: string | null;
  secret?: string;
}

export type Kind = 'webhook' | 'nats' | 'postgres' | 'parquet';

/** Each type as the form offers it, with the admin API's bounds and defaults of `batch` and `start`. */
export const KINDS: Record<
  Kind,
  { label: string; unit: string; maxMessages: number; defaultMessages: number; defaultWaitMs: number; start: string }
> = {
  webhook: {
    label: 'Webhook (Standard Webhooks, signed)',
    unit: 'Messages per request',
    maxMessages: 1000,
    defaultMessages: 1,
    defaultWaitMs: 0,
    start: 'now',
  },
  nats: {
    label: 'NATS JetStream',
    unit: 'Messages per delivery',
    maxMessages: 1000,
    defaultMessages: 1,
    defaultWaitMs: 0,
    start: 'now',
  },
  postgres: {
    label: 'PostgreSQL warehouse (tables, loaded exactly once)',
    unit: 'Messages per load',
    maxMessages: 10_000,
    defaultMessages: 1000,
    defaultWaitMs: 5000,
    start: 'beginning',
  },
  parquet: {
    label: 'Parquet files (in a folder the operator allows)',
    unit: 'Rows per file',
    maxMessages: 100_000,
    defaultMessages: 100_000,
    defaultWaitMs: 60_000,
    start: 'beginning',
  },
};
const KIND_ORDER: Kind[] = ['webhook', 'nats', 'postgres', 'parquet'];
const MAX_WAIT_MS = 60_000;
export const isWarehouse = (type: Kind) => type === 'postgres' || type === 'parquet';
export const grouped = (n: number) => n.toLocaleString('en');

/** What the create form sends for each type's own fields. */
function typeFields(type: Kind, text: (name: string) => string): Record<string, unknown> {
  switch (type) {
    case 'webhook':
      return { url: text('url') };
    case 'postgres':
      return { url: text('url'), ...(text('schema') === '' ? {} : { schema: text('schema') }) };
    case 'parquet':
      return { path: text('path'), partition: text('partition') || 'hour' };
    case 'nats':
      return {
        servers: text('servers')
          .split(/[\s,]+/)
          .filter(Boolean),
        subject: text('subject'),
      };
  }
}

/** `batch` from the form's two optional fields; absent when both are empty (the type's defaults). */
function batchOf(text: (name: string) => string): { batch?: { max_messages?: number; max_wait_ms?: number } } {
  const batch: { max_messages?: number; max_wait_ms?: number } = {};
  if (text('batch') !== '') batch.max_messages = Number(text('batch'));
  if (text('wait') !== '') batch.max_wait_ms = Number(text('wait'));
  return Object.keys(batch).length === 0 ? {} : { batch };
}

/** The field errors of a refused request that concern `pointer` (the field or a part of it). */
function problemsAt(error: unknown, pointer: string): string[] {
  if (!(error instanceof ApiError)) return [];
  return error.errors.filter((e) => e.pointer === pointer || e.pointer.startsWith(`${pointer}/`)).map((e) => e.message);
}

/** The API's message for one field, next to it; the field points at it (aria-describedby). */
function FieldProblem({ id, error, pointer }: { id: string; error: unknown; pointer: string }) {
  const problems = problemsAt(error, pointer);
  if (problems.length === 0) return null;
  return (
    <p class="field-error" id={`${id}-problem`}>
      {problems.join('; ')}
    </p>
  );
}

/** The attributes that tie an input to its FieldProblem (and to a hint, `hint` its id). */
function marked(id: string, error: unknown, pointer: string, hint?: string) {
  const invalid = problemsAt(error, pointer).length > 0;
  const described = [...(invalid ? [`${id}-problem`] : []), ...(hint === undefined ? [] : [hint])];
  return {
    ...(invalid ? { 'aria-invalid': true as const } : {}),
    ...(described.length === 0 ? {} : { 'aria-describedby': described.join(' ') }),
  };
}

/** A refused form's line: the API's summary, with the field errors that no field of the form shows. */
function FormProblem({ error, fields }: { error: unknown; fields: string[] }) {
  if (!(error instanceof ApiError) || error.errors.length === 0) return <ErrorLine error={error} />;
  const unshown = error.errors.some((e) => !fields.some((f) => e.pointer === f || e.pointer.startsWith(`${f}/`)));
  return (
    <p class="error" role="alert">
      {unshown ? messageOf(error) : `Refused: ${error.message}`}
    </p>
  );
}

const BATCH_FIELDS = ['/batch/max_messages', '/batch/max_wait_ms'];

/** The pointers each type's create form shows next to a field. */
function fieldsOf(type: Kind): string[] {
  const own = {
    webhook: ['/url'],
    nats: ['/servers', '/subject'],
    postgres: ['/url', '/schema'],
    parquet: ['/path', '/partition'],
  };
  return ['/name', '/start', ...BATCH_FIELDS, ...own[type]];
}

export function CreateForm({ product, onCreated }: { product: Product; onCreated: (created: Destination) => void }) {
  const [type, setType] = useState<Kind>('webhook');
  // A new form after each creation: its fields empty (a warehouse URL, and its password, gone with them), the type kept.
  const [generation, setGeneration] = useState(0);
  const { error, busy, run } = useAction();
  const kind = KINDS[type];
  return (
    <form
      class="stack"
      key={generation}
      onSubmit={(e) => {
        e.preventDefault();
        const data = new FormData(e.currentTarget);
        const text = (name: string) => String(data.get(name) ?? '').trim();
        void run(async () => {
          const answer = await post<Envelope<Destination>>(productPath(product.id, '/destinations'), {
            type,
            name: text('name'),
            start: text('start') || kind.start,
            ...typeFields(type, text),
            ...batchOf(text),
          });
          setGeneration((g) => g + 1);
          onCreated(answer.data);
        });
      }}
    >
      <fieldset>
        <legend>Type</legend>
        {KIND_ORDER.map((k) => (
          <label class="choice" key={k}>
            <input type="radio" name="type" value={k} checked={type === k} onChange={() => setType(k)} />{' '}
            {KINDS[k].label}
          </label>
        ))}
      </fieldset>
      <label for="dest-name">Name</label>
      <input id="dest-name" name="name" required maxLength={200} {...marked('dest-name', error, '/name')} />
      <FieldProblem id="dest-name" error={error} pointer="/name" />
      <TypeFields type={type} product={product} error={error} />
      <label for="dest-start">Start</label>
      <select id="dest-start" name="start" key={type} {...marked('dest-start', error, '/start')}>
        <option value="now" selected={kind.start === 'now'}>
          With the next event
        </option>
        <option value="beginning" selected={kind.start === 'beginning'}>
          From the first stored event
        </option>
      </select>
      <FieldProblem id="dest-start" error={error} pointer="/start" />
      <label for="dest-batch">
        {kind.unit} (1–{grouped(kind.maxMessages)}, default {grouped(kind.defaultMessages)})
      </label>
      <input
        id="dest-batch"
        name="batch"
        type="number"
        min={1}
        max={kind.maxMessages}
        key={`batch-${type}`}
        {...marked('dest-batch', error, '/batch/max_messages')}
      />
      <FieldProblem id="dest-batch" error={error} pointer="/batch/max_messages" />
      <label for="dest-wait">
        Longest wait for a fuller batch, ms (0–{grouped(MAX_WAIT_MS)}, default {grouped(kind.defaultWaitMs)})
      </label>
      <input
        id="dest-wait"
        name="wait"
        type="number"
        min={0}
        max={MAX_WAIT_MS}
        key={`wait-${type}`}
        {...marked('dest-wait', error, '/batch/max_wait_ms')}
      />
      <FieldProblem id="dest-wait" error={error} pointer="/batch/max_wait_ms" />
      <div>
        <button type="submit" class="primary" disabled={busy}>
          Create destination
        </button>
      </div>
      <FormProblem error={error} fields={fieldsOf(type)} />
    </form>
  );
}

/** The create form's fields of one type (the admin API's: src/http/admin/destinations.ts). */
function TypeFields({ type, product, error }: { type: Kind; product: Product; error: unknown }) {
  if (type === 'postgres')
    return (
      <>
        <label for="dest-url">Warehouse URL (stored, never shown again)</label>
        <input
          id="dest-url"
          name="url"
          required
          maxLength={2000}
          autocomplete="off"
          spellcheck={false}
          placeholder="postgres://loader:secret@db.internal:5432/analytics"
          {...marked('dest-url', error, '/url')}
        />
        <FieldProblem id="dest-url" error={error} pointer="/url" />
        <label for="dest-schema">Schema (optional)</label>
        <input
          id="dest-schema"
          name="schema"
          maxLength={63}
          placeholder={`inlet_${product.id.toLowerCase()}`}
          {...marked('dest-schema', error, '/schema')}
        />
        <FieldProblem id="dest-schema" error={error} pointer="/schema" />
      </>
    );
  if (type === 'parquet')
    return (
      <>
        <label for="dest-path">Folder</label>
        <input
          id="dest-path"
          name="path"
          required
          maxLength={1000}
          placeholder="acme"
          {...marked('dest-path', error, '/path', 'dest-path-hint')}
        />
        <p class="hint" id="dest-path-hint">
          Under the operator&apos;s INLET_FILE_DESTINATIONS_ROOT: relative to it, or absolute inside it.
        </p>
        <FieldProblem id="dest-path" error={error} pointer="/path" />
        <label for="dest-partition">Files by</label>
        <select id="dest-partition" name="partition" {...marked('dest-partition', error, '/partition')}>
          <option value="hour">Hour of received_at (UTC)</option>
          <option value="day">Day of received_at (UTC)</option>
        </select>
        <FieldProblem id="dest-partition" error={error} pointer="/partition" />
      </>
    );
  if (type === 'webhook')
    return (
      <>
        <label for="dest-url">URL</label>
        <input
          id="dest-url"
          name="url"
          type="url"
          required
          placeholder="https://example.com/hooks/inlet"
          {...marked('dest-url', error, '/url')}
        />
        <FieldProblem id="dest-url" error={error} pointer="/url" />
      </>
    );
  return (
    <>
      <label for="dest-servers">Servers</label>
      <input
        id="dest-servers"
        name="servers"
        required
        placeholder="nats://127.0.0.1:4222"
        {...marked('dest-servers', error, '/servers')}
      />
      <FieldProblem id="dest-servers" error={error} pointer="/servers" />
      <label for="dest-subject">Subject template</label>
      <input
        id="dest-subject"
        name="subject"
        required
        defaultValue="inlet.{product_id}.{canonical_name}"
        {...marked('dest-subject', error, '/subject')}
      />
      <FieldProblem id="dest-subject" error={error} pointer="/subject" />
    </>
  );
}

/**
 * Edits what the admin API lets an edit change: the name, batching, and the type's own target (a webhook's URL, a
 * warehouse's URL, a Parquet folder). Only what changed is sent. A warehouse URL is never shown (the API does not
 * give it back): the field starts empty, and empty keeps the current one.
 */
export function EditForm({
  path,
  destination: d,
  onSaved,
}: {
  path: string;
  destination: Destination;
  onSaved: () => void;
}) {
  const { error, busy, run } = useAction();
  const id = (field: string) => `edit-${d.id}-${field}`;
  const kind = KINDS[d.type];
  const fields = ['/name', ...BATCH_FIELDS, ...(d.type === 'parquet' ? ['/path'] : d.type === 'nats' ? [] : ['/url'])];
  return (
    <form
      class="stack"
      aria-label={`Edit ${d.name}`}
      onSubmit={(e) => {
        e.preventDefault();
        const data = new FormData(e.currentTarget);
        const text = (name: string) => String(data.get(name) ?? '').trim();
        const body: Record<string, unknown> = {};
        if (text('name') !== d.name) body.name = text('name');
        if (d.type === 'webhook' && text('url') !== (d.url ?? '')) body.url = text('url');
        if (d.type === 'postgres' && text('url') !== '') body.url = text('url');
        if (d.type === 'parquet' && text('path') !== (d.path ?? '')) body.path = text('path');
        const batch: Record<string, number> = {};
        if (Number(text('batch')) !== d.batch.max_messages) batch.max_messages = Number(text('batch'));
        if (Number(text('wait')) !== d.batch.max_wait_ms) batch.max_wait_ms = Number(text('wait'));
        if (Object.keys(batch).length > 0) body.batch = { ...d.batch, ...batch };
        void run(async () => {
          if (Object.keys(body).length > 0) await patch(path, body);
          onSaved();
        });
      }}
    >
      <label for={id('name')}>Name</label>
      <input
        id={id('name')}
        name="name"
        required
        maxLength={200}
        defaultValue={d.name}
        {...marked(id('name'), error, '/name')}
      />
      <FieldProblem id={id('name')} error={error} pointer="/name" />
      {d.type === 'webhook' && (
        <>
          <label for={id('url')}>URL</label>
          <input
            id={id('url')}
            name="url"
            type="url"
            required
            defaultValue={d.url ?? ''}
            {...marked(id('url'), error, '/url')}
          />
          <FieldProblem id={id('url')} error={error} pointer="/url" />
        </>
      )}
      {d.type === 'postgres' && (
        <>
          <label for={id('url')}>New warehouse URL (empty: keep the current one, which is never shown)</label>
          <input
            id={id('url')}
            name="url"
            maxLength={2000}
            autocomplete="off"
            spellcheck={false}
            placeholder="postgres://loader:secret@db.internal:5432/analytics"
            {...marked(id('url'), error, '/url')}
          />
          <FieldProblem id={id('url')} error={error} pointer="/url" />
        </>
      )}
      {d.type === 'parquet' && (
        <>
          <label for={id('path')}>Folder (files written so far stay where they are)</label>
          <input
            id={id('path')}
            name="path"
            required
            maxLength={1000}
            defaultValue={d.path ?? ''}
            {...marked(id('path'), error, '/path')}
          />
          <FieldProblem id={id('path')} error={error} pointer="/path" />
        </>
      )}
      <label for={id('batch')}>
        {kind.unit} (1–{grouped(kind.maxMessages)})
      </label>
      <input
        id={id('batch')}
        name="batch"
        type="number"
        required
        min={1}
        max={kind.maxMessages}
        defaultValue={String(d.batch.max_messages)}
        {...marked(id('batch'), error, '/batch/max_messages')}
      />
      <FieldProblem id={id('batch')} error={error} pointer="/batch/max_messages" />
      <label for={id('wait')}>Longest wait for a fuller batch, ms (0–{grouped(MAX_WAIT_MS)})</label>
      <input
        id={id('wait')}
        name="wait"
        type="number"
        required
        min={0}
        max={MAX_WAIT_MS}
        defaultValue={String(d.batch.max_wait_ms)}
        {...marked(id('wait'), error, '/batch/max_wait_ms')}
      />
      <FieldProblem id={id('wait')} error={error} pointer="/batch/max_wait_ms" />
      <div>
        <button type="submit" class="primary" disabled={busy}>
          Save changes
        </button>
      </div>
      <FormProblem error={error} fields={fields} />
    </form>
  );
}
