"""How the SDK reaches a daemon, the same way the berth CLI does: the host
(argument, else ``BERTH_HOST``, else the default unix socket), the API key
(argument, else ``BERTH_API_KEY``, sent as a bearer token), and for an
``https://`` host either a pinned certificate fingerprint (argument, else
``BERTH_TLS_FINGERPRINT``: ``sha256:`` and the hex SHA-256 of the leaf's
DER, as ``berth serve`` prints it) or a CA file. Also the retry policy both
clients share.

The pin replaces chain and name verification, as in the Go client
(client/tls.go), and is checked inside the TLS handshake — before any
request, and so before the API key, is written to the connection — through
SSLContext.sslsocket_class/sslobject_class, which both httpx's sync
transport (wrap_socket) and asyncio/anyio (wrap_bio) go through.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import ssl
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from .errors import APIError, FingerprintError

DEFAULT_HOST = "unix:///run/berth/berth.sock"
"""Where the daemon listens unless told otherwise (client.DefaultHost)."""

UNIX_BASE_URL = "http://berth"
IDEMPOTENCY_HEADER = "Idempotency-Key"
NEXT_CURSOR_HEADER = "Berth-Next-Cursor"
SANDBOX_ID_HEADER = "X-Berth-Sandbox-Id"
FILE_MODE_HEADER = "X-Berth-File-Mode"


@dataclass
class Conn:
    """A resolved connection: what the httpx client and the WebSocket dialer need."""

    host: str
    base_url: str
    uds: Optional[str]
    api_key: str
    ssl_context: Optional[ssl.SSLContext]

    def headers(self, user_agent: str) -> dict:
        h = {"User-Agent": user_agent}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        return h


def parse_fingerprint(s: str) -> bytes:
    """Parses "sha256:<64 hex digits>" (or 32 colon-separated bytes)."""
    prefix = "sha256:"
    if len(s) < len(prefix) or s[: len(prefix)].lower() != prefix:
        raise ValueError('invalid TLS fingerprint: want "sha256:<64 hex digits>"')
    h = s[len(prefix):]
    if ":" in h:
        parts = h.split(":")
        if len(parts) != 32 or any(len(p) != 2 for p in parts):
            raise ValueError("invalid TLS fingerprint: want 32 colon-separated bytes")
        h = "".join(parts)
    if len(h) != 64:
        raise ValueError("invalid TLS fingerprint: want 64 hex digits, got %d" % len(h))
    try:
        return bytes.fromhex(h)
    except ValueError:
        raise ValueError("invalid TLS fingerprint: not hex") from None


def fingerprint_of(der: bytes) -> str:
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _pinned_context(want: bytes, ca: Optional[ssl.SSLContext]) -> ssl.SSLContext:
    def check(der: Optional[bytes]) -> None:
        if not der:
            raise FingerprintError("(none)", "sha256:" + want.hex())
        if not hmac.compare_digest(hashlib.sha256(der).digest(), want):
            raise FingerprintError(fingerprint_of(der), "sha256:" + want.hex())

    class PinnedSocket(ssl.SSLSocket):
        def do_handshake(self, *a, **kw):
            super().do_handshake(*a, **kw)
            try:
                check(self.getpeercert(binary_form=True))
            except FingerprintError:
                self.close()
                raise

    class PinnedObject(ssl.SSLObject):
        def do_handshake(self):
            super().do_handshake()
            check(self.getpeercert(binary_form=True))

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.sslsocket_class = PinnedSocket
    ctx.sslobject_class = PinnedObject
    return ctx


def resolve(
    host: Optional[str] = None,
    api_key: Optional[str] = None,
    tls_fingerprint: Optional[str] = None,
    tls_ca: Optional[str] = None,
) -> Conn:
    """Resolves the connection as the CLI does (see the module doc)."""
    host = host or os.environ.get("BERTH_HOST") or DEFAULT_HOST
    api_key = api_key if api_key is not None else os.environ.get("BERTH_API_KEY", "")
    if tls_fingerprint is None:
        tls_fingerprint = os.environ.get("BERTH_TLS_FINGERPRINT") or None
    u = urlsplit(host)
    uds = None
    if u.scheme == "unix":
        sock = u.path or u.netloc
        if not sock:
            raise ValueError("invalid host %r: want unix:///path/to/socket" % host)
        uds, base = sock, UNIX_BASE_URL
    elif u.scheme in ("http", "https"):
        if not u.netloc:
            raise ValueError("invalid host %r: missing host:port" % host)
        base = "%s://%s%s" % (u.scheme, u.netloc, u.path.rstrip("/"))
    elif u.scheme == "tcp":
        base = "http://" + u.netloc  # as docker does: plain HTTP
    else:
        raise ValueError("invalid host %r: scheme must be unix, http or https" % host)
    ctx = None
    if tls_fingerprint or tls_ca:
        if u.scheme != "https":
            raise ValueError("invalid host %r: a TLS fingerprint or CA needs an https:// host" % host)
        if tls_fingerprint:
            ctx = _pinned_context(parse_fingerprint(tls_fingerprint), None)
        else:
            ctx = ssl.create_default_context(cafile=tls_ca)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return Conn(host=host, base_url=base, uds=uds, api_key=api_key or "", ssl_context=ctx)


def new_idempotency_key() -> str:
    """A fresh random key (32 hex digits), as the Go client makes them."""
    return secrets.token_hex(16)


# Retries: the backoff between attempts when the answer says nothing, and
# what may be retried. A request is retried when the daemon refused it
# without doing it (429, or 503) — unless its Retry-After is past the
# caller's max_retry_wait — and, when it is safe to send twice (GET, PUT,
# DELETE of a file, or a POST carrying an Idempotency-Key), when the
# connection broke before an answer came.
BACKOFF = (0.25, 0.5, 1.0, 2.0, 4.0)
SAFE_METHODS = frozenset(("GET", "HEAD", "PUT", "OPTIONS"))


def retry_delay(err: APIError, attempt: int, max_wait: float) -> Optional[float]:
    """How long to wait before retrying after an API error, or None for no retry."""
    if err.status in (429, 503) or err.code == "idempotency_in_progress":
        d = err.retry_after if err.retry_after is not None else BACKOFF[min(attempt, len(BACKOFF) - 1)]
        return d if d <= max_wait else None
    return None
