// Destinations (events-out §6, warehouses.md): create a webhook, NATS or PostgreSQL warehouse destination; each
// one's status, lag, last success (a warehouse's last load), error and warnings; pause, resume, re-enable, replay, rotate the secret, delete; its delivery log.
import { useEffect, useState } from 'preact/hooks';
import { del, get, patch, post, productPath, type Envelope, type Page, type Product } from '../api';
import { Badge, CopyButton, ErrorLine, Section, time, useAction, useLoad } from '../ui';

interface Destination {
  id: string;
  type: Kind;
  name: string;
  status: 'active' | 'paused' | 'disabled';
  disabled_reason: string | null;
  url?: string | null;
  servers?: string[];
  subject?: string;
  schema?: string;
  path?: string;
  partition?: string;
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
interface Delivery {
  id: string;
  attempted_at: string;
  attempt: number;
  message_ids: string[];
  outcome: string;
  status: number | null;
  error: string | null;
  duration_ms: number;
}

type Kind = 'webhook' | 'nats' | 'postgres' | 'parquet';
const TONE = { active: 'ok', paused: 'muted', disabled: 'bad' } as const;

/** What the create form sends for each type's own fields. */
function typeFields(type: Kind, text: (name: string) => string): Record<string, unknown> {
  if (type === 'webhook') return { url: text('url') };
  if (type === 'postgres') return { url: text('url'), ...(text('schema') === '' ? {} : { schema: text('schema') }) };
  return {
    servers: text('servers')
      .split(/[\s,]+/)
      .filter(Boolean),
    subject: text('subject'),
  };
}

/** A destination's target as the page shows it (a warehouse's URL is never shown: it holds the password). */
function targetOf(d: Destination): [string, string] {
  if (d.type === 'webhook') return ['URL', d.url ?? ''];
  if (d.type === 'postgres') return ['Warehouse schema', d.schema ?? ''];
  if (d.type === 'parquet') return ['Parquet folder', `${d.path ?? ''} (by ${d.partition ?? 'hour'})`];
  return ['Servers · subject', `${(d.servers ?? []).join(', ')} · ${d.subject}`];
}
const REFRESH_MS = 3000;

export function DestinationsPage({ product }: { product: Product }) {
  // Status, lag and the open delivery logs refresh every few seconds: delivery goes on while the page is open.
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const timer = setInterval(() => setTick((t) => t + 1), REFRESH_MS);
    return () => clearInterval(timer);
  }, []);
  const list = useLoad(
    () => get<Envelope<Destination[]>>(productPath(product.id, '/destinations')),
    [product.id, tick],
  );
  const [type, setType] = useState<Kind>('webhook');
  const [secret, setSecret] = useState<{ name: string; secret: string }>();
  const { error, run } = useAction();

  return (
    <>
      <h1>Destinations · {product.name}</h1>
      <Section title="Create a destination">
        <form
          class="stack"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget;
            const data = new FormData(form);
            const text = (name: string) => String(data.get(name) ?? '').trim();
            void run(async () => {
              const answer = await post<Envelope<Destination>>(productPath(product.id, '/destinations'), {
                type,
                name: text('name'),
                start: text('start') || (type === 'postgres' ? 'beginning' : 'now'),
                ...typeFields(type, text),
                ...(text('batch') === '' ? {} : { batch: { max_messages: Number(text('batch')) } }),
              });
              if (answer.data.secret !== undefined) setSecret({ name: answer.data.name, secret: answer.data.secret });
              form.reset();
              list.reload();
            });
          }}
        >
          <fieldset>
            <legend>Type</legend>
            <label class="choice">
              <input type="radio" name="type" checked={type === 'webhook'} onChange={() => setType('webhook')} />{' '}
              Webhook (Standard Webhooks, signed)
            </label>
            <label class="choice">
              <input type="radio" name="type" checked={type === 'nats'} onChange={() => setType('nats')} /> NATS
              JetStream
            </label>
            <label class="choice">
              <input type="radio" name="type" checked={type === 'postgres'} onChange={() => setType('postgres')} />{' '}
              PostgreSQL warehouse (tables, loaded exactly once)
            </label>
          </fieldset>
          <label for="dest-name">Name</label>
          <input id="dest-name" name="name" required maxLength={200} />
          {type === 'postgres' ? (
            <>
              <label for="dest-url">Warehouse URL (stored, never shown again)</label>
              <input
                id="dest-url"
                name="url"
                required
                placeholder="postgres://loader:secret@db.internal:5432/analytics"
              />
              <label for="dest-schema">Schema (optional)</label>
              <input id="dest-schema" name="schema" maxLength={63} placeholder={`inlet_${product.id.toLowerCase()}`} />
            </>
          ) : type === 'webhook' ? (
            <>
              <label for="dest-url">URL</label>
              <input id="dest-url" name="url" type="url" required placeholder="https://example.com/hooks/inlet" />
            </>
          ) : (
            <>
              <label for="dest-servers">Servers</label>
              <input id="dest-servers" name="servers" required placeholder="nats://127.0.0.1:4222" />
              <label for="dest-subject">Subject template</label>
              <input id="dest-subject" name="subject" required defaultValue="inlet.{product_id}.{canonical_name}" />
            </>
          )}
          <label for="dest-start">Start</label>
          <select id="dest-start" name="start" key={type}>
            <option value="now" selected={type !== 'postgres'}>
              With the next event
            </option>
            <option value="beginning" selected={type === 'postgres'}>
              From the first stored event
            </option>
          </select>
          <label for="dest-batch">
            {type === 'postgres' ? 'Messages per load (1–10,000, optional)' : 'Messages per request (1–1000, optional)'}
          </label>
          <input id="dest-batch" name="batch" type="number" min={1} max={type === 'postgres' ? 10_000 : 1000} />
          <div>
            <button type="submit" class="primary">
              Create destination
            </button>
          </div>
          <ErrorLine error={error} />
        </form>
        {secret !== undefined && <SecretNotice {...secret} onDone={() => setSecret(undefined)} />}
      </Section>
      <ErrorLine error={list.error} />
      {(list.data?.data ?? []).length === 0 && !list.loading && <p class="hint">No destination yet.</p>}
      {(list.data?.data ?? []).map((d) => (
        <DestinationCard
          key={d.id}
          product={product}
          destination={d}
          tick={tick}
          onChanged={list.reload}
          onSecret={(s) => setSecret({ name: d.name, secret: s })}
        />
      ))}
    </>
  );
}

