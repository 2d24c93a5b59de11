// API keys of a product: create (every kind; browser keys with their allowed origins), the new secret shown
// once with a copy button and the README's curl example, list, edit a browser key's origins, revoke.
import { useState } from 'preact/hooks';
import { del, get, patch, post, productPath, type ApiKey, type CreatedKey, type Envelope, type Product } from '../api';
import { Badge, CopyButton, ErrorLine, Section, time, useAction, useLoad } from '../ui';

const KIND_HELP: Record<ApiKey['kind'], string> = {
  events: 'Secret, for servers: writes events and identities.',
  reports: 'Secret: reads traffic reports.',
  browser: 'Publishable, for web pages: sends events only, from its allowed origins.',
};

function originsOf(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((o) => o.trim())
    .filter((o) => o !== '');
}

function curlExample(key: CreatedKey): string {
  const origin = window.location.origin;
  if (key.kind === 'reports') return `curl ${origin}/api/v2/traffic_reports -H 'Authorization: Bearer ${key.key}'`;
  return (
    `curl -X POST ${origin}/api/v2/events -H 'Authorization: Bearer ${key.key}' -H 'Content-Type: application/json' ` +
    `${key.kind === 'browser' ? `-H 'Origin: ${key.allowed_origins?.[0] ?? 'https://example.com'}' ` : ''}` +
    `-d '{"event_type":"project","action":"created","subject_type":"user","subject_id":"user_42","properties":{"plan":"pro"}}'`
  );
}

function NewSecret({ created, onDone }: { created: CreatedKey; onDone: () => void }) {
  return (
    <div class="secret" role="status" aria-live="polite">
      <h3>New {created.kind} key: copy the secret now</h3>
      <p>It is shown only this once; Inlet keeps a hash of it.</p>
      <div class="secret-row">
        <code class="secret-value" data-testid="new-secret">
          {created.key}
        </code>
        <CopyButton text={created.key} label="Copy secret" />
      </div>
      {created.kind !== 'reports' && <p>Send an event with it:</p>}
      <pre class="json">{curlExample(created)}</pre>
      <button type="button" onClick={onDone}>
        I have stored it
      </button>
    </div>
  );
}

function OriginsEditor({ apiKey, onSaved }: { apiKey: ApiKey; onSaved: () => void }) {
  const [editing, setEditing] = useState(false);
  const { error, run } = useAction();
  if (!editing)
    return (
      <>
        <ul class="plain">
          {(apiKey.allowed_origins ?? []).map((o) => (
            <li key={o}>
              <code>{o}</code>
            </li>
          ))}
        </ul>
        {apiKey.revoked_at === null && (
          <button type="button" class="small" onClick={() => setEditing(true)}>
            Edit origins
          </button>
        )}
      </>
    );
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        const origins = originsOf(String(new FormData(e.currentTarget).get('origins') ?? ''));
        void run(async () => {
          await patch(`keys/${apiKey.id}`, { allowed_origins: origins });
          setEditing(false);
          onSaved();
        });
      }}
    >
      <label for={`origins-${apiKey.id}`}>Allowed origins of {apiKey.prefix}…, one a line</label>
      <textarea
        id={`origins-${apiKey.id}`}
        name="origins"
        rows={3}
        defaultValue={(apiKey.allowed_origins ?? []).join('\n')}
      />
      <button type="submit" class="small primary">
        Save
      </button>{' '}
      <button type="button" class="small" onClick={() => setEditing(false)}>
        Cancel
      </button>
      <ErrorLine error={error} />
    </form>
  );
}

