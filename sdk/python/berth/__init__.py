"""berth: the Python SDK of berth, self-hostable sandboxes for AI agents.

    import berth

    with berth.Client() as client:                      # BERTH_HOST, else the unix socket
        with client.sandboxes.create() as sb:           # deleted when the block ends
            r = sb.exec("echo hello")
            print(r.exit_code, r.text)

``berth.AsyncClient`` is the same API for asyncio (``async with``/``await``),
terminals over WebSocket (``sandbox.pty``) included. The API's types are in
``berth.models``; errors in ``berth.errors`` (also exported here).
"""
from . import models
from ._async_client import AsyncClient, AsyncSandbox
from ._conn import DEFAULT_HOST, fingerprint_of, new_idempotency_key, parse_fingerprint
from ._sync_client import Client, Sandbox
from ._types import ExecResult, Page, ProcessOutput
from .errors import (
    APIError,
    BerthError,
    ConflictError,
    ConnectError,
    FingerprintError,
    InternalError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    RequestTimeout,
    StreamError,
    TooLargeError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "APIError", "AsyncClient", "AsyncSandbox", "BerthError", "Client", "ConflictError", "ConnectError",
    "DEFAULT_HOST", "ExecResult", "FingerprintError", "InternalError", "InvalidArgumentError",
    "LimitExceededError", "NotFoundError", "Page", "PermissionDeniedError", "ProcessOutput",
    "RateLimitedError", "RequestTimeout", "Sandbox", "StreamError", "TooLargeError", "TransportError", "UnauthenticatedError",
    "UnavailableError", "fingerprint_of", "models", "new_idempotency_key", "parse_fingerprint",
]
