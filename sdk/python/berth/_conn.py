"""How the SDK reaches a daemon, the same way the berth CLI does: the host
(argument, else ``BERTH_HOST``, else the saved context named by the
``context`` argument, ``BERTH_CONTEXT`` or the CLI config file's current
one, else the default unix socket), the API key (argument, else
``BERTH_API_KEY``, else the context's, sent as a bearer token), and for an
``https://`` host either a pinned certificate fingerprint (argument, else
``BERTH_TLS_FINGERPRINT``: ``sha256:`` and the hex SHA-256 of the leaf's
DER, as ``berth serve`` prints it) or a CA file, else the context's. A
context applies only when it gives the host: its key and TLS settings
belong to its daemon and never go to a host named elsewhere (the CLI's
rule, cmd/berth/context.go). Also the retry policy both clients share.

The pin replaces chain and name verification, as in the Go client
(client/tls.go), and is checked inside the TLS handshake — before any
request, and so before the API key, is written to the connection — through
SSLContext.sslsocket_class/sslobject_class, which both httpx's sync
transport (wrap_socket) and asyncio/anyio (wrap_bio) go through.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import ssl
from dataclasses import dataclass
from typing import Optional, Tuple
from urllib.parse import urlsplit

from .errors import APIError, FingerprintError

DEFAULT_HOST = "unix:///run/berth/berth.sock"
"""Where the daemon listens unless told otherwise (client.DefaultHost)."""

CONTEXT_ENV = "BERTH_CONTEXT"
DEFAULT_CONTEXT = "default"
"""The context name that means no saved context (the local socket)."""

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
    context: str = ""
    """The saved context in use ("" for none)."""

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


def config_path() -> str:
    """The berth CLI's config file, which holds its saved contexts:
    $XDG_CONFIG_HOME/berth/config.json, else ~/.config/berth/config.json
    (Go's os.UserConfigDir)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "berth", "config.json")


def load_context(name: Optional[str] = None) -> Tuple[str, Optional[dict]]:
    """The saved context ``name`` (else ``BERTH_CONTEXT``, else the config
    file's current one) as (name, its settings), or ("", None) for none. A
    config file that stores a key and that others can read is refused, as
    the CLI refuses it."""
    name = name or os.environ.get(CONTEXT_ENV) or None
    path = config_path()
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        if name and name != DEFAULT_CONTEXT:
            raise ValueError("context %r is not in %s (no such file); see berth context ls" % (name, path)) from None
        return "", None
    except ValueError as e:
        raise ValueError("config %s: %s" % (path, e)) from None
    contexts = cfg.get("contexts") or {}
    if any((d or {}).get("api_key") for d in contexts.values()) and os.stat(path).st_mode & 0o077:
        raise ValueError("config %s holds an API key but is readable by others: chmod 600 it" % path)
    name = name or cfg.get("current") or None
    if not name or name == DEFAULT_CONTEXT:
        return "", None
    d = contexts.get(name)
    if not d or not d.get("host"):
        raise ValueError("context %r is not in %s; see berth context ls" % (name, path))
    return name, d


def _read_key_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        key = f.read().strip()
    if not key or "\n" in key or "\r" in key:
        raise ValueError("API key file %s must hold one line" % path)
    return key


def resolve(
    host: Optional[str] = None,
    api_key: Optional[str] = None,
    tls_fingerprint: Optional[str] = None,
    tls_ca: Optional[str] = None,
    context: Optional[str] = None,
) -> Conn:
    """Resolves the connection as the CLI does (see the module doc)."""
    if host and context:
        raise ValueError("host and context both name a daemon: give one")
    host = host or os.environ.get("BERTH_HOST") or None
    ctx_name, ctx = ("", None) if host else load_context(context)
    if ctx is not None:
        host = ctx["host"]
    host = host or DEFAULT_HOST
    if api_key is None:
        api_key = os.environ.get("BERTH_API_KEY") or None
    if api_key is None and ctx is not None:
        if ctx.get("api_key"):
            api_key = ctx["api_key"]
        elif ctx.get("api_key_file"):
            api_key = _read_key_file(ctx["api_key_file"])
    if tls_fingerprint is None:
        tls_fingerprint = os.environ.get("BERTH_TLS_FINGERPRINT") or None
    if tls_fingerprint is None and tls_ca is None and ctx is not None:
        # The context's TLS settings go as a unit, with its host.
        tls_fingerprint, tls_ca = ctx.get("tls_fingerprint") or None, ctx.get("tls_ca") or None
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
    ssl_ctx = None
    if tls_fingerprint or tls_ca:
        if u.scheme != "https":
            raise ValueError("invalid host %r: a TLS fingerprint or CA needs an https:// host" % host)
        if tls_fingerprint:
            ssl_ctx = _pinned_context(parse_fingerprint(tls_fingerprint), None)
        else:
            ssl_ctx = ssl.create_default_context(cafile=tls_ca)
            ssl_ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return Conn(host=host, base_url=base, uds=uds, api_key=api_key or "", ssl_context=ssl_ctx, context=ctx_name)


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
