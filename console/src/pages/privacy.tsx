// Erasure and retention (governance.md §3–4): erase a person (POST …/erasures, typed confirmation) and follow
// the job (GET …/erasures/{id} every second until done or failed), the audit of erasures (GET …/erasures: HMACs,
// counts, times, reasons, never the ids), the suppressions (GET …/suppressions; DELETE lifts one, after a
// confirmation), and the product's retention of events (PATCH /admin/v1/products/{id}).
import { useEffect, useState } from 'preact/hooks';
import { del, get, patch, post, productPath, type Envelope, type Product } from '../api';
import { Badge, ErrorLine, Section, time, useAction, useLoad } from '../ui';

export interface Erasure {
  id: string;
  status: 'pending' | 'running' | 'done' | 'failed';
  phase: string;
  reason: string | null;
  external_id_hmac: string;
  requested_at: string;
  started_at: string | null;
  finished_at: string | null;
  counts: Record<string, number>;
  error: string | null;
}
interface Suppression {
  id: string;
  external_id_hmac: string;
  erasure_id: string | null;
  created_at: string;
}
type Page<T> = { data: T[]; meta: { next_cursor: string | null } };

const TONE = { pending: 'muted', running: 'warn', done: 'ok', failed: 'bad' } as const;
const finished = (job: Erasure) => job.status === 'done' || job.status === 'failed';
const short = (hmac: string) => `${hmac.slice(0, 12)}…`;

/** The counts that are not zero ("events 3 · ids 2"), or "nothing". */
function Counts({ counts }: { counts: Record<string, number> }) {
  const some = Object.entries(counts).filter(([, n]) => n > 0);
  return (
    <>
      {some.length === 0
        ? 'nothing'
        : some.map(([name, n]) => `${name.replace('_', ' ')} ${n.toLocaleString()}`).join(' · ')}
    </>
  );
}

/** Follows one job until it is done or failed (every second), and says where it is. */
export function ErasureProgress({
  product,
  job: first,
  onFinished,
}: {
  product: Product;
  job: Erasure;
  onFinished?: (job: Erasure) => void;
}) {
  const [job, setJob] = useState(first);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    setJob(first);
    if (finished(first)) return;
    let live = true;
    const timer = setInterval(() => {
      get<Envelope<Erasure>>(productPath(product.id, `/erasures/${first.id}`)).then(
        (answer) => {
          if (!live) return;
          setJob(answer.data);
          if (finished(answer.data)) {
            clearInterval(timer);
            onFinished?.(answer.data);
          }
        },
        (failure: unknown) => live && setError(failure),
      );
    }, 1000);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [product.id, first.id]);
  return (
    <div class="secret" role="status" aria-live="polite" data-testid="erasure-progress">
      <h3>
        Erasure <code>{job.id}</code>: <Badge tone={TONE[job.status]}>{job.status}</Badge>
      </h3>
      <p>
        {finished(job) ? `Finished ${time(job.finished_at)}. Deleted: ` : `Phase: ${job.phase}. So far: `}
        <Counts counts={job.counts} />.
      </p>
      {job.error !== null && <p class="error">{job.error}</p>}
      <p class="hint">
        Every id linked to this person is suppressed: ingest refuses them (409 subject_suppressed) until the suppression
        is lifted on the Privacy page.
      </p>
      <ErrorLine error={error} />
    </div>
  );
}

