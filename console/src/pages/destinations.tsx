// Destinations (events-out §6, warehouses.md): each one's status, lag, last success (a warehouse's last load), error
// and warnings, and a PostgreSQL warehouse's columns added and widened; pause, resume, re-enable, replay, rotate the
// secret, delete; its delivery log. Its create and edit forms are in destination-forms.tsx.
import { useEffect, useState } from 'preact/hooks';
import { del, get, patch, post, productPath, type Envelope, type Page, type Product } from '../api';
import { Badge, CopyButton, ErrorLine, Section, time, useAction, useLoad } from '../ui';
import { CreateForm, EditForm, KINDS, grouped, isWarehouse, type Destination } from './destination-forms';

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

const TONE = { active: 'ok', paused: 'muted', disabled: 'bad' } as const;

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
  const [secret, setSecret] = useState<{ name: string; secret: string }>();

  return (
    <>
      <h1>Destinations · {product.name}</h1>
      <Section title="Create a destination">
        <CreateForm
          product={product}
          onCreated={(created) => {
            if (created.secret !== undefined) setSecret({ name: created.name, secret: created.secret });
            list.reload();
          }}
        />
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
  const [editing, setEditing] = useState(false);
  const act = (work: () => Promise<unknown>) => () =>
    run(async () => {
      await work();
      onChanged();
    });
  return (
    <Section title={`${d.name} (${d.type})`} actions={<Badge tone={TONE[d.status]}>{d.status}</Badge>}>
      <Facts d={d} />
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
        <button type="button" aria-expanded={editing} onClick={() => setEditing(!editing)}>
          {editing ? 'Close the editor' : 'Edit'}
        </button>
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
      {editing && (
        <EditForm
          path={path}
          destination={d}
          onSaved={() => {
            setEditing(false);
            onChanged();
          }}
        />
      )}
      {showLog && <DeliveryLog path={`${path}/deliveries`} tick={tick} />}
    </Section>
  );
}

/** What a destination shows: its target, state and, for a warehouse, what its loads did to the tables. */
function Facts({ d }: { d: Destination }) {
  const warehouse = isWarehouse(d.type);
  const warnings = d.warnings ?? [];
  return (
    <dl class="facts">
      <dt>{targetOf(d)[0]}</dt>
      <dd>
        <code>{targetOf(d)[1]}</code>
      </dd>
      <dt>Batch</dt>
      <dd>
        {KINDS[d.type].unit.toLowerCase()}: up to {grouped(d.batch.max_messages)}, waiting up to{' '}
        {grouped(d.batch.max_wait_ms)} ms for more
      </dd>
      {d.disabled_reason !== null && (
        <>
          <dt>Disabled because</dt>
          <dd>{d.disabled_reason}</dd>
        </>
      )}
      <dt>Lag</dt>
      <dd>{d.lag === null ? '—' : `${d.lag} messages behind`}</dd>
      <dt>{warehouse ? 'Loaded' : 'Delivered'}</dt>
      <dd>{d.delivered} messages</dd>
      <dt>{warehouse ? 'Last load' : 'Last success'}</dt>
      <dd>{time(d.last_success_at)}</dd>
      {d.type === 'postgres' && (
        <>
          <dt>Columns added</dt>
          <dd>{d.columns_added ?? 0}</dd>
          <dt>Type widenings</dt>
          <dd>{d.type_widenings ?? 0}</dd>
        </>
      )}
      {d.type === 'parquet' && (
        <>
          <dt>Columns</dt>
          <dd>fixed: every file has the events columns, so none is added or widened</dd>
        </>
      )}
      <dt>Last error</dt>
      <dd>
        {d.last_error === null
          ? '—'
          : `${d.last_error} (${time(d.last_error_at)}; ${d.consecutive_failures} failures in a row${d.next_attempt_at ? `, next attempt ${time(d.next_attempt_at)}` : ''})`}
      </dd>
      {(warehouse || warnings.length > 0) && (
        <>
          <dt>Warnings</dt>
          <dd>
            {warnings.length === 0
              ? 'none'
              : warnings.map((w) => (
                  <div key={w.at + w.message}>
                    {w.message} ({time(w.at)})
                  </div>
                ))}
          </dd>
        </>
      )}
    </dl>
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
