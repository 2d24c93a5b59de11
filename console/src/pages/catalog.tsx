// The events catalogue (governance.md §1): every name the product stored, with counts, first/last seen,
// sources and keys (GET …/catalog/events, sorted and filtered by prefix, paged), one name's property paths
// and their observed JSON types (GET …/catalog/events/{name}), and the identify trait paths
// (GET …/catalog/traits). Counts lag ingest by the catalogue's flush interval; no value is ever kept.
import { useState } from 'preact/hooks';
import { get, productPath, type ApiKey, type Envelope, type Product } from '../api';
import { navigate } from '../router';
import { ErrorLine, Section, time, useLoad } from '../ui';

export interface CatalogEvent {
  canonical_name: string;
  event_type: string;
  action: string;
  count: number;
  first_seen: string;
  last_seen: string;
  sources: string[];
  key_ids: string[];
}
interface CatalogProperty {
  path: string;
  types: Record<string, number>;
  first_seen: string;
  last_seen: string;
}
type CatalogPage = { data: CatalogEvent[]; meta: { next_cursor: string | null; overflow: number } };
type Sort = 'last_seen' | 'count' | 'name';

export function CatalogPage({ product, initial }: { product: Product; initial: string }) {
  const selected = initial === '' ? undefined : decodeURIComponent(initial);
  const [sort, setSort] = useState<Sort>('last_seen');
  const [prefix, setPrefix] = useState('');
  const [cursors, setCursors] = useState<Array<string | null>>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const list = useLoad(
    () => get<CatalogPage>(productPath(product.id, '/catalog/events'), { sort, prefix, cursor, limit: 50 }),
    [product.id, sort, prefix, cursor],
  );
  const rows = list.data?.data ?? [];
  const overflow = list.data?.meta.overflow ?? 0;

  return (
    <>
      <h1>Events catalogue · {product.name}</h1>
      <form
        class="filters"
        aria-label="Catalogue filters"
        onSubmit={(e) => {
          e.preventDefault();
          const data = new FormData(e.currentTarget);
          setPrefix(String(data.get('prefix') ?? '').trim());
          setSort(String(data.get('sort') ?? 'last_seen') as Sort);
          setCursors([null]);
        }}
      >
        <label>
          Name starts with
          <input name="prefix" defaultValue={prefix} placeholder="order_" />
        </label>
        <label>
          Sort by
          <select name="sort" defaultValue={sort}>
            <option value="last_seen">last seen, newest first</option>
            <option value="count">count, largest first</option>
            <option value="name">name</option>
          </select>
        </label>
        <button type="submit">Apply</button>
        <button type="button" onClick={list.reload}>
          Refresh
        </button>
      </form>
      <p class="hint">
        Every event name stored in this product, built off the request path: counts lag ingest by a few seconds.
        Property values are never kept, only their JSON types.
      </p>
      <div class="columns">
        <Section title="Event names">
          <ErrorLine error={list.error} />
          {overflow > 0 && (
            <p class="error" role="status">
              {overflow.toLocaleString()} events were not catalogued: the product reached the catalogue's limit of names
              (INLET_CATALOG_MAX_EVENTS).
            </p>
          )}
          {rows.length === 0 ? (
            <p class="hint">
              {list.loading ? 'Loading…' : prefix === '' ? 'No event stored yet.' : `No name starts with “${prefix}”.`}
            </p>
          ) : (
            <div class="scroll">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col" class="num">
                      Count
                    </th>
                    <th scope="col">First seen</th>
                    <th scope="col">Last seen</th>
                    <th scope="col">Sources</th>
                  </tr>
                </thead>
                <tbody>
                  {rows.map((e) => (
                    <tr key={e.canonical_name} class={e.canonical_name === selected ? 'selected' : undefined}>
                      <td>
                        <a
                          href={`#/p/${product.id}/catalog/${encodeURIComponent(e.canonical_name)}`}
                          aria-current={e.canonical_name === selected ? 'true' : undefined}
                        >
                          {e.canonical_name}
                        </a>
                      </td>
                      <td class="num">{e.count.toLocaleString()}</td>
                      <td>{time(e.first_seen)}</td>
                      <td>{time(e.last_seen)}</td>
                      <td>{e.sources.join(', ')}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <div class="actions">
            <button type="button" disabled={cursors.length === 1} onClick={() => setCursors(cursors.slice(0, -1))}>
              Previous 50
            </button>
            <button
              type="button"
              disabled={list.data?.meta.next_cursor == null}
              onClick={() => setCursors([...cursors, list.data!.meta.next_cursor])}
            >
              Next 50
            </button>
          </div>
        </Section>
        {selected === undefined ? (
          <TraitsSection product={product} />
        ) : (
          <EventDetail product={product} name={selected} />
        )}
      </div>
    </>
  );
}

function typesOf(types: Record<string, number>): string {
  return Object.entries(types)
    .sort((a, b) => b[1] - a[1])
    .map(([type, n]) => `${type} ${n.toLocaleString()}`)
    .join(', ');
}

function PropertiesTable({ properties, label }: { properties: CatalogProperty[]; label: string }) {
  if (properties.length === 0) return <p class="hint">None seen.</p>;
  return (
    <div class="scroll">
      <table aria-label={label}>
        <thead>
          <tr>
            <th scope="col">Path</th>
            <th scope="col">JSON types seen (count)</th>
            <th scope="col">Last seen</th>
          </tr>
        </thead>
        <tbody>
          {properties.map((p) => (
            <tr key={p.path}>
              <td>
                <code>{p.path}</code>
              </td>
              <td>{typesOf(p.types)}</td>
              <td>{time(p.last_seen)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function EventDetail({ product, name }: { product: Product; name: string }) {
  const detail = useLoad(
    () =>
      get<Envelope<CatalogEvent & { properties: CatalogProperty[]; properties_overflow: number }>>(
        productPath(product.id, `/catalog/events/${encodeURIComponent(name)}`),
      ),
    [product.id, name],
  );
  // Key ids named as the keys page names them (prefix and name), when the key is still listed.
  const keys = useLoad(
    () => get<Envelope<ApiKey[]>>(productPath(product.id, '/keys')).catch(() => ({ data: [] as ApiKey[] })),
    [product.id],
  );
  const keyLabel = (id: string) => {
    const key = keys.data?.data.find((k) => k.id === id);
    return key === undefined ? id : `${key.prefix}…${key.name === null ? '' : ` (${key.name})`}`;
  };
  const d = detail.data?.data;
  return (
    <Section
      title={`Event ${name}`}
      actions={
        <button type="button" onClick={() => navigate(`/p/${product.id}/catalog`)}>
          Close
        </button>
      }
    >
      <ErrorLine error={detail.error} />
      {d !== undefined && (
        <>
          <dl class="facts">
            <dt>Type · action</dt>
            <dd>
              <code>{d.event_type}</code> · <code>{d.action}</code>
            </dd>
            <dt>Count</dt>
            <dd>{d.count.toLocaleString()}</dd>
            <dt>First seen</dt>
            <dd>{time(d.first_seen)}</dd>
            <dt>Last seen</dt>
            <dd>{time(d.last_seen)}</dd>
            <dt>Sources</dt>
            <dd>{d.sources.join(', ') || '—'}</dd>
            <dt>Keys</dt>
            <dd>
              {d.key_ids.length === 0
                ? '—'
                : d.key_ids.map((k) => (
                    <code key={k} class="chip" title={k}>
                      {keyLabel(k)}
                    </code>
                  ))}
            </dd>
          </dl>
          <h3>Properties</h3>
          {d.properties_overflow > 0 && (
            <p class="hint">
              {d.properties_overflow.toLocaleString()} observations past the limit of paths per name
              (INLET_CATALOG_MAX_PROPERTIES).
            </p>
          )}
          <PropertiesTable properties={d.properties} label={`Properties of ${name}`} />
          <p class="actions">
            <a href={`#/p/${product.id}/plan`}>Plan this event (tracking plan)</a>
          </p>
        </>
      )}
    </Section>
  );
}

function TraitsSection({ product }: { product: Product }) {
  const traits = useLoad(
    () => get<{ data: CatalogProperty[]; meta: { overflow: number } }>(productPath(product.id, '/catalog/traits')),
    [product.id],
  );
  return (
    <Section title="Identify traits">
      <ErrorLine error={traits.error} />
      <p class="hint">Choose an event name for its properties. The trait paths sent with identify:</p>
      {traits.data !== undefined && <PropertiesTable properties={traits.data.data} label="Trait paths" />}
    </Section>
  );
}
