// Small shared pieces: time formatting, the error line, a copy button, JSON blocks, a loading hook.
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { ApiError } from './api';

export function time(iso: string | null | undefined): string {
  if (iso === null || iso === undefined) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime())
    ? iso
    : date.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

export function clock(iso: string): string {
  const date = new Date(iso);
  return date.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

export function messageOf(error: unknown): string {
  if (error instanceof ApiError) {
    const fields = error.errors.map((e) => `${e.pointer}: ${e.message}`).join('; ');
    return fields === '' ? error.message : `${error.message} (${fields})`;
  }
  return error instanceof Error ? error.message : String(error);
}

export function ErrorLine({ error }: { error: unknown }) {
  if (error === undefined || error === null) return null;
  return (
    <p class="error" role="alert">
      {messageOf(error)}
    </p>
  );
}

export function Json({ value, label }: { value: unknown; label?: string }) {
  return (
    <pre class="json" tabIndex={0} aria-label={label ?? 'JSON'}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}

export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <button
      type="button"
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
        } catch {
          // Without clipboard access (http on another host): the text stays selectable beside the button.
        }
        setCopied(true);
        setTimeout(() => setCopied(false), 2000);
      }}
    >
      {copied ? 'Copied' : label}
    </button>
  );
}

/**
 * A user action (a form's submit, a button's click): `run` clears the last error, marks the action busy while it
 * runs, and keeps what it throws for <ErrorLine>.
 */
export function useAction(): {
  error: unknown;
  busy: boolean;
  run: (action: () => Promise<unknown>) => Promise<void>;
} {
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const run = useCallback(async (action: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await action();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  }, []);
  return { error, busy, run };
}

/** Loads with `load` whenever `deps` change; `reload` runs it again. */
export function useLoad<T>(
  load: () => Promise<T>,
  deps: unknown[],
): { data: T | undefined; error: unknown; loading: boolean; reload: () => void } {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({
    data: undefined,
    error: undefined,
    loading: true,
  });
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, error: undefined, loading: false }),
      (error: unknown) => live && setState({ data: undefined, error, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, generation]);
  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  return { ...state, reload };
}

export function Section({
  title,
  children,
  actions,
}: {
  title: string;
  children: ComponentChildren;
  actions?: ComponentChildren;
}) {
  return (
    <section class="card" aria-label={title}>
      <div class="card-head">
        <h2>{title}</h2>
        {actions}
      </div>
      {children}
    </section>
  );
}

export function Badge({ tone, children }: { tone: 'ok' | 'warn' | 'bad' | 'muted'; children: ComponentChildren }) {
  return <span class={`badge ${tone}`}>{children}</span>;
}
