// The tracking plan (governance.md §2): the current version (GET …/tracking_plan), an editor that stores a new
// version (PUT; a refused plan's problem+json pointers are shown, e.g. /events/order_completed/properties/type),
// a draft from the catalogue to start from (POST …/tracking_plan/draft, never applied by itself), the
// versions (GET …/tracking_plan/versions) and the violations: warnings and refusals (GET …/violations).
import { useEffect, useState } from 'preact/hooks';
import { ApiError, get, post, productPath, put, type Envelope, type Product } from '../api';
import { Badge, ErrorLine, Json, Section, time, useAction, useLoad } from '../ui';

type Mode = 'off' | 'warn' | 'enforce';
type Unplanned = 'allow' | 'warn' | 'reject';
interface PlanBody {
  mode: Mode;
  unplanned?: Unplanned;
  events?: Record<string, { properties: unknown; mode?: Mode }>;
  traits?: unknown;
}
interface PlanVersion extends PlanBody {
  version: number;
  created_at: string;
}
interface Violation {
  id: string;
  received_at: string;
  key_id: string | null;
  route: string;
  canonical_name: string;
  code: 'tracking_plan_violation' | 'unplanned_event';
  severity: 'warning' | 'rejected';
  plan_version: number;
  message_id: string | null;
  errors: Array<{ pointer: string; message: string }>;
}

const MODES: Array<[Mode, string]> = [
  ['off', 'off: not checked'],
  ['warn', 'warn: stored, violation recorded'],
  ['enforce', 'enforce: refused'],
];
const UNPLANNED: Array<[Unplanned, string]> = [
  ['allow', 'allow: stored, nothing recorded'],
  ['warn', 'warn: stored, recorded as unplanned_event'],
  ['reject', 'reject: refused as unplanned_event'],
];
const EXAMPLE = {
  order_completed: {
    properties: {
      type: 'object',
      required: ['total'],
      properties: { total: { type: 'number' }, currency: { type: 'string' } },
    },
  },
};

const pretty = (value: unknown) => JSON.stringify(value, null, 2);

/** A JSON field of the editor, parsed; a syntax error names the field. */
class FieldError extends Error {}
function parseField(text: string, field: string): unknown {
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new FieldError(`${field}: not JSON (${(error as Error).message}).`);
  }
}

