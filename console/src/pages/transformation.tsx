// The product's transformation (transformations.md §3, §6): edit the steps, try them on the last 20 stored events
// (POST …/transformation/test with route `stored`: each event in its stored form as input, Segment ones with their
// type, traits and source, and its id for `sample`; nothing is stored), see each event before and after side by
// side, then save the steps as a new version (PUT …/transformation). Refused steps show their pointers.
import { useEffect, useState } from 'preact/hooks';
import { get, post, productPath, put, type Envelope, type InletEvent, type Page, type Product } from '../api';
import { ErrorLine, Json, Section, time, useLoad } from '../ui';

interface Version {
  version: number;
  steps: unknown[];
  created_at: string;
}
interface TestResult {
  input: Record<string, unknown>;
  output: Record<string, unknown> | null;
  dropped_by?: number;
  error?: { step: number; message: string };
  trace: Array<{ step: number; changed: string[] }>;
}

const EXAMPLE = [
  { kind: 'drop', where: { '==': [{ var: 'properties.test' }, true] } },
  { kind: 'mask', paths: ['properties.email'], with: 'hash' },
];

function outcomeOf(result: TestResult): string {
  if (result.dropped_by !== undefined) return `dropped by step ${result.dropped_by}`;
  if (result.error !== undefined) return `step ${result.error.step} failed: ${result.error.message}`;
  const changed = result.trace.flatMap((t) => t.changed);
  return changed.length === 0 ? 'unchanged' : `changed: ${changed.join(', ')}`;
}

export function TransformationPage({ product }: { product: Product }) {
  const current = useLoad(
    () => get<Envelope<Version | null>>(productPath(product.id, '/transformation')),
    [product.id],
  );
  const events = useLoad(() => get<Page<InletEvent>>(productPath(product.id, '/events'), { limit: 20 }), [product.id]);
  const [text, setText] = useState('');
  /** The steps were edited here since the stored version was last shown: a load that ends late keeps them. */
  const [edited, setEdited] = useState(false);
  const [results, setResults] = useState<TestResult[]>();
  const [error, setError] = useState<unknown>();
  const [saved, setSaved] = useState<Version>();
  const stored = current.data?.data;

  useEffect(() => {
    if (current.data !== undefined && !edited) setText(JSON.stringify(stored?.steps ?? EXAMPLE, null, 2));
  }, [stored]);

  function steps(): unknown {
    try {
      return JSON.parse(text) as unknown;
    } catch (cause) {
      throw new Error(`Steps: not JSON (${(cause as Error).message}).`);
    }
  }

  async function tryIt() {
    setError(undefined);
    try {
      const items: InletEvent[] = events.data?.data ?? [];
      if (items.length === 0) throw new Error('No stored events to try the steps on yet.');
      const answer = await post<Envelope<TestResult[]>>(productPath(product.id, '/transformation/test'), {
        steps: steps(),
        items,
        route: 'stored',
      });
      setResults(answer.data);
    } catch (cause) {
      setError(cause);
    }
  }

  async function save() {
    setError(undefined);
    try {
      const answer = await put<Envelope<Version>>(productPath(product.id, '/transformation'), { steps: steps() });
      setSaved(answer.data);
      setEdited(false);
      current.reload();
    } catch (cause) {
      setError(cause);
    }
  }

  return (
    <>
      <h1>Transformation · {product.name}</h1>
      <Section title="Steps">
        <p class="hint">
          {stored === undefined
            ? 'Loading the current version…'
            : stored === null
              ? 'No transformation yet: every event is stored as it arrives.'
              : `Version ${stored.version}, saved ${time(stored.created_at)}.`}
        </p>
        <label for="transformation-steps">Steps (JSON array)</label>
        <textarea
          id="transformation-steps"
          rows={14}
          spellcheck={false}
          value={text}
          onInput={(e) => {
            setText((e.target as HTMLTextAreaElement).value);
            setEdited(true);
          }}
        />
        <p>
          <button type="button" disabled={events.data === undefined} onClick={() => void tryIt()}>
            Try on the last 20 events
          </button>{' '}
          <button type="button" onClick={() => void save()}>
            Save as a new version
          </button>
        </p>
        <ErrorLine error={error ?? current.error ?? events.error} />
        {saved === undefined ? null : <p role="status">Saved version {saved.version}.</p>}
      </Section>
      {results === undefined ? null : (
        <Section title="Before and after">
          <div class="scroll">
            <table class="side-by-side">
              <thead>
                <tr>
                  <th scope="col">Before (stored)</th>
                  <th scope="col">After</th>
                </tr>
              </thead>
              <tbody>
                {results.map((result, i) => (
                  <tr key={i}>
                    <td>
                      <Json value={result.input} />
                    </td>
                    <td>
                      <p class="hint">{outcomeOf(result)}</p>
                      {result.output === null ? null : <Json value={result.output} />}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </Section>
      )}
    </>
  );
}