function RevokeButton({ apiKey, onRevoked }: { apiKey: ApiKey; onRevoked: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const { error, run } = useAction();
  if (!confirming)
    return (
      <button type="button" class="small danger" onClick={() => setConfirming(true)}>
        Revoke
      </button>
    );
  return (
    <span>
      <button
        type="button"
        class="small danger"
        autoFocus
        onClick={() =>
          run(async () => {
            await del(`keys/${apiKey.id}`);
            onRevoked();
          })
        }
      >
        Revoke {apiKey.prefix}… now
      </button>{' '}
      <button type="button" class="small" onClick={() => setConfirming(false)}>
        Keep it
      </button>
      <ErrorLine error={error} />
    </span>
  );
}

export function KeysPage({ product }: { product: Product }) {
  const keys = useLoad(() => get<Envelope<ApiKey[]>>(productPath(product.id, '/keys')), [product.id]);
  const [kind, setKind] = useState<ApiKey['kind']>('events');
  const [created, setCreated] = useState<CreatedKey>();
  const { error, run } = useAction();
  const [showRevoked, setShowRevoked] = useState(false);
  const list = (keys.data?.data ?? []).filter((k) => showRevoked || k.revoked_at === null);

  return (
    <>
      <h1>Keys · {product.name}</h1>
      <Section title="Create a key">
        <form
          class="stack"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget;
            const data = new FormData(form);
            const name = String(data.get('name') ?? '').trim();
            void run(async () => {
              const answer = await post<Envelope<CreatedKey>>(productPath(product.id, '/keys'), {
                kind,
                ...(name === '' ? {} : { name }),
                ...(kind === 'browser' ? { allowed_origins: originsOf(String(data.get('origins') ?? '')) } : {}),
              });
              setCreated(answer.data);
              form.reset();
              keys.reload();
            });
          }}
        >
          <fieldset>
            <legend>Kind</legend>
            {(['events', 'browser', 'reports'] as const).map((k) => (
              <label class="choice" key={k}>
                <input type="radio" name="kind" value={k} checked={kind === k} onChange={() => setKind(k)} /> {k}
                <span class="hint"> — {KIND_HELP[k]}</span>
              </label>
            ))}
          </fieldset>
          <label for="key-name">Name (optional)</label>
          <input id="key-name" name="name" maxLength={200} placeholder="backend, marketing site…" />
          {kind === 'browser' && (
            <>
              <label for="key-origins">Allowed origins, one a line</label>
              <textarea
                id="key-origins"
                name="origins"
                rows={3}
                required
                placeholder={'https://www.example.com\nhttps://*.example.com'}
              />
            </>
          )}
          <div>
            <button type="submit" class="primary">
              Create {kind} key
            </button>
          </div>
          <ErrorLine error={error} />
        </form>
        {created !== undefined && <NewSecret created={created} onDone={() => setCreated(undefined)} />}
      </Section>
      <Section
        title="Keys"
        actions={
          <label class="choice">
            <input type="checkbox" checked={showRevoked} onChange={(e) => setShowRevoked(e.currentTarget.checked)} />{' '}
            show revoked
          </label>
        }
      >
        <ErrorLine error={keys.error} />
        {list.length === 0 ? (
          <p>{keys.loading ? 'Loading…' : 'No key.'}</p>
        ) : (
          <div class="scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Key</th>
                  <th scope="col">Kind</th>
                  <th scope="col">Name</th>
                  <th scope="col">Allowed origins</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last used</th>
                  <th scope="col">State</th>
                </tr>
              </thead>
              <tbody>
                {list.map((k) => (
                  <tr key={k.id} data-key-id={k.id}>
                    <td>
                      <code>{k.prefix}…</code>
                    </td>
                    <td>{k.kind}</td>
                    <td>{k.name ?? '—'}</td>
                    <td>{k.kind === 'browser' ? <OriginsEditor apiKey={k} onSaved={keys.reload} /> : '—'}</td>
                    <td>{time(k.created_at)}</td>
                    <td>{time(k.last_used_at)}</td>
                    <td>
                      {k.revoked_at !== null ? (
                        <Badge tone="muted">revoked {time(k.revoked_at)}</Badge>
                      ) : k.expires_at !== null && Date.parse(k.expires_at) < Date.now() ? (
                        <Badge tone="warn">expired</Badge>
                      ) : (
                        <>
                          <Badge tone="ok">active</Badge> <RevokeButton apiKey={k} onRevoked={keys.reload} />
                        </>
                      )}
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
