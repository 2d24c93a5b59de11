// Users: look one up by external id or alias (GET …/users/{id}) or by identifier (GET …/users?identifier=);
// its identifiers, traits and aliases, the merge history as a timeline, and its events newest first, paged
// through the events read with `user=` (every event of the user, under any id merged into it).
import { useEffect, useState } from 'preact/hooks';
import { get, productPath, type Envelope, type InletEvent, type Page, type Product, type UserDetails } from '../api';
import { navigate } from '../router';
import { ErrorLine, Json, Section, time } from '../ui';
import { EraseForm, ErasureProgress, type Erasure } from './privacy';

type Lookup = { by: 'id' | 'identifier'; value: string };

function parseInitial(initial: string): Lookup | undefined {
  if (initial === '') return undefined;
  const [by, ...rest] = initial.split('/');
  const value = decodeURIComponent(rest.join('/'));
  return by === 'identifier' ? { by: 'identifier', value } : by === 'id' ? { by: 'id', value } : undefined;
}

export function UsersPage({ product, initial }: { product: Product; initial: string }) {
  const lookup = parseInitial(initial);
  const [by, setBy] = useState<Lookup['by']>(lookup?.by ?? 'id');
  const [user, setUser] = useState<UserDetails>();
  const [error, setError] = useState<unknown>();
  // An erasure asked for from this page: followed until it finishes, then the lookup runs again.
  const [erasure, setErasure] = useState<Erasure>();
  const [generation, setGeneration] = useState(0);

  useEffect(() => setErasure(undefined), [product.id, lookup?.by, lookup?.value]);
  useEffect(() => {
    setUser(undefined);
    setError(undefined);
    if (lookup === undefined) return;
    const request =
      lookup.by === 'id'
        ? get<Envelope<UserDetails>>(productPath(product.id, `/users/${encodeURIComponent(lookup.value)}`), {
            events_limit: 0,
          })
        : get<Envelope<UserDetails>>(productPath(product.id, '/users'), { identifier: lookup.value, events_limit: 0 });
    request.then((answer) => setUser(answer.data), setError);
  }, [product.id, lookup?.by, lookup?.value, generation]);

  return (
    <>
      <h1>Users · {product.name}</h1>
      <Section title="Find a user">
        <form
          class="inline"
          onSubmit={(e) => {
            e.preventDefault();
            const value = String(new FormData(e.currentTarget).get('value') ?? '').trim();
            if (value !== '') navigate(`/p/${product.id}/users/${by}/${encodeURIComponent(value)}`);
          }}
        >
          <label for="lookup-by">By</label>
          <select id="lookup-by" value={by} onChange={(e) => setBy(e.currentTarget.value as Lookup['by'])}>
            <option value="id">External id, alias or anonymous id</option>
            <option value="identifier">Identifier (kind:value)</option>
          </select>
          <label for="lookup-value" class="visually-hidden">
            {by === 'id' ? 'External id' : 'Identifier'}
          </label>
          <input
            id="lookup-value"
            name="value"
            required
            defaultValue={lookup?.value ?? ''}
            key={initial}
            placeholder={by === 'id' ? 'user_42' : 'email:ada@example.com'}
          />
          <button type="submit" class="primary">
            Look up
          </button>
        </form>
        <ErrorLine error={error} />
        {erasure !== undefined && (
          <ErasureProgress product={product} job={erasure} onFinished={() => setGeneration((g) => g + 1)} />
        )}
      </Section>
      {user !== undefined && <UserView product={product} user={user} onErasure={setErasure} />}
    </>
  );
}

