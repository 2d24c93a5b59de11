// Traffic (contract §8): the product's traffic report as charts and a table, with the filters of
// GET /api/v2/traffic_reports (read here through GET /admin/v1/products/{id}/traffic_reports), the source's
// settings (connect or replace it), its sync runs, and "sync now".
import { useState } from 'preact/hooks';
import { ApiError, get, post, put, productPath, type Envelope, type Product } from '../api';
import { ColumnChart } from '../chart';
import { Badge, ErrorLine, Section, time, useAction, useLoad } from '../ui';

const DIMENSIONS = ['source', 'medium', 'campaign', 'landing_page'] as const;
type Dimension = (typeof DIMENSIONS)[number];

interface ReportRow {
  date?: string;
  source?: string;
  medium?: string;
  campaign?: string;
  landing_page?: string;
  sessions: number | null;
  users: number | null;
  pageviews: number | null;
  bounce_rate: number | null;
  avg_session_duration: number | null;
  conversions: number | null;
}
interface Report {
  data: ReportRow[];
  meta: {
    from: string;
    to: string;
    totals: ReportRow;
    provider: string | null;
    last_synced_at: string | null;
    next_cursor: string | null;
  };
}
interface Source {
  provider: 'plausible' | 'ga4';
  site_id?: string;
  property_id?: string;
  client_email?: string;
  base_url?: string;
  updated_at: string;
}
interface SyncRun {
  id: string;
  provider: string;
  kind: string;
  started_at: string;
  finished_at: string | null;
  from: string;
  to: string;
  rows: number | null;
  outcome: string;
  error: string | null;
}

const PAGE_ROWS = 25;
const COLUMNS: Array<[string, string]> = [
  ['sessions', 'Sessions'],
  ['users', 'Users'],
  ['pageviews', 'Page views'],
  ['bounce_rate', 'Bounce rate'],
  ['avg_session_duration', 'Avg. duration (s)'],
  ['conversions', 'Conversions'],
];

function SortHeader({
  field,
  label,
  sort,
  onSort,
  numeric = true,
}: {
  field: string;
  label: string;
  sort: string;
  onSort: (sort: string) => void;
  numeric?: boolean;
}) {
  const direction = sort === field ? 'ascending' : sort === `-${field}` ? 'descending' : 'none';
  return (
    <th scope="col" class={numeric ? 'num' : ''} aria-sort={direction}>
      <button type="button" class="sort" onClick={() => onSort(direction === 'descending' ? field : `-${field}`)}>
        {label}
        <span aria-hidden="true">{direction === 'descending' ? ' ▼' : direction === 'ascending' ? ' ▲' : ''}</span>
      </button>
    </th>
  );
}

const num = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined ? '—' : value.toLocaleString(undefined, { maximumFractionDigits: digits });

/** A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
function csvField(value: unknown): string {
  const text = value === null || value === undefined ? '' : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** Every row of the breakdown (all pages, in the table's order) as CSV, downloaded by the browser. */
