"""Errors of the berth SDK.

Every answer of the API that is not 2xx becomes an :class:`APIError` (or
the subclass for its stable ``code``) carrying the HTTP ``status``, the
``code``, the one-line ``message`` safe to show, the ``request_id`` (quote it
when reporting a 5xx: the daemon logged the cause under it), the
``retry_after`` seconds of a 429/503 and, for ``limit_exceeded``, the
``limit`` it names. Errors carried inside a stream (an exec or a log
stream, a WebSocket frame) have ``status`` 0: the stream itself was 200.
"""
from __future__ import annotations

import json
from typing import Dict, Optional, Type


class BerthError(Exception):
    """Base of every error the SDK raises."""


class ConnectError(BerthError):
    """The daemon could not be reached at all."""

    def __init__(self, host: str, cause: BaseException):
        super().__init__(
            "cannot connect to the berth daemon at %s (is `berth serve` running? set host= or BERTH_HOST): %s"
            % (host, cause)
        )
        self.host = host
        self.__cause__ = cause


class FingerprintError(BerthError):
    """The daemon's TLS certificate does not match the pinned fingerprint."""

    def __init__(self, got: str, want: str):
        super().__init__("the daemon's TLS certificate %s does not match the pinned %s" % (got, want))
        self.got, self.want = got, want


class TransportError(BerthError):
    """The connection broke before an answer came (and the request was not one safe to send again)."""


class RequestTimeout(TransportError):
    """No byte of the answer came (or none could be sent) for the call's
    timeout: the client's ``timeout`` for short calls, ``stream_timeout``
    for long-running ones (see Client). Not retried: the call may have been
    done."""


class StreamError(BerthError):
    """A stream (exec output, process logs, a PTY) ended without its exit status."""


class APIError(BerthError):
    """An error answer of the API."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str = "",
        retry_after: Optional[float] = None,
        limit: str = "",
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after
        self.limit = limit

    def __str__(self) -> str:
        s = "%s (%s" % (self.message, self.code)
        if self.status:
            s += ", HTTP %d" % self.status
        if self.request_id:
            s += ", request id %s" % self.request_id
        return s + ")"


class InvalidArgumentError(APIError):
    """400 invalid_argument: the request's input was refused."""


class LimitExceededError(APIError):
    """limit_exceeded: past one of the documented limits (``limit`` names it; docs/limits.md)."""


class UnauthenticatedError(APIError):
    """401 unauthenticated: no credential, or a bad one."""


class PermissionDeniedError(APIError):
    """403 permission_denied: the credential lacks the scope."""


class NotFoundError(APIError):
    """404 not_found: no such object (or not the caller's)."""


class ConflictError(APIError):
    """409 conflict: the object is in the wrong state, or its name is taken."""


class TooLargeError(APIError):
    """413 too_large."""


class RateLimitedError(APIError):
    """429: rate_limited, quota_exceeded or resource_exhausted; ``retry_after`` says when to retry."""


class UnavailableError(APIError):
    """503 unavailable."""


class InternalError(APIError):
    """500 internal: the daemon logged the cause under ``request_id``."""


_BY_CODE: Dict[str, Type[APIError]] = {
    "invalid_argument": InvalidArgumentError,
    "invalid_idempotency_key": InvalidArgumentError,
    "limit_exceeded": LimitExceededError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "idempotency_in_progress": ConflictError,
    "too_large": TooLargeError,
    "rate_limited": RateLimitedError,
    "quota_exceeded": RateLimitedError,
    "resource_exhausted": RateLimitedError,
    "unavailable": UnavailableError,
    "internal": InternalError,
}

# Codes of answers without a JSON body (a proxy in between), as the Go client maps them.
_BY_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    429: "resource_exhausted",
    501: "not_supported",
    503: "unavailable",
}


def parse_retry_after(v: Optional[str]) -> Optional[float]:
    """Reads Retry-After in its delay-seconds form; anything else (an HTTP
    date, a sign, more than a day) is ignored, as the Go client does."""
    if v is None:
        return None
    v = v.strip()
    if not v or len(v) > 6 or not v.isdigit() or not v.isascii():
        return None
    n = int(v)
    return float(n) if n <= 86400 else None


def make_error(status: int, code: str, message: str, request_id: str = "", retry_after=None, limit: str = "") -> APIError:
    cls = _BY_CODE.get(code, APIError)
    if code == "limit_exceeded" and status == 429:
        cls = LimitExceededError
    return cls(status, code, message, request_id, retry_after, limit)


def from_response(status: int, reason: str, headers, body: bytes) -> APIError:
    """Decodes a non-2xx answer (headers: a case-insensitive mapping)."""
    request_id = headers.get("x-request-id", "") or ""
    retry_after = parse_retry_after(headers.get("retry-after"))
    code = message = limit = ""
    try:
        doc = json.loads(body[: 64 << 10])
        e = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(e, dict):
            code = str(e.get("code") or "")
            message = str(e.get("message") or "")
            limit = str(e.get("limit") or "")
            request_id = str(e.get("request_id") or request_id)
    except ValueError:
        pass
    if not code:
        code = _BY_STATUS.get(status, "internal")
    if not message:
        text = body[:64 << 10].decode("utf-8", "replace").strip().split("\n", 1)[0]
        message = text if text and len(text) <= 200 else ("%d %s" % (status, reason)).strip()
    return make_error(status, code, message, request_id, retry_after, limit)


def from_stream(e: dict) -> APIError:
    """An error carried inside a 200 stream (status 0)."""
    code = str(e.get("code") or "internal")
    return make_error(0, code, str(e.get("message") or code), str(e.get("request_id") or ""), None, str(e.get("limit") or ""))
