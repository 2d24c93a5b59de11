// Live events (events-out §4): the product's events as they are committed, newest on top, with filters by
// name, subject and key, pause, and a detail panel with the full record; beside it the recent rejections
// (the durable list, then the live ones from the same stream).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import {
  get,
  productPath,
  type ApiKey,
  type Envelope,
  type InletEvent,
  type Page,
  type Product,
  type Rejection,
} from '../api';
import { openEventStream, type StreamState } from '../stream';
import { Badge, clock, ErrorLine, Json, time } from '../ui';

const KEEP = 500;

interface Filters {
  canonical_name?: string;
  subject?: string;
  key_id?: string;
}

/** `user:42` → subject_type user, subject_id 42 (the API needs both). */
function queryOf(filters: Filters): Record<string, string | undefined> {
  const subject = filters.subject?.trim() ?? '';
  const colon = subject.indexOf(':');
  return {
    canonical_name: filters.canonical_name?.trim() || undefined,
    key_id: filters.key_id || undefined,
    ...(colon > 0 ? { subject_type: subject.slice(0, colon), subject_id: subject.slice(colon + 1) } : {}),
  };
}

function mergeNewest(current: InletEvent[], incoming: InletEvent[]): InletEvent[] {
  const seen = new Set(current.map((e) => e.uuid));
  const fresh = incoming.filter((e) => !seen.has(e.uuid));
  return [...fresh, ...current].slice(0, KEEP);
}

export function EventsPage({ product }: { product: Product }) {
  const [filters, setFilters] = useState<Filters>({});
  const [events, setEvents] = useState<InletEvent[]>([]);
  const [rejections, setRejections] = useState<Rejection[]>([]);
  const [paused, setPaused] = useState(false);
  const [held, setHeld] = useState<InletEvent[]>([]);
  const [state, setState] = useState<{ state: StreamState; detail?: string }>({ state: 'connecting' });
  const [selected, setSelected] = useState<
    { kind: 'event'; value: InletEvent } | { kind: 'rejection'; value: Rejection }
  >();
  const [error, setError] = useState<unknown>();
  const [keys, setKeys] = useState<ApiKey[]>([]);
  const [older, setOlder] = useState<string | null>(null);
  const pausedRef = useRef(paused);
  pausedRef.current = paused;
  const query = useMemo(() => queryOf(filters), [filters]);
  const keyPrefix = useMemo(
    () => new Map(keys.map((k) => [k.id, `${k.prefix}…${k.name ? ` (${k.name})` : ''}`])),
    [keys],
  );

  useEffect(() => {
    get<Envelope<ApiKey[]>>(productPath(product.id, '/keys')).then((answer) => setKeys(answer.data), setError);
  }, [product.id]);

  useEffect(() => {
    setEvents([]);
    setHeld([]);
    setSelected(undefined);
    setError(undefined);
    // The stream first (it starts at the current end), then the recent page: together nothing falls between.
    const close = openEventStream(product.id, query, {
      onEvent(event) {
        if (pausedRef.current) setHeld((h) => [event, ...h].slice(0, KEEP));
        else setEvents((current) => mergeNewest(current, [event]));
      },
      onRejection(rejection) {
        if (query.key_id !== undefined && rejection.key_id !== query.key_id) return;
        setRejections((current) => [rejection, ...current.filter((r) => r.id !== rejection.id)].slice(0, 100));
      },
      onState(next, detail) {
        setState({ state: next, ...(detail === undefined ? {} : { detail }) });
      },
    });
    setOlder(null);
    get<Page<InletEvent>>(productPath(product.id, '/events'), { ...query, limit: 50 }).then((page) => {
      setEvents((current) => mergeNewest(page.data, current));
      setOlder(page.meta.next_cursor);
    }, setError);
    get<Page<Rejection>>(productPath(product.id, '/rejections'), { limit: 50, key_id: query.key_id }).then(
      (page) =>
        setRejections((current) =>
          [...current, ...page.data.filter((r) => !current.some((c) => c.id === r.id))].slice(0, 100),
        ),
      setError,
    );
    return close;
  }, [product.id, query]);

  const loadOlder = async () => {
    if (older === null) return;
    try {
      const page = await get<Page<InletEvent>>(productPath(product.id, '/events'), {
        ...query,
        limit: 50,
        cursor: older,
      });
      setEvents((current) => {
        const seen = new Set(current.map((e) => e.uuid));
        return [...current, ...page.data.filter((e) => !seen.has(e.uuid))];
      });
      setOlder(page.meta.next_cursor);
    } catch (failure) {
      setError(failure);
    }
  };

  const resume = () => {
    setEvents((current) => mergeNewest(current, held));
    setHeld([]);
    setPaused(false);
  };

  return (
    <>
      <h1>Live events · {product.name}</h1>
      <form
        class="filters"
        aria-label="Filters"
        onSubmit={(e) => {
          e.preventDefault();
          const data = new FormData(e.currentTarget);
          setFilters({
            canonical_name: String(data.get('name') ?? ''),
            subject: String(data.get('subject') ?? ''),
            key_id: String(data.get('key') ?? ''),
          });
        }}
      >
        <label>
          Name
          <input name="name" placeholder="project_created, user_signed_up" />
        </label>
        <label>
          Subject
          <input name="subject" placeholder="user:42" pattern="[a-z_]+:.+" title="type:id, e.g. user:42" />
        </label>
        <label>
          Key
          <select name="key">
            <option value="">Any key</option>
            {keys.map((k) => (
              <option value={k.id} key={k.id}>
                {k.kind} {k.prefix}…{k.name ? ` (${k.name})` : ''}
                {k.revoked_at ? ' — revoked' : ''}
              </option>
            ))}
          </select>
        </label>
        <button type="submit">Apply</button>
        <span class="spacer" />
        <span role="status" class="stream-state">
          {state.state === 'live' ? (
            <Badge tone="ok">live</Badge>
          ) : state.state === 'reconnecting' ? (
            <Badge tone="warn">reconnecting: {state.detail}</Badge>
          ) : (
            <Badge tone="muted">{state.state}</Badge>
          )}
        </span>
        {paused ? (
          <button type="button" class="primary" onClick={resume}>
            Resume ({held.length} new)
          </button>
        ) : (
          <button type="button" onClick={() => setPaused(true)}>
            Pause
          </button>
        )}
      </form>
      <ErrorLine error={error} />
      <div class="live">
        <section class="card" aria-label="Events">
          <h2>Events</h2>
          {events.length === 0 ? (
            <p class="hint">
              Waiting for events. Send one with an events key (the Keys page shows a curl command); it shows here within
              a second or two.
            </p>
          ) : (
            <ol class="feed" aria-live="polite" aria-relevant="additions">
              {events.map((e) => (
                <li key={e.uuid}>
                  <button
                    type="button"
                    class={`row ${selected?.kind === 'event' && selected.value.uuid === e.uuid ? 'selected' : ''}`}
                    onClick={() => setSelected({ kind: 'event', value: e })}
                    data-uuid={e.uuid}
                  >
                    <time dateTime={e.received_at}>{clock(e.received_at)}</time>
                    <strong>{e.canonical_name}</strong>
                    <span>
                      {e.subject_type}:{e.subject_id}
                    </span>
                    <span class="muted">{e.key_id === null ? e.source : (keyPrefix.get(e.key_id) ?? e.key_id)}</span>
                  </button>
                </li>
              ))}
            </ol>
          )}
          {older !== null && (
            <button type="button" onClick={() => void loadOlder()}>
              Older events
            </button>
          )}
        </section>
        <section class="card detail" aria-label="Detail">
          <h2>Detail</h2>
          {selected === undefined ? (
            <p class="hint">Select an event or a rejection to see the full record.</p>
          ) : selected.kind === 'event' ? (
            <EventDetail
              productId={product.id}
              event={selected.value}
              keyLabel={
                selected.value.key_id === null ? null : (keyPrefix.get(selected.value.key_id) ?? selected.value.key_id)
              }
            />
          ) : (
            <>
              <dl class="facts">
                <dt>Code</dt>
                <dd>
                  <code>{selected.value.code}</code> ({selected.value.severity})
                </dd>
                <dt>Reason</dt>
                <dd>{selected.value.detail}</dd>
                <dt>Received</dt>
                <dd>{time(selected.value.received_at)}</dd>
                <dt>Route</dt>
                <dd>
                  {selected.value.route}
                  {selected.value.index === null ? '' : ` · item ${selected.value.index}`}
                </dd>
              </dl>
              <Json value={selected.value.item} label="The item as received" />
            </>
          )}
        </section>
        <section class="card" aria-label="Recent rejections">
          <h2>Recent rejections</h2>
          {rejections.length === 0 ? (
            <p class="hint">None recorded.</p>
          ) : (
            <ol class="feed">
              {rejections.map((r) => (
                <li key={r.id}>
                  <button type="button" class="row" onClick={() => setSelected({ kind: 'rejection', value: r })}>
                    <time dateTime={r.received_at}>{clock(r.received_at)}</time>
                    <Badge tone={r.severity === 'warning' ? 'warn' : 'bad'}>{r.code}</Badge>
                    <span class="clip">{r.detail}</span>
                  </button>
                </li>
              ))}
            </ol>
          )}
        </section>
      </div>
    </>
  );
}