export function PlanPage({ product }: { product: Product }) {
  const current = useLoad(
    () =>
      get<Envelope<PlanVersion>>(productPath(product.id, '/tracking_plan')).catch((error: unknown) => {
        if (error instanceof ApiError && error.status === 404) return undefined;
        throw error;
      }),
    [product.id],
  );
  const versions = useLoad(
    () => get<Envelope<PlanVersion[]>>(productPath(product.id, '/tracking_plan/versions')),
    [product.id],
  );
  const plan = current.data?.data;
  const [mode, setMode] = useState<Mode>('warn');
  const [unplanned, setUnplanned] = useState<Unplanned>('allow');
  const [events, setEvents] = useState('');
  const [traits, setTraits] = useState('');
  const { error, busy, run } = useAction();
  const [status, setStatus] = useState<string>();

  // The editor starts from the current version (or an example when there is none).
  useEffect(() => {
    if (current.loading) return;
    setMode(plan?.mode ?? 'warn');
    setUnplanned(plan?.unplanned === undefined ? 'allow' : (plan.unplanned as Unplanned));
    setEvents(pretty(plan?.events ?? EXAMPLE));
    setTraits(plan?.traits === undefined ? '' : pretty(plan.traits));
  }, [current.loading, plan?.version]);

  const save = () => {
    setStatus(undefined);
    return run(async () => {
      const body: PlanBody = { mode, unplanned };
      const parsedEvents = parseField(events, 'Events (JSON)');
      const parsedTraits = parseField(traits, 'Traits schema (JSON)');
      if (parsedEvents !== undefined) body.events = parsedEvents as PlanBody['events'];
      if (parsedTraits !== undefined) body.traits = parsedTraits;
      const saved = await put<Envelope<PlanVersion>>(productPath(product.id, '/tracking_plan'), body);
      setStatus(`Saved as version ${saved.data.version} (mode ${saved.data.mode}); applied at once.`);
      current.reload();
      versions.reload();
    });
  };

  return (
    <>
      <h1>Tracking plan · {product.name}</h1>
      <Section title="Current plan">
        <ErrorLine error={current.error} />
        {plan === undefined ? (
          <p class="hint">
            {current.loading
              ? 'Loading…'
              : 'No plan yet: every event is accepted. Write one below, or start from a draft built from the catalogue.'}
          </p>
        ) : (
          <dl class="facts">
            <dt>Version</dt>
            <dd data-testid="plan-version">{plan.version}</dd>
            <dt>Saved</dt>
            <dd>{time(plan.created_at)}</dd>
            <dt>Mode</dt>
            <dd>
              <Badge tone={plan.mode === 'enforce' ? 'bad' : plan.mode === 'warn' ? 'warn' : 'muted'}>
                {plan.mode}
              </Badge>
            </dd>
            <dt>Unplanned events</dt>
            <dd>{plan.unplanned ?? 'allow'}</dd>
            <dt>Events planned</dt>
            <dd>
              {Object.keys(plan.events ?? {}).map((name) => (
                <code key={name} class="chip">
                  {name}
                </code>
              ))}
            </dd>
          </dl>
        )}
      </Section>
      <Section title="Edit the plan">
        <form
          class="stack"
          onSubmit={(e) => {
            e.preventDefault();
            void save();
          }}
        >
          <label for="plan-mode">Mode</label>
          <select id="plan-mode" value={mode} onChange={(e) => setMode(e.currentTarget.value as Mode)}>
            {MODES.map(([value, label]) => (
              <option value={value} key={value}>
                {label}
              </option>
            ))}
          </select>
          <label for="plan-unplanned">Events the plan does not name</label>
          <select
            id="plan-unplanned"
            value={unplanned}
            onChange={(e) => setUnplanned(e.currentTarget.value as Unplanned)}
          >
            {UNPLANNED.map(([value, label]) => (
              <option value={value} key={value}>
                {label}
              </option>
            ))}
          </select>
          <label for="plan-events">Events (JSON)</label>
          <p class="hint" id="plan-events-hint">
            An object by canonical name:{' '}
            <code>{'{"order_completed": {"properties": <JSON Schema 2020-12>, "mode"?: "warn"}}'}</code>
          </p>
          <textarea
            id="plan-events"
            aria-describedby="plan-events-hint"
            rows={14}
            spellcheck={false}
            value={events}
            onInput={(e) => setEvents(e.currentTarget.value)}
          />
          <label for="plan-traits">Traits schema (JSON, optional)</label>
          <textarea
            id="plan-traits"
            rows={4}
            spellcheck={false}
            value={traits}
            onInput={(e) => setTraits(e.currentTarget.value)}
            placeholder='{"type": "object", "properties": {"email": {"type": "string"}}}'
          />
          <div class="actions">
            <button type="submit" class="primary" disabled={busy}>
              Save as a new version
            </button>
            <button
              type="button"
              disabled={busy}
              onClick={() =>
                run(async () => {
                  const draft = await post<Envelope<PlanBody>>(productPath(product.id, '/tracking_plan/draft'));
                  setEvents(pretty(draft.data.events ?? {}));
                  setTraits(draft.data.traits === undefined ? '' : pretty(draft.data.traits));
                  setStatus(
                    'Draft from the catalogue loaded into the editor (not saved): review it, choose a mode, then save.',
                  );
                })
              }
            >
              Start from a draft (catalogue)
            </button>
          </div>
          <ErrorLine error={error} />
          {status !== undefined && (
            <p role="status" class="hint">
              {status}
            </p>
          )}
        </form>
      </Section>
      <ViolationsSection product={product} />
      <Section title="Versions">
        <ErrorLine error={versions.error} />
        {(versions.data?.data ?? []).length === 0 ? (
          <p class="hint">None yet.</p>
        ) : (
          <ol class="feed">
            {versions.data!.data.map((v) => (
              <li key={v.version}>
                <details>
                  <summary>
                    Version {v.version} · {v.mode} · {time(v.created_at)}
                  </summary>
                  <Json value={v} label={`Version ${v.version}`} />
                </details>
              </li>
            ))}
          </ol>
        )}
      </Section>
    </>
  );
}

