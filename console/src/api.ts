// The admin API, and only it (issue 14: nothing the console does is impossible over HTTP). The token lives in
// sessionStorage (gone when the tab closes) and travels as a Bearer header: no cookie, so no CSRF surface.
const TOKEN_KEY = 'inlet.admin_token';

export function storedToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function saveToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event('inlet:signed-out'));
}

/** A problem+json answer (contract §3), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly errors: Array<{ pointer: string; message: string }> = [],
  ) {
    super(message);
  }
}

export function authHeaders(token = storedToken()): Record<string, string> {
  return token === null ? {} : { authorization: `Bearer ${token}` };
}

type Query = Record<string, string | number | undefined | null>;

export function withQuery(path: string, query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query))
    if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  const text = params.toString();
  return text === '' ? path : `${path}?${text}`;
}

export async function api<T>(
  method: string,
  path: string,
  options: { body?: unknown; query?: Query; token?: string } = {},
): Promise<T> {
  const headers: Record<string, string> = {
    accept: 'application/json',
    ...authHeaders(options.token ?? storedToken()),
  };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(withQuery(path.startsWith('/') ? path : `/admin/v1/${path}`, options.query), {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
  } catch (error) {
    throw new ApiError(0, 'network', `Inlet did not answer (${(error as Error).message}).`);
  }
  if (response.status === 401 && options.token === undefined) forgetToken();
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  const body = text === '' ? undefined : (JSON.parse(text) as unknown);
  if (!response.ok) {
    const problem = (body ?? {}) as {
      code?: string;
      detail?: string;
      title?: string;
      errors?: Array<{ pointer: string; message: string }>;
    };
    throw new ApiError(
      response.status,
      problem.code ?? String(response.status),
      problem.detail ?? problem.title ?? response.statusText,
      problem.errors ?? [],
    );
  }
  return body as T;
}

export const get = <T>(path: string, query?: Query) => api<T>('GET', path, { query });
export const post = <T>(path: string, body?: unknown) => api<T>('POST', path, { body: body ?? {} });
export const patch = <T>(path: string, body: unknown) => api<T>('PATCH', path, { body });
export const put = <T>(path: string, body: unknown) => api<T>('PUT', path, { body });
export const del = (path: string) => api<void>('DELETE', path);

export const productPath = (productId: string, rest = '') => `products/${encodeURIComponent(productId)}${rest}`;

// The shapes the console reads (the admin API's OpenAPI document at /openapi.json is the reference).
export interface Product {
  id: string;
  name: string;
  created_at: string;
  retention?: { events_days: number | null };
}
export interface ApiKey {
  id: string;
  product_id: string;
  kind: 'events' | 'reports' | 'browser';
  prefix: string;
  name: string | null;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  last_used_at: string | null;
  allowed_origins?: string[];
}
export interface CreatedKey extends Omit<ApiKey, 'revoked_at' | 'last_used_at'> {
  key: string;
}
export interface InletEvent {
  uuid: string;
  event_type: string;
  action: string;
  canonical_name: string;
  source: string;
  subject_type: string;
  subject_id: string;
  occurred_at: string;
  received_at: string;
  external_id: string | null;
  properties: Record<string, unknown>;
  key_id: string | null;
  context?: Record<string, unknown>;
  original?: Record<string, unknown>;
}
export interface Rejection {
  id: string;
  received_at: string;
  key_id: string | null;
  route: string;
  index: number | null;
  message_id: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  item: unknown;
}
export interface UserMerge {
  from_external_id: string;
  into_external_id: string;
  merged_at: string;
  [field: string]: unknown;
}
export interface UserDetails {
  external_id: string;
  identifiers: Record<string, string>;
  traits: Record<string, unknown>;
  aliases: string[];
  created_at: string;
  updated_at: string;
  identified?: boolean;
  merges: UserMerge[];
  events: InletEvent[];
  [field: string]: unknown;
}
export type Envelope<T> = { data: T };
export type Page<T> = { data: T[]; meta: { next_cursor: string | null } };