function EventDetail({
  event,
  keyLabel,
  productId,
}: {
  event: InletEvent;
  keyLabel: string | null;
  productId: string;
}) {
  return (
    <>
      <dl class="facts">
        <dt>Name</dt>
        <dd>
          <code>{event.canonical_name}</code> ({event.event_type} / {event.action})
        </dd>
        <dt>Subject</dt>
        <dd>
          {event.subject_type}:{event.subject_id}
          {event.subject_type === 'user' && (
            <>
              {' '}
              <a href={`#/p/${productId}/users/id/${encodeURIComponent(event.subject_id)}`}>open user</a>
            </>
          )}
        </dd>
        <dt>Idempotency key</dt>
        <dd>{event.external_id === null ? '— (none sent)' : <code>{event.external_id}</code>}</dd>
        <dt>Occurred</dt>
        <dd>{time(event.occurred_at)}</dd>
        <dt>Received</dt>
        <dd>{time(event.received_at)}</dd>
        <dt>Source · key</dt>
        <dd>
          {event.source} · {keyLabel ?? '—'}
        </dd>
        <dt>UUID</dt>
        <dd>
          <code>{event.uuid}</code>
        </dd>
      </dl>
      <h3>Properties</h3>
      <Json value={event.properties} label="Properties" />
      {event.context !== undefined && (
        <>
          <h3>Context</h3>
          <Json value={event.context} label="Context" />
        </>
      )}
      <h3>Full record</h3>
      <Json value={event} label="Full record" />
    </>
  );
}