/** The erase form: the id must be typed again to confirm; a reason is optional (no personal data in it). */
export function EraseForm({
  product,
  externalId,
  onRequested,
}: {
  product: Product;
  externalId?: string;
  onRequested: (job: Erasure) => void;
}) {
  const [typed, setTyped] = useState('');
  const [target, setTarget] = useState(externalId ?? '');
  const { error, busy, run } = useAction();
  const confirmed = target !== '' && typed === target;
  return (
    <form
      class="stack"
      aria-label="Erase a person"
      onSubmit={(e) => {
        e.preventDefault();
        if (!confirmed) return;
        const reason = String(new FormData(e.currentTarget).get('reason') ?? '').trim();
        void run(async () => {
          const job = await post<Envelope<Erasure>>(productPath(product.id, '/erasures'), {
            external_id: target,
            reason: reason === '' ? null : reason,
          });
          setTyped('');
          onRequested(job.data);
        });
      }}
    >
      {externalId === undefined && (
        <>
          <label for="erase-id">External id (any id of the person: canonical, alias or anonymous)</label>
          <input id="erase-id" value={target} onInput={(e) => setTarget(e.currentTarget.value.trim())} required />
        </>
      )}
      <p class="hint">
        Deletes every event, identifier, trait, merge, rejection and violation of this person, under every id linked to
        them, and suppresses those ids. This cannot be undone.
      </p>
      <label for="erase-reason">Reason (optional, kept in the audit: no personal data)</label>
      <input id="erase-reason" name="reason" maxLength={500} placeholder="GDPR request #1234" />
      <label for="erase-confirm">
        Type <code>{target === '' ? 'the id' : target}</code> to confirm
      </label>
      <input
        id="erase-confirm"
        value={typed}
        onInput={(e) => setTyped(e.currentTarget.value)}
        autocomplete="off"
        spellcheck={false}
      />
      <div class="actions">
        <button type="submit" class="danger" disabled={!confirmed || busy}>
          {busy ? 'Erasing…' : `Erase ${target === '' ? 'this person' : target}`}
        </button>
      </div>
      <ErrorLine error={error} />
    </form>
  );
}