function UserView({
  product,
  user,
  onErasure,
}: {
  product: Product;
  user: UserDetails;
  onErasure: (job: Erasure) => void;
}) {
  const identifiers = Object.entries(user.identifiers);
  return (
    <>
      <Section title={`User ${user.external_id}`}>
        <dl class="facts">
          <dt>External id</dt>
          <dd>
            <code>{user.external_id}</code>
          </dd>
          {user.identified !== undefined && (
            <>
              <dt>Identified</dt>
              <dd data-testid="identified">
                {user.identified ? 'yes: named by an identify' : 'no: anonymous only (never named by an identify)'}
              </dd>
            </>
          )}
          <dt>Created</dt>
          <dd>{time(user.created_at)}</dd>
          <dt>Updated</dt>
          <dd>{time(user.updated_at)}</dd>
          <dt>Aliases</dt>
          <dd>
            {user.aliases.length === 0
              ? 'none'
              : user.aliases.map((a) => (
                  <code key={a} class="chip">
                    {a}
                  </code>
                ))}
          </dd>
        </dl>
        <div class="columns">
          <div>
            <h3>Identifiers</h3>
            {identifiers.length === 0 ? (
              <p class="hint">None.</p>
            ) : (
              <div class="scroll">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Kind</th>
                      <th scope="col">Value</th>
                    </tr>
                  </thead>
                  <tbody>
                    {identifiers.map(([kind, value]) => (
                      <tr key={kind}>
                        <td>{kind}</td>
                        <td>
                          <code>{value}</code>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </div>
          <div>
            <h3>Traits</h3>
            <Json value={user.traits} label="Traits" />
          </div>
        </div>
      </Section>
      <Section title="Merge history">
        {user.merges.length === 0 ? (
          <p class="hint">No id was merged into this user.</p>
        ) : (
          <ol class="timeline">
            <li>
              <time dateTime={user.created_at}>{time(user.created_at)}</time> user created
            </li>
            {user.merges.map((m) => (
              <li key={`${m.from_external_id}${m.merged_at}`}>
                <time dateTime={m.merged_at}>{time(m.merged_at)}</time> <code>{m.from_external_id}</code> merged into{' '}
                <code>{m.into_external_id}</code>
                {m.from_user_id === null ? ' (it had no user of its own)' : ''}
              </li>
            ))}
          </ol>
        )}
      </Section>
      <UserEvents product={product} externalId={user.external_id} />
      <section class="card danger-zone" aria-label="Erase this user">
        <div class="card-head">
          <h2>Erase this user</h2>
        </div>
        <EraseForm
          product={product}
          externalId={user.external_id}
          onRequested={(job) => {
            onErasure(job);
            window.scrollTo(0, 0);
          }}
        />
      </section>
    </>
  );
}

function UserEvents({ product, externalId }: { product: Product; externalId: string }) {
  const [events, setEvents] = useState<InletEvent[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [error, setError] = useState<unknown>();
  const [open, setOpen] = useState<string>();
  const load = async (after: string | null) => {
    try {
      const page = await get<Page<InletEvent>>(productPath(product.id, '/events'), {
        user: externalId,
        limit: 25,
        cursor: after,
      });
      setEvents((current) => (after === null ? page.data : [...current, ...page.data]));
      setCursor(page.meta.next_cursor);
    } catch (failure) {
      setError(failure);
    }
  };
  useEffect(() => {
    setEvents([]);
    void load(null);
  }, [product.id, externalId]);

  return (
    <Section title="Events, newest first">
      <ErrorLine error={error} />
      {events.length === 0 ? (
        <p class="hint">No event.</p>
      ) : (
        <ol class="feed">
          {events.map((e) => (
            <li key={e.uuid}>
              <button
                type="button"
                class="row"
                aria-expanded={open === e.uuid}
                onClick={() => setOpen(open === e.uuid ? undefined : e.uuid)}
              >
                <time dateTime={e.received_at}>{time(e.received_at)}</time>
                <strong>{e.canonical_name}</strong>
                <span>
                  {e.subject_type}:{e.subject_id}
                </span>
              </button>
              {open === e.uuid && <Json value={e} label={`Event ${e.uuid}`} />}
            </li>
          ))}
        </ol>
      )}
      {cursor !== null && (
        <button type="button" onClick={() => void load(cursor)}>
          Older events
        </button>
      )}
    </Section>
  );
}
