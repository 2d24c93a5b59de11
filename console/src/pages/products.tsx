// Products: the list, and a form to create one (then straight to its keys, the next thing a newcomer needs).
import { post, type Envelope, type Product } from '../api';
import { navigate } from '../router';
import { ErrorLine, Section, time, useAction } from '../ui';

export function ProductsPage({ products, onCreated }: { products: Product[]; onCreated: () => void }) {
  const { error, run } = useAction();
  return (
    <>
      <h1>Products</h1>
      <Section title="Create a product">
        <form
          class="inline"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget;
            void run(async () => {
              const created = await post<Envelope<Product>>('products', {
                name: String(new FormData(form).get('name') ?? ''),
              });
              form.reset();
              onCreated();
              navigate(`/p/${created.data.id}/keys`);
            });
          }}
        >
          <label for="product-name">Name</label>
          <input id="product-name" name="name" required maxLength={200} placeholder="Acme web app" />
          <button type="submit" class="primary">
            Create product
          </button>
        </form>
        <ErrorLine error={error} />
      </Section>
      <Section title={`All products (${products.length})`}>
        {products.length === 0 ? (
          <p>No product yet: create one above, then a key to send events with.</p>
        ) : (
          <div class="scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Id</th>
                  <th scope="col">Created</th>
                  <th scope="col">Events kept</th>
                  <th scope="col">Open</th>
                </tr>
              </thead>
              <tbody>
                {products.map((p) => (
                  <tr key={p.id}>
                    <td>
                      <a href={`#/p/${p.id}/events`}>{p.name}</a>
                    </td>
                    <td>
                      <code>{p.id}</code>
                    </td>
                    <td>{time(p.created_at)}</td>
                    <td>
                      <a href={`#/p/${p.id}/privacy`}>
                        {p.retention?.events_days == null ? 'forever' : `${p.retention.events_days} days`}
                      </a>
                    </td>
                    <td class="links">
                      <a href={`#/p/${p.id}/keys`}>Keys</a> <a href={`#/p/${p.id}/users`}>Users</a>{' '}
                      <a href={`#/p/${p.id}/traffic`}>Traffic</a>
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
