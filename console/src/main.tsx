// The Inlet console: a small single-page app over the admin API (issue 14). Preact for a 4 KB runtime with
// React's model; hash routes; no state library (each page loads what it shows).
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, forgetToken, get, saveToken, storedToken, type Envelope, type Product } from './api';
import { navigate, useRoute } from './router';
import { ErrorLine, messageOf } from './ui';
import { ProductsPage } from './pages/products';
import { KeysPage } from './pages/keys';
import { EventsPage } from './pages/events';
import { UsersPage } from './pages/users';
import { TrafficPage } from './pages/traffic';
import { DestinationsPage } from './pages/destinations';
import { LegacyPage } from './pages/legacy';
import { HealthPage } from './pages/health';
import { CatalogPage } from './pages/catalog';
import { PlanPage } from './pages/plan';
import { TransformationPage } from './pages/transformation';
import { PrivacyPage } from './pages/privacy';
import './styles.css';

const PRODUCT_PAGES = [
  ['events', 'Live events'],
  ['users', 'Users'],
  ['catalog', 'Catalogue'],
  ['plan', 'Tracking plan'],
  ['transformation', 'Transformation'],
  ['traffic', 'Traffic'],
  ['keys', 'Keys'],
  ['destinations', 'Destinations'],
  ['legacy', 'Legacy usage'],
  ['privacy', 'Privacy'],
] as const;

function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  return (
    <main class="signin">
      <h1>Inlet console</h1>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          const token = String(new FormData(e.currentTarget).get('token') ?? '').trim();
          setBusy(true);
          setError(undefined);
          try {
            // The token is checked by asking for something with it before it is kept.
            await api('GET', '/admin/v1/products', { token });
            saveToken(token);
            onSignedIn();
          } catch (failure) {
            setError(
              failure instanceof ApiError && failure.status === 401
                ? new Error('That is not the admin token (INLET_ADMIN_TOKEN).')
                : failure,
            );
          } finally {
            setBusy(false);
          }
        }}
      >
        <label for="token">Admin token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required autoFocus />
        <p class="hint">
          The value of <code>INLET_ADMIN_TOKEN</code>. Kept in this tab only (sessionStorage) and sent as a Bearer
          header.
        </p>
        <button type="submit" class="primary" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <ErrorLine error={error} />
      </form>
    </main>
  );
}

function Shell({ products, reloadProducts }: { products: Product[]; reloadProducts: () => void }) {
  const route = useRoute();
  const [top, productId, page] = route;
  const product = top === 'p' ? products.find((p) => p.id === productId) : undefined;
  const current = top === 'p' ? (page ?? 'events') : (top ?? 'products');

  useEffect(() => {
    const title = PRODUCT_PAGES.find(([id]) => id === current)?.[1] ?? (current === 'health' ? 'Health' : 'Products');
    document.title = `${title}${product ? ` · ${product.name}` : ''} · Inlet console`;
  }, [current, product]);

  let body;
  if (top === 'p' && productId !== undefined) {
    if (product === undefined) body = <p role="alert">No product {productId}.</p>;
    else if (current === 'keys') body = <KeysPage product={product} />;
    else if (current === 'users') body = <UsersPage product={product} initial={route.slice(3).join('/')} />;
    else if (current === 'traffic') body = <TrafficPage product={product} />;
    else if (current === 'destinations') body = <DestinationsPage product={product} />;
    else if (current === 'legacy') body = <LegacyPage product={product} />;
    else if (current === 'catalog') body = <CatalogPage product={product} initial={route.slice(3).join('/')} />;
    else if (current === 'plan') body = <PlanPage product={product} />;
    else if (current === 'transformation') body = <TransformationPage product={product} />;
    else if (current === 'privacy') body = <PrivacyPage product={product} onChanged={reloadProducts} />;
    else body = <EventsPage product={product} />;
  } else if (top === 'health') body = <HealthPage />;
  else body = <ProductsPage products={products} onCreated={reloadProducts} />;

  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="#/">
          Inlet
        </a>
        <label class="product-picker">
          <span class="visually-hidden">Product</span>
          <select
            value={product?.id ?? ''}
            onChange={(e) => {
              const id = e.currentTarget.value;
              navigate(id === '' ? '/' : `/p/${id}/${top === 'p' ? current : 'events'}`);
            }}
          >
            <option value="">All products</option>
            {products.map((p) => (
              <option value={p.id} key={p.id}>
                {p.name}
              </option>
            ))}
          </select>
        </label>
        <nav aria-label="Pages">
          {product !== undefined &&
            PRODUCT_PAGES.map(([id, label]) => (
              <a key={id} href={`#/p/${product.id}/${id}`} aria-current={current === id ? 'page' : undefined}>
                {label}
              </a>
            ))}
          <a href="#/health" aria-current={current === 'health' ? 'page' : undefined}>
            Health
          </a>
        </nav>
        <button type="button" class="signout" onClick={() => forgetToken()}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {body}
      </main>
    </>
  );
}

function App() {
  const [token, setToken] = useState(storedToken());
  const [products, setProducts] = useState<Product[] | undefined>();
  const [error, setError] = useState<unknown>();
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    const onSignedOut = () => {
      setToken(null);
      setProducts(undefined);
    };
    window.addEventListener('inlet:signed-out', onSignedOut);
    return () => window.removeEventListener('inlet:signed-out', onSignedOut);
  }, []);

  useEffect(() => {
    if (token === null) return;
    get<Envelope<Product[]>>('/admin/v1/products').then(
      (answer) => setProducts(answer.data),
      (failure: unknown) => setError(failure),
    );
  }, [token, generation]);

  if (token === null) return <SignIn onSignedIn={() => setToken(storedToken())} />;
  if (products === undefined)
    return error === undefined ? <p class="loading">Loading…</p> : <p role="alert">{messageOf(error)}</p>;
  return <Shell products={products} reloadProducts={() => setGeneration((g) => g + 1)} />;
}

render(<App />, document.getElementById('app')!);
// The first screen is on the page and its handlers attached (the browser test and the figures read this).
performance.mark('inlet:first-render');
