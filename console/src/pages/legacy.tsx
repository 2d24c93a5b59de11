// Legacy usage (contract §5): which keys still send deprecated flat event names, how often, last seen.
import { get, productPath, type Envelope, type Product } from '../api';
import { ErrorLine, Section, time, useLoad } from '../ui';

interface Usage {
  key_id: string;
  key_prefix: string | null;
  key_name: string | null;
  event_name: string;
  count: number;
  first_seen_at: string;
  last_seen_at: string;
}

export function LegacyPage({ product }: { product: Product }) {
  const usage = useLoad(() => get<Envelope<Usage[]>>(productPath(product.id, '/legacy_usage')), [product.id]);
  const rows = usage.data?.data ?? [];
  return (
    <>
      <h1>Legacy usage · {product.name}</h1>
      <Section title="Keys still sending legacy flat names">
        <ErrorLine error={usage.error} />
        {rows.length === 0 ? (
          <p class="hint">{usage.loading ? 'Loading…' : 'None: every key sends preferred names.'}</p>
        ) : (
          <div class="scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Key</th>
                  <th scope="col">Legacy name</th>
                  <th scope="col" class="num">
                    Count
                  </th>
                  <th scope="col">First seen</th>
                  <th scope="col">Last seen</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((u) => (
                  <tr key={`${u.key_id}${u.event_name}`}>
                    <td>
                      <code>{u.key_prefix ?? u.key_id}…</code> {u.key_name ?? ''}
                    </td>
                    <td>
                      <code>{u.event_name}</code>
                    </td>
                    <td class="num">{u.count.toLocaleString()}</td>
                    <td>{time(u.first_seen_at)}</td>
                    <td>{time(u.last_seen_at)}</td>
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
