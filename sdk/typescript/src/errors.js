// Errors of the berth SDK, as sdk/python/berth/errors.py has them.
//
// Every error the SDK throws is a BerthError with a `code`: an API
// answer's stable code (internal/errdefs; api/openapi.json's Error), or for
// failures on this side "connect", "transport", "stream" or
// "tls_fingerprint". An answer that is not 2xx is an APIError (or the
// subclass of its code) that also has the HTTP `status`, the `requestId`
// (quote it for a 5xx: the daemon logged the cause under it), the
// `retryAfter` seconds of a 429/503 and, for limit_exceeded, the `limit`.
// Errors carried inside a 200 stream (exec output, logs, a PTY) have
// status 0.

export class BerthError extends Error {
  constructor(message, { code = "internal", status = 0, requestId = "", retryAfter = undefined, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
  }
}

/** The daemon could not be reached at all. */
export class ConnectError extends BerthError {
  constructor(host, cause) {
    super(
      `cannot connect to the berth daemon at ${host} (is \`berth serve\` running? set host or BERTH_HOST): ${cause?.message ?? cause}`,
      { code: "connect", cause },
    );
    this.host = host;
  }
}

/** The daemon's TLS certificate does not match the pinned fingerprint. */
export class FingerprintError extends BerthError {
  constructor(got, want) {
    super(`the daemon's TLS certificate ${got} does not match the pinned ${want}`, { code: "tls_fingerprint" });
    this.got = got;
    this.want = want;
  }
}

/** The connection broke before an answer came (and the request was not one safe to send again). */
export class TransportError extends BerthError {
  constructor(message, cause) {
    super(message, { code: "transport", cause });
  }
}

/**
 * No byte of the answer came (or none could be sent) within the call's
 * bound: the client's `timeout` for short calls, `streamTimeout` for
 * long-running ones. Not retried: the call may have been done.
 */
export class RequestTimeoutError extends TransportError {
  constructor(message, cause) {
    super(message, cause);
    this.code = "timeout";
  }
}

/** A stream (exec output, process logs, events, a PTY) ended without its end. */
export class StreamError extends BerthError {
  constructor(message, cause) {
    super(message, { code: "stream", cause });
  }
}

/** An error answer of the API. */
export class APIError extends BerthError {
  constructor(status, code, message, requestId = "", retryAfter = undefined, limit = "") {
    let s = `${message} (${code}`;
    if (status) s += `, HTTP ${status}`;
    if (requestId) s += `, request id ${requestId}`;
    super(s + ")", { code, status, requestId, retryAfter });
    this.detail = message;
    this.limit = limit;
  }
}

export class InvalidArgumentError extends APIError {}
export class LimitExceededError extends APIError {}
export class UnauthenticatedError extends APIError {}
export class PermissionDeniedError extends APIError {}
export class NotFoundError extends APIError {}
export class ConflictError extends APIError {}
export class TooLargeError extends APIError {}
export class RateLimitedError extends APIError {}
export class UnavailableError extends APIError {}
export class InternalError extends APIError {}

const BY_CODE = {
  invalid_argument: InvalidArgumentError,
  invalid_idempotency_key: InvalidArgumentError,
  limit_exceeded: LimitExceededError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  idempotency_in_progress: ConflictError,
  too_large: TooLargeError,
  rate_limited: RateLimitedError,
  quota_exceeded: RateLimitedError,
  resource_exhausted: RateLimitedError,
  unavailable: UnavailableError,
  internal: InternalError,
};

// Codes of answers without a JSON body (a proxy in between), as the Go client maps them.
const BY_STATUS = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  409: "conflict",
  413: "too_large",
  429: "resource_exhausted",
  501: "not_supported",
  503: "unavailable",
};

/**
 * Reads Retry-After in its delay-seconds form; anything else (an HTTP date,
 * a sign, more than a day) is ignored, as the Go client does.
 */
export function parseRetryAfter(v) {
  if (v === undefined || v === null) return undefined;
  v = String(v).trim();
  if (!/^[0-9]{1,6}$/.test(v)) return undefined;
  const n = Number(v);
  return n <= 86400 ? n : undefined;
}

export function makeError(status, code, message, requestId = "", retryAfter = undefined, limit = "") {
  const cls = BY_CODE[code] ?? APIError;
  return new cls(status, code, message, requestId, retryAfter, limit);
}

/** Decodes a non-2xx answer (headers as node gives them: lower-case keys). */
export function fromResponse(status, reason, headers, body) {
  let requestId = String(headers["x-request-id"] ?? "");
  const retryAfter = parseRetryAfter(headers["retry-after"]);
  let code = "";
  let message = "";
  let limit = "";
  const text = body.subarray(0, 64 << 10).toString("utf8");
  try {
    const e = JSON.parse(text)?.error;
    if (e && typeof e === "object") {
      code = String(e.code ?? "");
      message = String(e.message ?? "");
      limit = String(e.limit ?? "");
      requestId = String(e.request_id || requestId);
    }
  } catch {
    // not JSON: a proxy's answer
  }
  if (!code) code = BY_STATUS[status] ?? "internal";
  if (!message) {
    const first = text.trim().split("\n", 1)[0];
    message = first && first.length <= 200 ? first : `${status} ${reason ?? ""}`.trim();
  }
  return makeError(status, code, message, requestId, retryAfter, limit);
}

/** An error carried inside a 200 stream (status 0). */
export function fromStream(e) {
  const code = String(e?.code || "internal");
  return makeError(0, code, String(e?.message || code), String(e?.request_id || ""), undefined, String(e?.limit || ""));
}