function SecretNotice({ name, secret, onDone }: { name: string; secret: string; onDone: () => void }) {
  return (
    <div class="secret" role="status">
      <h3>Signing secret of {name}: copy it now</h3>
      <p>Shown only this once. Receivers verify the webhook-signature header with it (Standard Webhooks).</p>
      <div class="secret-row">
        <code class="secret-value">{secret}</code>
        <CopyButton text={secret} label="Copy secret" />
      </div>
      <button type="button" onClick={onDone}>
        I have stored it
      </button>
    </div>
  );
}

function DestinationCard({
  product,
  destination: d,
  tick,
  onChanged,
  onSecret,
}: {
  product: Product;
  destination: Destination;
  tick: number;
  onChanged: () => void;
  onSecret: (secret: string) => void;
}) {
  const path = productPath(product.id, `/destinations/${d.id}`);
  const { error, run } = useAction();
  const [showLog, setShowLog] = useState(false);
  const act = (work: () => Promise<unknown>) => () =>
    run(async () => {
      await work();
      onChanged();
    });
  return (
    <Section title={`${d.name} (${d.type})`} actions={<Badge tone={TONE[d.status]}>{d.status}</Badge>}>
      <dl class="facts">
        <dt>{targetOf(d)[0]}</dt>
        <dd>
          <code>{targetOf(d)[1]}</code>
        </dd>
        {d.disabled_reason !== null && (
          <>
            <dt>Disabled because</dt>
            <dd>{d.disabled_reason}</dd>
          </>
        )}
        <dt>Lag</dt>
        <dd>{d.lag === null ? '—' : `${d.lag} messages behind`}</dd>
        <dt>Delivered</dt>
        <dd>{d.delivered}</dd>
        <dt>{d.type === 'postgres' ? 'Last load' : 'Last success'}</dt>
        <dd>{time(d.last_success_at)}</dd>
        <dt>Last error</dt>
        <dd>
          {d.last_error === null
            ? '—'
            : `${d.last_error} (${time(d.last_error_at)}; ${d.consecutive_failures} failures in a row${d.next_attempt_at ? `, next attempt ${time(d.next_attempt_at)}` : ''})`}
        </dd>
        {(d.warnings ?? []).length > 0 && (
          <>
            <dt>Warnings</dt>
            <dd>
              {(d.warnings ?? []).map((w) => (
                <div key={w.at + w.message}>
                  {w.message} ({time(w.at)})
                </div>
              ))}
            </dd>
          </>
        )}
      </dl>
      <div class="actions">
        {d.status === 'active' && (
          <button type="button" onClick={act(() => patch(path, { status: 'paused' }))}>
            Pause
          </button>
        )}
        {d.status !== 'active' && (
          <button type="button" class="primary" onClick={act(() => patch(path, { status: 'active' }))}>
            {d.status === 'paused' ? 'Resume' : 'Re-enable'}
          </button>
        )}
        <form
          class="inline"
          onSubmit={(e) => {
            e.preventDefault();
            const from = String(new FormData(e.currentTarget).get('from') ?? '').trim();
            void act(() => post(`${path}/replay`, { from: from.length === 10 ? `${from}T00:00:00Z` : from }))();
          }}
        >
          <label for={`replay-${d.id}`}>Replay from</label>
          <input id={`replay-${d.id}`} name="from" required placeholder="2026-11-01 or a cursor" size={18} />
          <button type="submit">Replay</button>
        </form>
        {d.type === 'webhook' && (
          <button
            type="button"
            onClick={act(async () => {
              const answer = await post<Envelope<Destination>>(`${path}/rotate_secret`);
              if (answer.data.secret !== undefined) onSecret(answer.data.secret);
            })}
          >
            Rotate secret
          </button>
        )}
        <button type="button" aria-expanded={showLog} onClick={() => setShowLog(!showLog)}>
          {showLog ? 'Hide' : 'Show'} delivery log
        </button>
        <DeleteButton onDelete={act(() => del(path))} />
      </div>
      <ErrorLine error={error} />
      {showLog && <DeliveryLog path={`${path}/deliveries`} tick={tick} />}
    </Section>
  );
}