function ViolationsSection({ product }: { product: Product }) {
  const [filters, setFilters] = useState<{ canonical_name: string; code: string }>({ canonical_name: '', code: '' });
  const [rows, setRows] = useState<Violation[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [error, setError] = useState<unknown>();
  const [loaded, setLoaded] = useState(false);
  const load = async (after: string | null) => {
    setError(undefined);
    try {
      const page = await get<{ data: Violation[]; meta: { next_cursor: string | null } }>(
        productPath(product.id, '/violations'),
        { ...filters, limit: 50, cursor: after },
      );
      setRows((current) => (after === null ? page.data : [...current, ...page.data]));
      setCursor(page.meta.next_cursor);
    } catch (failure) {
      setError(failure);
    } finally {
      setLoaded(true);
    }
  };
  useEffect(() => {
    void load(null);
  }, [product.id, filters.canonical_name, filters.code]);

  return (
    <Section
      title="Violations"
      actions={
        <button type="button" onClick={() => void load(null)}>
          Refresh
        </button>
      }
    >
      <form
        class="filters"
        aria-label="Violation filters"
        onSubmit={(e) => {
          e.preventDefault();
          const data = new FormData(e.currentTarget);
          setFilters({
            canonical_name: String(data.get('canonical_name') ?? '').trim(),
            code: String(data.get('code') ?? ''),
          });
        }}
      >
        <label>
          Event name
          <input name="canonical_name" placeholder="order_completed" />
        </label>
        <label>
          Code
          <select name="code">
            <option value="">any</option>
            <option value="tracking_plan_violation">tracking_plan_violation</option>
            <option value="unplanned_event">unplanned_event</option>
          </select>
        </label>
        <button type="submit">Apply</button>
      </form>
      <ErrorLine error={error} />
      {rows.length === 0 ? (
        <p class="hint">{loaded ? 'No violation recorded (kept INLET_VIOLATIONS_RETENTION_DAYS).' : 'Loading…'}</p>
      ) : (
        <div class="scroll">
          <table class="wide" aria-label="Violations, newest first">
            <thead>
              <tr>
                <th scope="col">Received</th>
                <th scope="col">Event</th>
                <th scope="col">Outcome</th>
                <th scope="col">Errors (pointer: message)</th>
                <th scope="col">Plan</th>
                <th scope="col">Route · key</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((v) => (
                <tr key={v.id}>
                  <td>{time(v.received_at)}</td>
                  <td>
                    <code>{v.canonical_name}</code>
                  </td>
                  <td>
                    <Badge tone={v.severity === 'rejected' ? 'bad' : 'warn'}>{v.severity}</Badge>{' '}
                    <span class="muted">{v.code}</span>
                  </td>
                  <td>
                    <ul class="plain">
                      {v.errors.map((e) => (
                        <li key={`${e.pointer}${e.message}`}>
                          {e.pointer === '' ? (
                            ''
                          ) : (
                            <>
                              <code>{e.pointer}</code>:{' '}
                            </>
                          )}
                          {e.message}
                        </li>
                      ))}
                    </ul>
                  </td>
                  <td class="num">v{v.plan_version}</td>
                  <td>
                    <code>{v.route}</code> {v.key_id === null ? '' : <code>{v.key_id}</code>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor !== null && (
        <button type="button" onClick={() => void load(cursor)}>
          Older violations
        </button>
      )}
    </Section>
  );
}
