// The closed error model (contract §3): every error the API can answer has a stable code,
// one HTTP status and one title. Everything that fails a request throws an AppError;
// the HTTP layer renders it as RFC 9457 problem+json.

export const ERROR_CODES = {
  invalid_json: { status: 400, title: 'Request body is not valid JSON' },
  validation_error: { status: 400, title: 'Request is invalid' },
  unauthorized: { status: 401, title: 'Missing or invalid API key' },
  forbidden: { status: 403, title: 'API key is not allowed to do this' },
  not_found: { status: 404, title: 'Not found' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  identifier_conflict: { status: 409, title: 'Identifier belongs to another user' },
  alias_conflict: { status: 409, title: 'Identity is already merged into another user' },
  legacy_format_removed: { status: 410, title: 'Legacy flat event names are no longer accepted' },
  request_timeout: { status: 408, title: 'Request not received in time' },
  expectation_failed: { status: 417, title: 'Expectation not supported' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  origin_not_allowed: { status: 403, title: 'Origin is not allowed for this browser key' },
  secret_key_in_browser: { status: 403, title: 'A secret key was sent from a browser' },
  // Per-item codes of the Segment routes (in their answer and the rejections list, never an HTTP status).
  missing_identity: { status: 400, title: 'Item has neither userId nor anonymousId' },
  invalid_timestamp: { status: 400, title: 'Item timestamp is out of range' },
  invalid_event_name: { status: 400, title: 'Event name is empty or too long after normalisation' },
  identified_merge_forbidden: { status: 403, title: 'A browser key may not merge two identified users' },
  identity_conflict: { status: 409, title: 'Identity link conflicts with an earlier one' },
  // Tracking plans (governance.md §2): the answer of a single-event route and identify, and a per-item code.
  tracking_plan_violation: { status: 400, title: 'The item does not match the tracking plan' },
  unplanned_event: { status: 400, title: 'The event is not in the tracking plan' },
  // Erasure (governance.md §3): the item names an id of an erased person; refused, recorded without the item.
  subject_suppressed: { status: 409, title: 'The subject was erased and is suppressed' },
  // Transformations (transformations.md §5): a step failed on the item (single routes 422, a batch element's error).
  transformation_error: { status: 422, title: 'A transformation step failed on the item' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  rate_limited: { status: 429, title: 'Too many requests' },
  header_too_large: { status: 431, title: 'Request headers too large' },
  internal: { status: 500, title: 'Internal server error' },
  upstream_error: { status: 502, title: 'Traffic provider failed' },
  unavailable: { status: 503, title: 'Service unavailable' },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** One problem with one field, addressed by a JSON pointer into the request (RFC 6901). */
export interface FieldError {
  pointer: string;
  message: string;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ErrorCode;
  request_id?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly errors: FieldError[] | undefined;
  /** Extra top-level members of the problem body (for example `conflicts`). */
  readonly extras: Record<string, unknown>;
  /** Extra response headers (for example `Retry-After`). */
  readonly headers: Record<string, string>;

  constructor(
    code: ErrorCode,
    detail: string,
    options: {
      errors?: FieldError[];
      extras?: Record<string, unknown>;
      headers?: Record<string, string>;
      cause?: unknown;
      status?: number;
    } = {},
  ) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AppError';
    this.code = code;
    // A route may answer a code with another status where its clients need it (the Segment routes
    // answer an oversized body with 400, which every SDK drops instead of retrying).
    this.status = options.status ?? ERROR_CODES[code].status;
    this.errors = options.errors;
    this.extras = options.extras ?? {};
    this.headers = options.headers ?? {};
  }

  toProblem(requestId?: string): Problem {
    const problem: Problem = {
      type: problemType(this.code),
      title: ERROR_CODES[this.code].title,
      status: this.status,
      detail: this.message,
      code: this.code,
      ...(requestId === undefined ? {} : { request_id: requestId }),
      ...(this.errors && this.errors.length > 0 ? { errors: this.errors } : {}),
      ...this.extras,
    };
    return problem;
  }
}

/** A stable URI per code; the README's "Errors" section documents each one under this name. */
export function problemType(code: ErrorCode): string {
  return `urn:inlet:problem:${code}`;
}

export function validationError(errors: FieldError[], detail?: string): AppError {
  const first = errors[0];
  const summary =
    detail ??
    (first === undefined
      ? 'The request is invalid.'
      : errors.length === 1
        ? `${first.pointer || 'body'}: ${first.message}`
        : `${first.pointer || 'body'}: ${first.message} (and ${errors.length - 1} more)`);
  return new AppError('validation_error', summary, { errors });
}