async function downloadCsv(base: string, query: Record<string, string>, dimension: Dimension): Promise<number> {
  const rows: ReportRow[] = [];
  let cursor: string | null = null;
  do {
    const page: Report = await get<Report>(base, { ...query, group_by: dimension, limit: 1000, cursor });
    rows.push(...page.data);
    cursor = page.meta.next_cursor;
  } while (cursor !== null);
  const fields = [dimension, ...COLUMNS.map(([field]) => field)] as Array<keyof ReportRow>;
  const lines = [fields.join(','), ...rows.map((row) => fields.map((f) => csvField(row[f])).join(','))];
  const url = URL.createObjectURL(new Blob([`${lines.join('\r\n')}\r\n`], { type: 'text/csv;charset=utf-8' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = `traffic-${query.from}-${query.to}-by-${dimension}.csv`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
  return rows.length;
}

function daysAgo(n: number): string {
  return new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
}

export function TrafficPage({ product }: { product: Product }) {
  const [range, setRange] = useState({ from: daysAgo(28), to: daysAgo(1) });
  const [dimension, setDimension] = useState<Dimension>('source');
  const [filters, setFilters] = useState<Partial<Record<Dimension, string>>>({});
  const [generation, setGeneration] = useState(0);
  const base = productPath(product.id, '/traffic_reports');
  const daily = useLoad(
    () => get<Report>(base, { ...range, ...filters, group_by: 'date', sort: 'date', limit: 1000 }),
    [product.id, range, filters, generation],
  );
  // The table sorts by any column (the report's `sort`, "-" for descending) and pages with its cursor.
  const [sort, setSort] = useState('-sessions');
  const [pages, setPages] = useState<Array<string | null>>([null]);
  const cursor = pages[pages.length - 1] ?? null;
  const breakdown = useLoad(
    () => get<Report>(base, { ...range, ...filters, group_by: dimension, sort, limit: PAGE_ROWS, cursor }),
    [product.id, range, filters, dimension, sort, cursor, generation],
  );
  const resetPaging = () => setPages([null]);
  const [csv, setCsv] = useState<{ busy: boolean; status?: string; error?: unknown }>({ busy: false });
  const days = daily.data?.data ?? [];
  const totals = daily.data?.meta.totals;

  return (
    <>
      <h1>Traffic · {product.name}</h1>
      <form
        class="filters"
        aria-label="Report filters"
        onSubmit={(e) => {
          e.preventDefault();
          const data = new FormData(e.currentTarget);
          setRange({ from: String(data.get('from')), to: String(data.get('to')) });
          const next: Partial<Record<Dimension, string>> = {};
          for (const d of DIMENSIONS) {
            const value = String(data.get(d) ?? '').trim();
            if (value !== '') next[d] = value;
          }
          setFilters(next);
          resetPaging();
        }}
      >
        <label>
          From
          <input type="date" name="from" defaultValue={range.from} required />
        </label>
        <label>
          To
          <input type="date" name="to" defaultValue={range.to} required />
        </label>
        {DIMENSIONS.map((d) => (
          <label key={d}>
            {d.replace('_', ' ')}
            <input name={d} placeholder="any" size={10} />
          </label>
        ))}
        <button type="submit">Apply</button>
      </form>
      <ErrorLine error={daily.error ?? breakdown.error} />
      <Section title="Sessions and users by day">
        <p class="hint">
          {daily.data?.meta.provider
            ? `From ${daily.data.meta.provider}, last synced ${time(daily.data.meta.last_synced_at)}.`
            : 'No traffic source connected yet (below).'}{' '}
          Totals: {num(totals?.sessions)} sessions, {num(totals?.users)} users, {num(totals?.pageviews)} page views.
        </p>
        <div class="columns">
          <figure>
            <figcaption>Sessions</figcaption>
            <ColumnChart label="Sessions by day" points={days.map((r) => ({ x: r.date ?? '', y: r.sessions ?? 0 }))} />
          </figure>
          <figure>
            <figcaption>Users</figcaption>
            <ColumnChart label="Users by day" points={days.map((r) => ({ x: r.date ?? '', y: r.users ?? 0 }))} />
          </figure>
        </div>
      </Section>
      <Section
        title="Breakdown"
        actions={
          <label>
            By{' '}
            <select
              value={dimension}
              onChange={(e) => {
                setDimension(e.currentTarget.value as Dimension);
                setSort('-sessions');
                resetPaging();
              }}
            >
              {DIMENSIONS.map((d) => (
                <option value={d} key={d}>
                  {d.replace('_', ' ')}
                </option>
              ))}
            </select>
          </label>
        }
      >
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <SortHeader
                  field={dimension}
                  label={dimension.replace('_', ' ')}
                  sort={sort}
                  numeric={false}
                  onSort={(next) => (setSort(next), resetPaging())}
                />
                {COLUMNS.map(([field, label]) => (
                  <SortHeader
                    key={field}
                    field={field}
                    label={label}
                    sort={sort}
                    onSort={(next) => (setSort(next), resetPaging())}
                  />
                ))}
              </tr>
            </thead>
            <tbody>
              {(breakdown.data?.data ?? []).map((row) => (
                <tr key={row[dimension]}>
                  <td>{row[dimension]}</td>
                  <td class="num">{num(row.sessions)}</td>
                  <td class="num">{num(row.users)}</td>
                  <td class="num">{num(row.pageviews)}</td>
                  <td class="num">{row.bounce_rate === null ? '—' : `${Math.round(row.bounce_rate * 100)} %`}</td>
                  <td class="num">{num(row.avg_session_duration)}</td>
                  <td class="num">{num(row.conversions)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        <div class="actions">
          <button type="button" disabled={pages.length === 1} onClick={() => setPages(pages.slice(0, -1))}>
            Previous {PAGE_ROWS}
          </button>
          <button
            type="button"
            disabled={breakdown.data?.meta.next_cursor == null}
            onClick={() => setPages([...pages, breakdown.data!.meta.next_cursor])}
          >
            Next {PAGE_ROWS}
          </button>
          <span class="hint">Page {pages.length}</span>
          <span class="spacer" />
          <button
            type="button"
            disabled={csv.busy}
            onClick={async () => {
              setCsv({ busy: true });
              try {
                const n = await downloadCsv(base, { ...range, ...filters, sort }, dimension);
                setCsv({ busy: false, status: `Downloaded ${n} rows (every page, this order and these filters).` });
              } catch (error) {
                setCsv({ busy: false, error });
              }
            }}
          >
            {csv.busy ? 'Preparing CSV…' : 'Download CSV'}
          </button>
        </div>
        {csv.status !== undefined && (
          <p role="status" class="hint">
            {csv.status}
          </p>
        )}
        <ErrorLine error={csv.error} />
      </Section>
      <SourceSection product={product} onSynced={() => setGeneration((g) => g + 1)} />
    </>
  );
}

function SourceSection({ product, onSynced }: { product: Product; onSynced: () => void }) {
  const source = useLoad(
    () =>
      get<Envelope<Source>>(productPath(product.id, '/traffic_source')).catch((error: unknown) => {
        if (error instanceof ApiError && error.status === 404) return undefined;
        throw error;
      }),
    [product.id],
  );
  const runs = useLoad(
    () => get<Envelope<SyncRun[]>>(productPath(product.id, '/traffic_source/runs'), { limit: 20 }),
    [product.id],
  );
  // Syncing and saving the source share one error line (and a save waits for a sync, and the other way round).
  const action = useAction();
  const [result, setResult] = useState<string>();
  const [editing, setEditing] = useState(false);
  const [provider, setProvider] = useState<'plausible' | 'ga4'>('plausible');
  const current = source.data?.data;

  return (
    <>
      <Section
        title="Traffic source"
        actions={
          current !== undefined && (
            <button
              type="button"
              class="primary"
              disabled={action.busy}
              onClick={async () => {
                setResult(undefined);
                await action.run(async () => {
                  const answer = await post<Envelope<{ status: string; from: string; to: string; rows: number }>>(
                    productPath(product.id, '/traffic_source/sync'),
                  );
                  setResult(
                    `Sync ${answer.data.status}: ${answer.data.rows} rows for ${answer.data.from} – ${answer.data.to}.`,
                  );
                  onSynced();
                });
                runs.reload();
              }}
            >
              {action.busy ? 'Syncing…' : 'Sync now'}
            </button>
          )
        }
      >
        <ErrorLine error={source.error ?? action.error} />
        {result !== undefined && <p role="status">{result}</p>}
        {current === undefined || editing ? (
          <form
            class="stack"
            onSubmit={(e) => {
              e.preventDefault();
              const data = new FormData(e.currentTarget);
              const text = (name: string) => String(data.get(name) ?? '').trim() || undefined;
              void action.run(async () => {
                const body =
                  provider === 'plausible'
                    ? { provider, site_id: text('site_id'), api_key: text('api_key'), base_url: text('base_url') }
                    : {
                        provider,
                        property_id: text('property_id'),
                        credentials: JSON.parse(text('credentials') ?? '{}') as unknown,
                        base_url: text('base_url'),
                      };
                await put(productPath(product.id, '/traffic_source'), body);
                setEditing(false);
                source.reload();
              });
            }}
          >
            <p class="hint">
              {current === undefined
                ? 'No source is connected.'
                : 'Replace the source (secrets are stored, never shown again).'}
            </p>
            <label for="provider">Provider</label>
            <select
              id="provider"
              value={provider}
              onChange={(e) => setProvider(e.currentTarget.value as 'plausible' | 'ga4')}
            >
              <option value="plausible">Plausible</option>
              <option value="ga4">Google Analytics 4</option>
            </select>
            {provider === 'plausible' ? (
              <>
                <label for="site_id">Site (domain as in Plausible)</label>
                <input id="site_id" name="site_id" required />
                <label for="api_key">Stats API key</label>
                <input id="api_key" name="api_key" type="password" required autocomplete="off" />
              </>
            ) : (
              <>
                <label for="property_id">Property id</label>
                <input id="property_id" name="property_id" required inputMode="numeric" />
                <label for="credentials">Service-account key (JSON)</label>
                <textarea id="credentials" name="credentials" rows={4} required />
              </>
            )}
            <label for="base_url">API base URL (optional: self-hosted Plausible or a proxy)</label>
            <input id="base_url" name="base_url" type="url" />
            <div>
              <button type="submit" class="primary">
                Connect
              </button>{' '}
              {current !== undefined && (
                <button type="button" onClick={() => setEditing(false)}>
                  Cancel
                </button>
              )}
            </div>
          </form>
        ) : (
          <>
            <dl class="facts">
              <dt>Provider</dt>
              <dd>{current.provider}</dd>
              {current.site_id !== undefined && (
                <>
                  <dt>Site</dt>
                  <dd>{current.site_id}</dd>
                </>
              )}
              {current.property_id !== undefined && (
                <>
                  <dt>Property</dt>
                  <dd>{current.property_id}</dd>
                </>
              )}
              {current.client_email !== undefined && (
                <>
                  <dt>Service account</dt>
                  <dd>{current.client_email}</dd>
                </>
              )}
              {current.base_url !== undefined && (
                <>
                  <dt>Base URL</dt>
                  <dd>
                    <code>{current.base_url}</code>
                  </dd>
                </>
              )}
              <dt>Updated</dt>
              <dd>{time(current.updated_at)}</dd>
            </dl>
            <button type="button" onClick={() => (setProvider(current.provider), setEditing(true))}>
              Replace source
            </button>
          </>
        )}
      </Section>
      <Section title="Sync runs">
        <ErrorLine error={runs.error} />
        {(runs.data?.data ?? []).length === 0 ? (
          <p class="hint">No sync yet.</p>
        ) : (
          <div class="scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Started</th>
                  <th scope="col">Kind</th>
                  <th scope="col">Range</th>
                  <th scope="col" class="num">
                    Rows
                  </th>
                  <th scope="col">Outcome</th>
                </tr>
              </thead>
              <tbody>
                {runs.data!.data.map((run) => (
                  <tr key={run.id}>
                    <td>{time(run.started_at)}</td>
                    <td>
                      {run.kind} ({run.provider})
                    </td>
                    <td>
                      {run.from} – {run.to}
                    </td>
                    <td class="num">{num(run.rows)}</td>
                    <td>
                      <Badge tone={run.outcome === 'succeeded' ? 'ok' : run.outcome === 'failed' ? 'bad' : 'muted'}>
                        {run.outcome}
                      </Badge>{' '}
                      {run.error}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
    </>
  );
}