export function PrivacyPage({ product, onChanged }: { product: Product; onChanged: () => void }) {
  const [latest, setLatest] = useState<Erasure>();
  const erasures = useLoad(() => get<Page<Erasure>>(productPath(product.id, '/erasures'), { limit: 50 }), [product.id]);
  const suppressions = useLoad(
    () => get<Page<Suppression>>(productPath(product.id, '/suppressions'), { limit: 100 }),
    [product.id],
  );
  const reload = () => {
    erasures.reload();
    suppressions.reload();
  };
  return (
    <>
      <h1>Privacy · {product.name}</h1>
      <RetentionSection product={product} onChanged={onChanged} />
      <Section title="Erase a person">
        <p class="hint">
          Usually done from the user's page (<a href={`#/p/${product.id}/users`}>Users</a>). Here for an id that
          resolves to nobody: it is suppressed all the same.
        </p>
        <EraseForm
          product={product}
          onRequested={(job) => {
            setLatest(job);
            reload();
          }}
        />
        {latest !== undefined && <ErasureProgress product={product} job={latest} onFinished={reload} />}
      </Section>
      <Section
        title="Erasures (audit)"
        actions={
          <button type="button" onClick={reload}>
            Refresh
          </button>
        }
      >
        <p class="hint">
          The audit keeps an HMAC of the id under the installation secret, never the id: hash it again to answer “was
          this id erased?”.
        </p>
        <ErrorLine error={erasures.error} />
        {(erasures.data?.data ?? []).length === 0 ? (
          <p class="hint">{erasures.loading ? 'Loading…' : 'No erasure yet.'}</p>
        ) : (
          <div class="scroll">
            <table class="wide" aria-label="Erasures, newest first">
              <thead>
                <tr>
                  <th scope="col">Job</th>
                  <th scope="col">Status</th>
                  <th scope="col">Requested</th>
                  <th scope="col">Finished</th>
                  <th scope="col">Deleted</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Id (HMAC)</th>
                </tr>
              </thead>
              <tbody>
                {erasures.data!.data.map((job) => (
                  <tr key={job.id}>
                    <td>
                      <code>{job.id}</code>
                    </td>
                    <td>
                      <Badge tone={TONE[job.status]}>{job.status}</Badge> {finished(job) ? '' : job.phase}
                      {job.error !== null && <span class="error">{job.error}</span>}
                    </td>
                    <td>{time(job.requested_at)}</td>
                    <td>{time(job.finished_at)}</td>
                    <td>
                      <Counts counts={job.counts} />
                    </td>
                    <td>{job.reason ?? '—'}</td>
                    <td>
                      <code title={job.external_id_hmac}>{short(job.external_id_hmac)}</code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
      <Section title="Suppressions">
        <p class="hint">
          Ids whose items ingest refuses (409 subject_suppressed). Lifting one lets that id's items in again, on every
          instance within a second or so.
        </p>
        <ErrorLine error={suppressions.error} />
        {(suppressions.data?.data ?? []).length === 0 ? (
          <p class="hint">{suppressions.loading ? 'Loading…' : 'None.'}</p>
        ) : (
          <div class="scroll">
            <table class="wide" aria-label="Suppressions, newest first">
              <thead>
                <tr>
                  <th scope="col">Id (HMAC)</th>
                  <th scope="col">Since</th>
                  <th scope="col">Erasure</th>
                  <th scope="col">Lift</th>
                </tr>
              </thead>
              <tbody>
                {suppressions.data!.data.map((s) => (
                  <SuppressionRow key={s.id} product={product} suppression={s} onLifted={suppressions.reload} />
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
    </>
  );
}

function SuppressionRow({
  product,
  suppression: s,
  onLifted,
}: {
  product: Product;
  suppression: Suppression;
  onLifted: () => void;
}) {
  const [confirming, setConfirming] = useState(false);
  const { error, run } = useAction();
  return (
    <tr>
      <td>
        <code title={s.external_id_hmac}>{short(s.external_id_hmac)}</code>
      </td>
      <td>{time(s.created_at)}</td>
      <td>{s.erasure_id === null ? '—' : <code>{s.erasure_id}</code>}</td>
      <td>
        {confirming ? (
          <span class="actions">
            <button
              type="button"
              class="danger small"
              onClick={() =>
                run(async () => {
                  await del(productPath(product.id, `/suppressions/${s.id}`));
                  onLifted();
                })
              }
            >
              Lift: accept this id's items again
            </button>
            <button type="button" class="small" onClick={() => setConfirming(false)}>
              Cancel
            </button>
          </span>
        ) : (
          <button type="button" class="small" onClick={() => setConfirming(true)}>
            Lift…
          </button>
        )}
        <ErrorLine error={error} />
      </td>
    </tr>
  );
}

function RetentionSection({ product, onChanged }: { product: Product; onChanged: () => void }) {
  const days = product.retention?.events_days ?? null;
  const [keepForever, setKeepForever] = useState(days === null);
  const { error, run } = useAction();
  const [status, setStatus] = useState<string>();
  useEffect(() => setKeepForever(days === null), [product.id, days]);
  return (
    <Section title="Retention of events">
      <p>
        Now: <strong data-testid="retention-now">{days === null ? 'kept forever' : `${days} days`}</strong>. Events
        received longer ago are deleted in the background. Rejections, violations and delivery logs keep their own
        settings.
      </p>
      <form
        class="inline"
        onSubmit={(e) => {
          e.preventDefault();
          setStatus(undefined);
          const value = keepForever ? null : Number(new FormData(e.currentTarget).get('events_days'));
          void run(async () => {
            const saved = await patch<Envelope<Product>>(productPath(product.id), {
              retention: { events_days: value },
            });
            setStatus(
              `Saved: ${saved.data.retention?.events_days == null ? 'kept forever' : `${saved.data.retention.events_days} days`}.`,
            );
            onChanged();
          });
        }}
      >
        <label class="choice">
          <input type="checkbox" checked={keepForever} onChange={(e) => setKeepForever(e.currentTarget.checked)} />
          Keep forever
        </label>
        <label for="events-days">Keep events for (days)</label>
        <input
          id="events-days"
          name="events_days"
          type="number"
          min={1}
          max={36500}
          step={1}
          disabled={keepForever}
          defaultValue={days === null ? '' : String(days)}
          key={`${product.id}${days}`}
          class="narrow"
        />
        <button type="submit" class="primary">
          Save retention
        </button>
      </form>
      <ErrorLine error={error} />
      {status !== undefined && (
        <p role="status" class="hint">
          {status}
        </p>
      )}
    </Section>
  );
}