function DeleteButton({ onDelete }: { onDelete: () => void }) {
  const [confirming, setConfirming] = useState(false);
  return confirming ? (
    <span>
      <button type="button" class="danger" autoFocus onClick={onDelete}>
        Delete now
      </button>{' '}
      <button type="button" onClick={() => setConfirming(false)}>
        Keep
      </button>
    </span>
  ) : (
    <button type="button" class="danger" onClick={() => setConfirming(true)}>
      Delete
    </button>
  );
}

function DeliveryLog({ path, tick }: { path: string; tick: number }) {
  const log = useLoad(() => get<Page<Delivery>>(path, { limit: 50 }), [path, tick]);
  return (
    <>
      <ErrorLine error={log.error} />
      {(log.data?.data ?? []).length === 0 ? (
        <p class="hint">{log.loading ? 'Loading…' : 'No delivery yet.'}</p>
      ) : (
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col" class="num">
                  Attempt
                </th>
                <th scope="col" class="num">
                  Messages
                </th>
                <th scope="col">Outcome</th>
                <th scope="col" class="num">
                  Duration
                </th>
              </tr>
            </thead>
            <tbody>
              {log.data!.data.map((r) => (
                <tr key={r.id}>
                  <td>{time(r.attempted_at)}</td>
                  <td class="num">{r.attempt}</td>
                  <td class="num">{r.message_ids.length}</td>
                  <td>
                    <Badge tone={r.outcome === 'success' || r.outcome === 'delivered' ? 'ok' : 'bad'}>
                      {r.outcome}
                    </Badge>{' '}
                    {r.status ?? ''} {r.error ?? ''}
                  </td>
                  <td class="num">{r.duration_ms} ms</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
