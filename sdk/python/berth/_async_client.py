"""The asyncio client (berth.AsyncClient). The sync client
(berth/_sync_client.py) is generated from this file by tools/unasync.py:
edit this one, then regenerate.
"""
from __future__ import annotations

import asyncio
import copy
import json
from typing import Any, AsyncIterable, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import httpx

from . import _models as m
from ._conn import (
    BACKOFF,
    FILE_MODE_HEADER,
    IDEMPOTENCY_HEADER,
    NEXT_CURSOR_HEADER,
    SAFE_METHODS,
    SANDBOX_ID_HEADER,
    Conn,
    new_idempotency_key,
    resolve,
    retry_delay,
)
from ._pty import AsyncPty, AsyncTerminals
from ._types import ExecResult, Page, ProcessOutput
from ._wire import SSEParser, as_body
from .errors import APIError, ConnectError, FingerprintError, RequestTimeout, StreamError, TransportError, from_response, from_stream

# Every wait of the retry and reconnect loops goes through here (tests
# record the delays instead of sleeping them).
_sleep = asyncio.sleep

_Body = Union[None, bytes, str, Dict[str, Any], m.Model]

class _Unset:
    def __repr__(self) -> str:
        return "<unchanged>"


_UNSET: Any = _Unset()

DEFAULT_TIMEOUT = 60.0
"""Seconds a short call may go without progress (Client's ``timeout``)."""


def _seg(s: Any) -> str:
    """One escaped path segment (an id, name or template)."""
    return quote(str(s), safe="")


def _bool(v: bool) -> Optional[str]:
    return "true" if v else None


# async-only-begin
async def _aiter_of(chunks: Any) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c
# async-only-end


def _chunks_of(chunks: Any) -> Any:
    """A body to stream: the caller's iterable of bytes (an open binary
    file, a generator), as httpx sends it."""
    # async-only-begin
    if not hasattr(chunks, "__aiter__"):
        return _aiter_of(chunks)
    # async-only-end
    return chunks


class AsyncClient:
    """An asyncio client of one berth daemon.

    ``host`` is ``unix:///path/to/berth.sock``, ``http://host:port`` or
    ``https://host:port`` (default: ``BERTH_HOST``, else the daemon's default
    socket); ``api_key`` defaults to ``BERTH_API_KEY``; ``tls_fingerprint``
    (default ``BERTH_TLS_FINGERPRINT``) pins an https daemon's certificate,
    ``tls_ca`` verifies it against a CA file instead. Without a host (nor
    ``BERTH_HOST``), ``context`` (default ``BERTH_CONTEXT``, else the berth
    CLI's current context) names a context saved by ``berth context add``:
    its host, key and TLS settings. Calls refused with 429
    or 503 are retried up to ``max_retries`` times, waiting what Retry-After
    says (at most ``max_retry_wait`` seconds), else a short backoff.

    Timeouts are per route, in seconds without progress (no byte of the
    answer, or none sent), not in total: ``timeout`` (default 60) bounds
    short calls, whose answer comes once the daemon has done a bounded
    piece of work (get, list, delete, lifecycle verbs, file calls, keys,
    ...); ``stream_timeout`` (default None: no bound) bounds the long-running
    ones, whose answer lasts as long as the work the caller asked for:
    exec and run streams, process waits and logs, watches, event streams,
    template builds, imports, uploads, pushes and apply, copies, exports
    and tar transfers, snapshots, forks, hibernate, wake, restore, and
    creates that pull an ``image``. A stop's ``timeout`` (its grace) is
    added to its bound. ``connect_timeout`` bounds opening a connection.
    ``with_options(timeout=...)`` gives a client for one call or a few with
    other bounds. A call past its bound raises RequestTimeout.

    Use it as a context manager, or call ``aclose()``.
    """

    def __init__(
        self,
        host: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        tls_fingerprint: Optional[str] = None,
        tls_ca: Optional[str] = None,
        user_agent: str = "berth-python",
        max_retries: int = 4,
        max_retry_wait: float = 30.0,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        stream_timeout: Optional[float] = None,
        connect_timeout: float = 30.0,
        context: Optional[str] = None,
    ):
        self._conn: Conn = resolve(host, api_key, tls_fingerprint, tls_ca, context)
        self.host = self._conn.host
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.connect_timeout = connect_timeout
        self._user_agent = user_agent
        transport = httpx.AsyncHTTPTransport(
            uds=self._conn.uds,
            verify=self._conn.ssl_context if self._conn.ssl_context is not None else True,
        )
        self._http = httpx.AsyncClient(
            base_url=self._conn.base_url,
            transport=transport,
            headers=self._conn.headers(user_agent),
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
        )
        self._terminals = AsyncTerminals()
        self._groups()

    def _groups(self) -> None:
        self.sandboxes = AsyncSandboxes(self)
        self.snapshots = AsyncSnapshots(self)
        self.templates = AsyncTemplates(self)
        self.volumes = AsyncVolumes(self)
        self.secrets = AsyncSecrets(self)
        self.events = AsyncEvents(self)
        self.audit = AsyncAudit(self)
        self.keys = AsyncKeys(self)
        self.tenants = AsyncTenants(self)
        self.quotas = AsyncQuotas(self)

    def with_options(
        self,
        *,
        timeout: Optional[float] = _UNSET,
        stream_timeout: Optional[float] = _UNSET,
        max_retries: int = _UNSET,
    ) -> "AsyncClient":
        """A client like this one with other bounds for the calls made
        through it (``client.with_options(timeout=5).sandboxes.get(id)``);
        it shares this client's connections, so closing either closes both."""
        c = copy.copy(self)
        if timeout is not _UNSET:
            c.timeout = timeout
        if stream_timeout is not _UNSET:
            c.stream_timeout = stream_timeout
        if max_retries is not _UNSET:
            c.max_retries = max_retries
        c._groups()
        return c

    def _timeout(self, long: bool, extra: float = 0.0) -> httpx.Timeout:
        t = self.stream_timeout if long else self.timeout
        return httpx.Timeout(None if t is None else t + extra, connect=self.connect_timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections (and, with the sync client, the terminal
        sessions still open and the thread they run on)."""
        await self._terminals.aclose()
        await self._http.aclose()

    # -- transport -------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Dict[str, Any]] = None,
        body: _Body = None,
        headers: Optional[Dict[str, str]] = None,
        idempotency_key: Optional[str] = None,
        stream: bool = False,
        long: bool = False,
        extra_timeout: float = 0.0,
        body_stream: Any = None,
    ) -> httpx.Response:
        """Sends one request with the retry policy (berth._conn); returns a
        2xx response (unread when stream) or raises an APIError. ``long``
        routes are bounded by ``stream_timeout``, the others by ``timeout``
        (plus ``extra_timeout``). ``body_stream`` (an iterable of bytes) is
        sent as it comes and read once: such a request is never sent twice."""
        h = dict(headers or {})
        content: Any = None
        if body_stream is not None:
            content = _chunks_of(body_stream)
            h.setdefault("Content-Type", "application/octet-stream")
        elif isinstance(body, (bytes, str)):
            content = body.encode() if isinstance(body, str) else body
            h.setdefault("Content-Type", "application/octet-stream")
        elif body is not None:
            content = json.dumps(as_body(body)).encode()
            h["Content-Type"] = "application/json"
        if idempotency_key:
            h[IDEMPOTENCY_HEADER] = idempotency_key
        q = {k: v for k, v in (params or {}).items() if v is not None}
        # Sending twice is safe for these; for others only a refusal is retried.
        replayable = (method in SAFE_METHODS or bool(idempotency_key)) and body_stream is None
        attempt = 0
        while True:
            req = self._http.build_request(method, path, params=q, content=content, headers=h,
                                           timeout=self._timeout(long, extra_timeout))
            try:
                resp = await self._http.send(req, stream=True)
            except FingerprintError:
                raise
            except httpx.TimeoutException as e:
                if isinstance(e, httpx.ConnectTimeout) and attempt == 0:
                    raise ConnectError(self.host, e) from e
                raise RequestTimeout("%s %s: no answer within the call's timeout (%s)" % (method, path, type(e).__name__)) from e
            except httpx.ConnectError as e:
                if isinstance(e.__context__, FingerprintError):
                    raise e.__context__ from None
                # Refused at the first attempt: no daemon, say so at once. A
                # daemon that went away since an earlier attempt may be restarting.
                if attempt == 0 or attempt >= self.max_retries:
                    raise ConnectError(self.host, e) from e
                await _sleep(BACKOFF[min(attempt, len(BACKOFF) - 1)])
                attempt += 1
                continue
            except httpx.TransportError as e:
                # Cut before an answer came: the request may or may not have
                # been done, so only a request safe to send twice is sent again.
                if not replayable or attempt >= self.max_retries:
                    raise TransportError("%s %s: %s" % (method, path, e or type(e).__name__)) from e
                await _sleep(BACKOFF[min(attempt, len(BACKOFF) - 1)])
                attempt += 1
                continue
            if 200 <= resp.status_code < 300:
                if not stream:
                    try:
                        await resp.aread()
                    except httpx.TimeoutException as e:
                        raise RequestTimeout("%s %s: the answer stalled past the call's timeout" % (method, path)) from e
                    finally:
                        await resp.aclose()
                return resp
            raw = await resp.aread()
            await resp.aclose()
            err = from_response(resp.status_code, resp.reason_phrase, resp.headers, raw)
            delay = retry_delay(err, attempt, self.max_retry_wait) if attempt < self.max_retries and body_stream is None else None
            if delay is None:
                raise err
            await _sleep(delay)
            attempt += 1

    async def _json(self, method: str, path: str, **kw) -> Any:
        resp = await self._send(method, path, **kw)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    async def _page(self, path: str, params: Optional[Dict[str, Any]], limit: Optional[int], cursor: Optional[str]) -> Tuple[list, str]:
        q = dict(params or {})
        q["limit"], q["cursor"] = limit, cursor or None
        resp = await self._send("GET", path, params=q)
        return resp.json() or [], resp.headers.get(NEXT_CURSOR_HEADER, "")

    async def _all(self, path: str, params: Optional[Dict[str, Any]] = None) -> list:
        out: list = []
        cursor = ""
        while True:
            items, nxt = await self._page(path, params, None, cursor)
            out.extend(items)
            if not nxt:
                return out
            if nxt == cursor:
                raise StreamError("GET %s: the server repeated cursor %r" % (path, nxt))
            cursor = nxt

    async def _ndjson(self, resp: httpx.Response) -> AsyncIterator[dict]:
        try:
            async for line in resp.aiter_lines():
                if line.strip():
                    yield json.loads(line)
        except httpx.TimeoutException as e:
            raise RequestTimeout("%s %s: the stream stalled past the call's timeout" % (resp.request.method, resp.request.url.path)) from e
        finally:
            await resp.aclose()

    # -- system ----------------------------------------------------------

    async def health(self) -> bool:
        """True when the daemon answers /healthz."""
        await self._send("GET", "/healthz")
        return True

    async def version(self) -> m.Version:
        """The daemon's version, runtime classes and their capabilities, and its TLS fingerprint."""
        return m.Version.from_dict(await self._json("GET", "/v1/version"))

    async def whoami(self) -> m.WhoAmI:
        """The credential this client uses, as the daemon sees it: actor,
        tenant, scopes, the narrowest role holding them, and whether it is
        the host's administrator (never the key itself)."""
        return m.WhoAmI.from_dict(await self._json("GET", "/v1/whoami"))

    async def metrics(self) -> str:
        """The daemon's metrics in the Prometheus text format (GET /metrics;
        the host's administrator only)."""
        return (await self._send("GET", "/metrics")).text

    async def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI document (GET /v1/openapi.json): the API it
        serves, for tools that read it."""
        return await self._json("GET", "/v1/openapi.json")

    async def doctor(self, fix: bool = False) -> m.DoctorReport:
        """The daemon's health report: leaks and records that disagree with the host. ``fix`` repairs what it can (host admin)."""
        if fix:
            return m.DoctorReport.from_dict(await self._json("POST", "/v1/doctor/fix"))
        return m.DoctorReport.from_dict(await self._json("GET", "/v1/doctor"))

    async def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        sandbox: Optional[m.CreateSandboxRequest] = None,
        stdin: Union[None, bytes, str] = None,
        env: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs one command in a one-shot sandbox (POST /v1/run) that the
        daemon destroys when the command ends: the same as create, exec and
        delete in one round trip. Not retried on a cut connection (the
        command may have run); ``result.sandbox_id`` names the sandbox."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        req = m.RunRequest(sandbox=sandbox or m.CreateSandboxRequest(),
                           exec=m.ExecRequest(cmd=argv, stdin=stdin, env=env, timeout_seconds=timeout))
        resp = await self._send("POST", "/v1/run", body=req, headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        sandbox_id = resp.headers.get(SANDBOX_ID_HEADER, "")
        out, err = bytearray(), bytearray()
        async for d in self._ndjson(resp):
            ev = m.ExecEvent.from_dict(d)
            if ev.error is not None:
                raise from_stream(d["error"])
            if ev.exit is not None:
                return ExecResult(exit=ev.exit, stdout=bytes(out), stderr=bytes(err), sandbox_id=sandbox_id)
            if ev.data:
                (err if ev.stream == "stderr" else out).extend(ev.data)
        raise StreamError("the run stream ended without an exit status")

    async def apply(self, spec: str, files: Optional[bytes] = None, *, on_output: Optional[Callable[[m.BuildEvent], Any]] = None) -> m.Template:
        """Builds a declarative template: ``spec`` is the template file
        (YAML or JSON), ``files`` a tar of the local files its copy steps
        name. Only steps whose inputs changed are built again."""
        resp = await self._send("POST", "/v1/apply", body=m.ApplyRequest(spec=spec, files=files),
                                headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        return await self._build_stream(resp, on_output)

    async def _result_stream(self, resp: httpx.Response, unended: str, each: Callable[[dict], Any]) -> Any:
        """Reads the NDJSON stream of a build, import or push: each line
        goes to ``each``, which returns the stream's result (ending it) or
        None; an error line raises, naming its build step if it has one; a
        stream that ends without a result raises StreamError(``unended``)."""
        events = self._ndjson(resp)
        try:
            async for d in events:
                if d.get("error"):
                    err = from_stream(d["error"])
                    if d.get("step"):
                        err.message = "step %d: %s" % (d["step"], err.message)
                        err.args = (err.message,)
                    raise err
                r = each(d)
                if r is not None:
                    return r
        finally:
            await events.aclose()
        raise StreamError(unended)

    async def _build_stream(self, resp: httpx.Response, on_output: Optional[Callable[[m.BuildEvent], Any]]) -> m.Template:
        def each(d: dict) -> Optional[m.Template]:
            ev = m.BuildEvent.from_dict(d)
            if ev.data and on_output and ev.template is None:
                on_output(ev)
            return ev.template

        return await self._result_stream(resp, "the build stream ended without a template", each)

    async def copy(self, from_sandbox: str, from_path: str, to_sandbox: str, to_path: str, *, preserve_owner: bool = False) -> None:
        """Copies a file or directory from one sandbox to another (docker
        cp's rules), without the bytes passing through this client."""
        req = m.CopyRequest(from_=from_sandbox, from_path=from_path, to=to_sandbox, to_path=to_path, preserve_owner=preserve_owner or None)
        await self._send("POST", "/v1/copy", body=req, long=True)

    async def pools(self) -> List[m.Pool]:
        """Every template's warm pool."""
        return [m.Pool.from_dict(p) for p in await self._json("GET", "/v1/pools") or []]

    async def webhooks(self) -> List[m.Webhook]:
        """The webhook endpoints the daemon posts lifecycle events to
        (``berth serve --webhook-url``; the host's administrator only): each
        URL with its user, password and query values redacted, whether
        deliveries are signed (never the secret) and this daemon's recent
        delivery attempts, newest first. Empty when none is configured."""
        return [m.Webhook.from_dict(w) for w in await self._json("GET", "/v1/webhooks") or []]


class AsyncSandbox:
    """One sandbox: its last known state in ``info`` (a berth.models.Sandbox)
    and the calls on it. ``async with`` deletes it when the block ends,
    whether or not the block raised."""

    def __init__(self, client: AsyncClient, info: m.Sandbox):
        self._c = client
        self.info = info
        self.id: str = info.id
        self.files = AsyncFiles(client, self.id)
        self.processes = AsyncProcesses(client, self.id)
        self.network = AsyncNetwork(client, self.id)

    def __repr__(self) -> str:
        return "<%s %s %s>" % (type(self).__name__, self.id, self.info.state)

    @property
    def state(self) -> str:
        """The state as last read (``refresh()`` reads it again)."""
        return self.info.state

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.delete(force=True)
        except APIError as e:
            if e.status != 404:
                raise

    def _path(self, *rest: str) -> str:
        return "/v1/sandboxes/" + _seg(self.id) + "".join("/" + r for r in rest)

    async def _verb(self, verb: str, params: Optional[Dict[str, Any]] = None, long: bool = False, extra_timeout: float = 0.0) -> "AsyncSandbox":
        self.info = m.Sandbox.from_dict(await self._c._json("POST", self._path(verb), params=params, long=long, extra_timeout=extra_timeout))
        return self

    async def refresh(self) -> "AsyncSandbox":
        """Reads the sandbox's current state into ``info``."""
        self.info = m.Sandbox.from_dict(await self._c._json("GET", self._path()))
        return self

    async def delete(self, force: bool = False) -> m.Sandbox:
        """Deletes the sandbox; ``force`` kills its processes without a graceful stop."""
        self.info = m.Sandbox.from_dict(await self._c._json("DELETE", self._path(), params={"force": _bool(force)}))
        return self.info

    async def stop(self, timeout: Optional[float] = None) -> "AsyncSandbox":
        """Stops it (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        return await self._verb("stop", {"timeout": None if timeout is None else "%gs" % timeout}, extra_timeout=timeout or 0.0)

    async def start(self) -> "AsyncSandbox":
        """Starts a stopped sandbox (a hibernated one is woken)."""
        return await self._verb("start")

    async def pause(self) -> "AsyncSandbox":
        """Freezes every process in place, memory kept (a class that cannot freeze stops instead)."""
        return await self._verb("pause")

    async def resume(self) -> "AsyncSandbox":
        """Continues a paused sandbox."""
        return await self._verb("resume")

    async def reset(self) -> "AsyncSandbox":
        """Returns the writable layer and owned volumes to the template's state."""
        return await self._verb("reset")

    async def touch(self) -> "AsyncSandbox":
        """Counts as activity: pushes back the idle timeout."""
        return await self._verb("touch")

    async def hibernate(self) -> "AsyncSandbox":
        """Saves processes and memory to disk and releases them (classes with checkpoint: gVisor)."""
        return await self._verb("hibernate", long=True)

    async def wake(self) -> "AsyncSandbox":
        """Restores a hibernated sandbox: its processes continue where they were."""
        return await self._verb("wake", long=True)

    async def quarantine(self) -> "AsyncSandbox":
        """Freezes the sandbox and cuts its network; its files stay
        readable for inspection. ``release()`` ends it."""
        return await self._verb("quarantine")

    async def release(self) -> "AsyncSandbox":
        """Ends a quarantine: the sandbox runs again, its rules restored."""
        return await self._verb("release")

    async def port_request(
        self,
        port: int,
        path: str = "/",
        *,
        method: str = "GET",
        body: Union[None, bytes, str] = None,
        headers: Optional[Dict[str, str]] = None,
        params: Optional[Dict[str, Any]] = None,
    ) -> httpx.Response:
        """Sends one HTTP request to ``port`` of the sandbox through the
        daemon's port proxy (/v1/sandboxes/{id}/ports/{port}/{path}) with
        this client's credentials, and returns the answer, read, whatever
        its status: a status from the sandbox's server is not an error
        here. The proxy's own refusals (nothing listens, no right) are
        APIErrors. Never retried: the request may not be safe to repeat."""
        target = self._path("ports", str(int(port))) + "/" + path.lstrip("/")
        content = body.encode() if isinstance(body, str) else body
        try:
            resp = await self._c._http.request(method, target, content=content, headers=headers, params=params,
                                               timeout=self._c._timeout(False))
        except httpx.ConnectError as e:
            raise ConnectError(self._c.host, e) from e
        except httpx.TimeoutException as e:
            raise RequestTimeout("%s %s: no answer within the call's timeout" % (method, target)) from e
        except httpx.TransportError as e:
            raise TransportError("%s %s: %s" % (method, target, e or type(e).__name__)) from e
        if resp.headers.get("content-type", "").startswith("application/json") and resp.status_code >= 400:
            try:
                err = resp.json().get("error")
            except ValueError:
                err = None
            if isinstance(err, dict) and "code" in err:
                raise from_response(resp.status_code, resp.reason_phrase, resp.headers, resp.content)
        return resp

    async def diff(self) -> List[m.DiffEntry]:
        """What changed in the writable layer against the template."""
        return [m.DiffEntry.from_dict(d) for d in await self._c._json("GET", self._path("diff")) or []]

    async def usage(self) -> m.SandboxUsage:
        """The sandbox's CPU, memory and disk use now, each with its limit
        (GET /v1/sandboxes/{id}/usage). A sandbox that is not running has
        nothing to measure: its state, and zeros."""
        return m.SandboxUsage.from_dict(await self._c._json("GET", self._path("usage")))

    async def fork(self, count: int = 1, *, idempotency_key: Optional[str] = None, **fields) -> List["AsyncSandbox"]:
        """Forks ``count`` children from this sandbox's current state
        (ForkRequest's fields as keywords); retried safely with one
        Idempotency-Key."""
        req = m.ForkRequest(count=count, **fields)
        d = await self._c._json("POST", self._path("fork"), body=req, idempotency_key=idempotency_key or new_idempotency_key(), long=True)
        fr = m.ForkResponse.from_dict(d)
        return [AsyncSandbox(self._c, ch) for ch in fr.children or []]

    async def snapshot(self, name: Optional[str] = None, *, retention_seconds: Optional[float] = None, idempotency_key: Optional[str] = None) -> m.Snapshot:
        """Captures the sandbox's files as a named snapshot (retried safely with one Idempotency-Key)."""
        req = m.CreateSnapshotRequest(name=name, retention_seconds=retention_seconds)
        d = await self._c._json("POST", self._path("snapshots"), body=req, idempotency_key=idempotency_key or new_idempotency_key(), long=True)
        return m.Snapshot.from_dict(d)

    async def snapshots(self) -> List[m.Snapshot]:
        """This sandbox's snapshots (every page)."""
        return [m.Snapshot.from_dict(s) for s in await self._c._all(self._path("snapshots"))]

    async def exec_stream(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        stdin: Union[None, bytes, str] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[m.ExecEvent]:
        """Runs a command and yields its output as it comes: ExecEvents with
        ``stream`` and ``data``, the last one with ``exit``. An error event
        raises its APIError; a stream cut before the exit raises StreamError.
        A string ``cmd`` runs under ``sh -c``."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        req = m.ExecRequest(cmd=argv, stdin=stdin, env=env, workdir=workdir, user=user, timeout_seconds=timeout)
        resp = await self._c._send("POST", self._path("exec"), body=req, headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        async for d in self._c._ndjson(resp):
            ev = m.ExecEvent.from_dict(d)
            if ev.error is not None:
                raise from_stream(d["error"])
            yield ev
            if ev.exit is not None:
                return
        raise StreamError("the exec stream ended without an exit status")

    async def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        stdin: Union[None, bytes, str] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[Callable[[bytes], Any]] = None,
        on_stderr: Optional[Callable[[bytes], Any]] = None,
    ) -> ExecResult:
        """Runs a command to its end: its exit status and output (also
        handed to ``on_stdout``/``on_stderr`` as it comes). A non-zero exit
        is not an error: look at ``exit_code``."""
        out, err = bytearray(), bytearray()
        async for ev in self.exec_stream(cmd, stdin=stdin, env=env, workdir=workdir, user=user, timeout=timeout):
            if ev.exit is not None:
                return ExecResult(exit=ev.exit, stdout=bytes(out), stderr=bytes(err))
            if ev.data:
                if ev.stream == "stderr":
                    err += ev.data
                    if on_stderr:
                        on_stderr(ev.data)
                else:
                    out += ev.data
                    if on_stdout:
                        on_stdout(ev.data)
        raise StreamError("the exec stream ended without an exit status")  # pragma: no cover

    async def events(self, after: int = 0) -> List[m.Event]:
        """This sandbox's recorded events (every page)."""
        return await self._c.events.list(sandbox=self.id, after=after)

    async def export(self, paths: Sequence[str]) -> bytes:
        """A tar archive of ``paths`` (files or directories) in the sandbox."""
        resp = await self._c._send("POST", self._path("export"), body=m.ExportRequest(paths=list(paths)),
                                   headers={"Accept": "application/x-tar"}, long=True)
        return resp.content

    async def port_token(self, port: int, ttl_seconds: Optional[int] = None) -> m.PortToken:
        """A token (and URL) that reaches ``port`` of the sandbox through the port proxy."""
        d = await self._c._json("POST", self._path("ports", str(int(port)), "token"),
                                body=m.CreatePortTokenRequest(ttl_seconds=ttl_seconds))
        return m.PortToken.from_dict(d)

    async def port_tokens(self) -> List[m.PortTokenInfo]:
        """The port tokens minted for this sandbox (their ids, never their secrets)."""
        return [m.PortTokenInfo.from_dict(t) for t in await self._c._json("GET", self._path("port-tokens")) or []]

    async def revoke_port_token(self, token_id: str) -> m.PortTokenInfo:
        """Revokes one port token: its links stop working."""
        return m.PortTokenInfo.from_dict(await self._c._json("DELETE", self._path("port-tokens", _seg(token_id))))

    async def lease(self, scopes: Sequence[str], ttl_seconds: int = 0) -> m.Lease:
        """Mints a lease token limited to this sandbox and ``scopes``."""
        req = m.CreateLeaseRequest(scopes=list(scopes), ttl_seconds=ttl_seconds or None)
        return m.Lease.from_dict(await self._c._json("POST", self._path("leases"), body=req))

    async def revoke_lease(self, lease_id: str) -> None:
        """Revokes one lease of this sandbox (the id ``lease()`` answered;
        the create-time lease's is ``"c-"`` and the sandbox id): refused from
        its next request, its open streams ended."""
        await self._c._send("DELETE", self._path("leases", _seg(lease_id)))

    def pty(
        self,
        cmd: Union[str, Sequence[str]] = ("sh",),
        *,
        rows: int = 24,
        cols: int = 80,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        tty: bool = True,
    ) -> AsyncPty:
        """Opens an interactive terminal over the exec WebSocket:
        ``async with sb.pty(...) as t:`` then ``t.send``, ``t.resize``,
        ``t.recv``, ``t.read_until``, ``t.wait``. With ``tty=False`` the
        same session runs over pipes: no terminal, and
        ``t.close_stdin()`` ends the command's input (a terminal has no end
        of input; send ``"\\x04"``, its ^D, instead)."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        req = m.ExecRequest(cmd=argv, env=env, workdir=workdir, user=user, tty=tty or None,
                            rows=rows if tty else None, cols=cols if tty else None)
        return AsyncPty(self._c, self._path("exec", "ws"), req)


class AsyncSandboxes:
    """client.sandboxes: create, get, list and delete."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def create(
        self,
        template: Optional[str] = None,
        *,
        request: Optional[m.CreateSandboxRequest] = None,
        idempotency_key: Optional[str] = None,
        **fields,
    ) -> AsyncSandbox:
        """Creates a sandbox from ``template`` with any CreateSandboxRequest
        field as a keyword (or a whole ``request``). Sent with an
        Idempotency-Key (yours, or a random one), so a retry after a cut
        connection never makes two."""
        req = request or m.CreateSandboxRequest(template=template, **fields)
        # A create that pulls an image lasts as long as the pull.
        d = await self._c._json("POST", "/v1/sandboxes", body=req, idempotency_key=idempotency_key or new_idempotency_key(),
                                long=bool(req.image))
        return AsyncSandbox(self._c, m.Sandbox.from_dict(d))

    async def get(self, id_or_name: str) -> AsyncSandbox:
        """One sandbox by id or name."""
        return AsyncSandbox(self._c, m.Sandbox.from_dict(await self._c._json("GET", "/v1/sandboxes/" + _seg(id_or_name))))

    async def list(self, all: bool = False) -> List[AsyncSandbox]:
        """Every sandbox (every page); ``all`` includes deleted ones still kept."""
        return [AsyncSandbox(self._c, m.Sandbox.from_dict(d)) for d in await self._c._all("/v1/sandboxes", {"all": _bool(all)})]

    async def list_page(self, all: bool = False, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """One page; pass its ``next_cursor`` for the next ("" at the end)."""
        items, nxt = await self._c._page("/v1/sandboxes", {"all": _bool(all)}, limit, cursor)
        return Page(items=[AsyncSandbox(self._c, m.Sandbox.from_dict(d)) for d in items], next_cursor=nxt)

    async def delete(self, id_or_name: str, force: bool = False) -> m.Sandbox:
        """Deletes a sandbox by id or name."""
        return m.Sandbox.from_dict(await self._c._json("DELETE", "/v1/sandboxes/" + _seg(id_or_name), params={"force": _bool(force)}))

    async def usage(self, id_or_name: str) -> m.SandboxUsage:
        """A sandbox's resource use now, by id or name, without fetching it
        first (as ``sb.usage()``)."""
        return m.SandboxUsage.from_dict(await self._c._json("GET", "/v1/sandboxes/" + _seg(id_or_name) + "/usage"))


class AsyncFiles:
    """sandbox.files: the files routes."""

    def __init__(self, client: AsyncClient, sandbox_id: str):
        self._c = client
        self._p = "/v1/sandboxes/" + _seg(sandbox_id) + "/files"

    async def read(self, path: str) -> bytes:
        """A file's whole content."""
        return (await self._c._send("GET", self._p, params={"path": path})).content

    async def read_stream(self, path: str) -> AsyncIterator[bytes]:
        """Yields the file's bytes in chunks as they arrive."""
        resp = await self._c._send("GET", self._p, params={"path": path}, stream=True)
        try:
            async for chunk in resp.aiter_bytes():
                yield chunk
        finally:
            await resp.aclose()

    async def mode(self, path: str) -> int:
        """The file's permission bits (X-Berth-File-Mode of a read)."""
        resp = await self._c._send("GET", self._p, params={"path": path})
        return int(resp.headers.get(FILE_MODE_HEADER, "0"), 8)

    async def write(self, path: str, data: Union[bytes, str], mode: Optional[int] = None) -> m.FileInfo:
        """Writes (replaces) a file; ``mode`` like 0o755."""
        resp = await self._c._send("PUT", self._p, params={"path": path, "mode": None if mode is None else "%04o" % mode}, body=data)
        return m.FileInfo.from_dict(resp.json()) if resp.status_code != 204 and resp.content else m.FileInfo.from_dict({})

    async def write_stream(self, path: str, chunks: Union[AsyncIterable[bytes], Any], mode: Optional[int] = None) -> m.FileInfo:
        """Writes (replaces) a file from ``chunks``, sent as they come and
        never held whole here: an iterable of bytes (an open binary file, a
        generator) or, with the asyncio client, an async iterable too.
        ``mode`` like 0o755. Not retried (the chunks are read once)."""
        resp = await self._c._send("PUT", self._p, params={"path": path, "mode": None if mode is None else "%04o" % mode},
                                   body_stream=chunks, long=True)
        return m.FileInfo.from_dict(resp.json()) if resp.status_code != 204 and resp.content else m.FileInfo.from_dict({})

    async def stat(self, path: str) -> m.FileInfo:
        """One file's information (type, size, mode, owner, times)."""
        return m.FileInfo.from_dict(await self._c._json("GET", self._p + "/stat", params={"path": path}))

    async def list(self, path: str) -> List[m.FileInfo]:
        """A directory's entries."""
        return [m.FileInfo.from_dict(d) for d in await self._c._json("GET", self._p + "/list", params={"path": path}) or []]

    async def mkdir(self, path: str, parents: bool = False) -> None:
        """Makes a directory (``parents``: and its missing parents)."""
        await self._c._send("POST", self._p + "/mkdir", params={"path": path, "parents": _bool(parents)})

    async def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, or a directory with ``recursive``."""
        await self._c._send("DELETE", self._p, params={"path": path, "recursive": _bool(recursive)})

    async def move(self, src: str, dst: str, no_replace: bool = False) -> None:
        """Renames ``src`` to ``dst`` (``no_replace``: refuse if ``dst`` exists)."""
        await self._c._send("POST", self._p + "/move", params={"path": src, "to": dst, "no_replace": _bool(no_replace)})

    async def watch(self, path: str, recursive: bool = False) -> AsyncIterator[m.WatchEvent]:
        """Yields the changes under directory ``path`` as they happen: first
        ``ready``, then create, write, remove, rename and overflow events,
        until the caller stops or the directory goes (``end``, which ends
        the iteration). A failed watch raises its error."""
        resp = await self._c._send("GET", self._p + "/watch", params={"path": path, "recursive": _bool(recursive)},
                                   headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        async for d in self._c._ndjson(resp):
            ev = m.WatchEvent.from_dict(d)
            if ev.type == "end":
                return
            if ev.type == "error":
                raise from_stream(d.get("error") or {"code": "internal", "message": "watch %s failed" % path})
            yield ev

    async def read_tar(self, path: str) -> bytes:
        """A tar archive of ``path`` (a file or a directory tree)."""
        resp = await self._c._send("GET", self._p, params={"path": path, "format": "tar"}, headers={"Accept": "application/x-tar"}, long=True)
        return resp.content

    async def write_tar(self, directory: str, archive: bytes) -> None:
        """Unpacks a tar archive into ``directory``."""
        await self._c._send("PUT", self._p, params={"path": directory, "format": "tar"}, body=archive, headers={"Content-Type": "application/x-tar"}, long=True)


class AsyncProcesses:
    """sandbox.processes: background processes."""

    def __init__(self, client: AsyncClient, sandbox_id: str):
        self._c = client
        self._p = "/v1/sandboxes/" + _seg(sandbox_id) + "/processes"

    async def start(self, cmd: Union[str, Sequence[str]], **fields) -> m.Process:
        """Starts a background process (StartProcessRequest's fields as keywords: tag, env, restart, ...)."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return m.Process.from_dict(await self._c._json("POST", self._p, body=m.StartProcessRequest(cmd=argv, **fields)))

    async def list(self) -> List[m.Process]:
        """The sandbox's background processes."""
        return m.ProcessList.from_dict(await self._c._json("GET", self._p)).processes or []

    async def get(self, pid: str) -> m.Process:
        """One background process."""
        return m.Process.from_dict(await self._c._json("GET", self._p + "/" + _seg(pid)))

    async def logs_stream(self, pid: str, follow: bool = False) -> AsyncIterator[m.ProcessEvent]:
        """Yields the process's output (ProcessEvents; ``gap`` counts bytes
        dropped before this reader), with ``follow`` until it exits (the last
        event carries ``exit``)."""
        resp = await self._c._send("GET", self._p + "/" + _seg(pid) + "/logs", params={"follow": _bool(follow)},
                                   headers={"Accept": "application/x-ndjson"}, stream=True, long=follow)
        async for d in self._c._ndjson(resp):
            ev = m.ProcessEvent.from_dict(d)
            if ev.error is not None:
                raise from_stream(d["error"])
            yield ev
            if ev.exit is not None:
                return

    async def logs(self, pid: str, follow: bool = False) -> ProcessOutput:
        """The output so far (or, with ``follow``, to the process's end)."""
        out, err, gap, exit = bytearray(), bytearray(), 0, None
        async for ev in self.logs_stream(pid, follow):
            if ev.exit is not None:
                exit = ev.exit
            elif ev.gap:
                gap += ev.gap
            elif ev.data:
                (err if ev.stream == "stderr" else out).extend(ev.data)
        return ProcessOutput(stdout=bytes(out), stderr=bytes(err), exit=exit, gap=gap)

    async def stdin(self, pid: str, data: Union[bytes, str] = b"", close: bool = False) -> None:
        """Writes ``data`` to the process's stdin (``close``: then ends its input)."""
        await self._c._send("POST", self._p + "/" + _seg(pid) + "/stdin", params={"close": _bool(close)}, body=data)

    async def signal(self, pid: str, signal: str) -> None:
        """Sends a signal by name ("TERM", "INT", "HUP", ...)."""
        await self._c._send("POST", self._p + "/" + _seg(pid) + "/signal", body=m.SignalRequest(signal=signal))

    async def kill(self, pid: str) -> None:
        """Kills the process (SIGKILL); a restart policy does not bring it back."""
        await self._c._send("POST", self._p + "/" + _seg(pid) + "/kill")

    async def wait(self, pid: str) -> m.ExecExit:
        """Waits for the process to end: its exit status."""
        return m.ExecExit.from_dict(await self._c._json("POST", self._p + "/" + _seg(pid) + "/wait", long=True))

    def attach(self, pid: str) -> AsyncPty:
        """Attaches to a background process over its WebSocket:
        ``async with sb.processes.attach(pid) as t:`` then, as with
        a terminal, ``t.recv``, ``t.send`` (its stdin), ``t.resize`` (a PTY
        process's), ``t.wait``. Its kept output comes first, then live
        output; leaving does not end the process."""
        return AsyncPty(self._c, self._p + "/" + _seg(pid) + "/ws", None)


class AsyncNetwork:
    """sandbox.network: live egress rules and the flow log."""

    def __init__(self, client: AsyncClient, sandbox_id: str):
        self._c = client
        self._p = "/v1/sandboxes/" + _seg(sandbox_id)

    async def get(self) -> m.NetworkRules:
        """The sandbox's egress mode and rules."""
        return m.NetworkRules.from_dict(await self._c._json("GET", self._p + "/network"))

    async def update(self, allow: Optional[Sequence[str]] = None, deny: Optional[Sequence[str]] = None) -> m.NetworkRules:
        """Adds ``allow`` rules and removes ``deny`` ones, live."""
        req = m.NetworkRulesRequest(allow=list(allow) if allow is not None else None, deny=list(deny) if deny is not None else None)
        return m.NetworkRules.from_dict(await self._c._json("POST", self._p + "/network", body=req))

    async def flows(self, after: int = 0) -> List[m.Flow]:
        """The flow log: each egress connection and DNS answer decided, after id ``after``."""
        return [m.Flow.from_dict(f) for f in await self._c._json("GET", self._p + "/flows", params={"after": after or None}) or []]


class AsyncSnapshots:
    """client.snapshots (a sandbox's own: sandbox.snapshots(), sandbox.snapshot())."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def list(self) -> List[m.Snapshot]:
        """Every snapshot (every page)."""
        return [m.Snapshot.from_dict(s) for s in await self._c._all("/v1/snapshots")]

    async def get(self, id_or_name: str) -> m.Snapshot:
        """One snapshot by id or name."""
        return m.Snapshot.from_dict(await self._c._json("GET", "/v1/snapshots/" + _seg(id_or_name)))

    async def delete(self, id_or_name: str) -> None:
        """Deletes a snapshot."""
        await self._c._send("DELETE", "/v1/snapshots/" + _seg(id_or_name))

    async def restore(self, id_or_name: str) -> AsyncSandbox:
        """Rolls the snapshot's sandbox back to it."""
        d = await self._c._json("POST", "/v1/snapshots/" + _seg(id_or_name) + "/restore", long=True)
        return AsyncSandbox(self._c, m.Sandbox.from_dict(d))


class AsyncTemplates:
    """client.templates: templates and their warm pools."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def list(self) -> List[m.Template]:
        """Every template (every page)."""
        return [m.Template.from_dict(t) for t in await self._c._all("/v1/templates")]

    async def list_page(self, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """One page of templates and the next cursor."""
        items, nxt = await self._c._page("/v1/templates", None, limit, cursor)
        return Page(items=[m.Template.from_dict(t) for t in items], next_cursor=nxt)

    async def get(self, name: str) -> m.Template:
        """One template by name."""
        return m.Template.from_dict(await self._c._json("GET", "/v1/templates/" + _seg(name)))

    async def delete(self, name: str) -> None:
        """Deletes a template (refused while sandboxes use it)."""
        await self._c._send("DELETE", "/v1/templates/" + _seg(name))

    async def get_pool(self, name: str) -> m.Pool:
        """The template's warm pool: its size, ready and starting members, hits and misses."""
        return m.Pool.from_dict(await self._c._json("GET", "/v1/templates/" + _seg(name) + "/pool"))

    async def set_pool(self, name: str, min: int) -> m.Pool:
        """Keeps ``min`` sandboxes of the template warm (0 empties the pool)."""
        return m.Pool.from_dict(await self._c._json("PUT", "/v1/templates/" + _seg(name) + "/pool", body=m.PoolRequest(min=min)))

    async def clear_pool(self, name: str) -> m.Pool:
        """Forgets the size set for the template's pool: the default
        template's pool is the daemon's automatic one again, any other has
        none."""
        return m.Pool.from_dict(await self._c._json("PUT", "/v1/templates/" + _seg(name) + "/pool", body=m.PoolRequest(min=0, auto=True)))

    async def import_(
        self,
        name: str,
        ref: Optional[str] = None,
        *,
        path: Optional[str] = None,
        insecure: Optional[bool] = None,
        registry_auth: Optional[m.RegistryAuth] = None,
        service: Optional[m.TemplateService] = None,
        on_progress: Optional[Callable[[m.ImportProgress], Any]] = None,
    ) -> m.Template:
        """Imports template ``name`` from a registry image ``ref`` (with
        ``registry_auth``, or the daemon's own credentials for the host's
        templates) or from ``path``, an OCI layout or docker-save tarball on
        the daemon's host. Each layer's progress goes to ``on_progress``."""
        req = m.ImportTemplateRequest(name=name, ref=ref, path=path, insecure=insecure, registry_auth=registry_auth, service=service)
        resp = await self._c._send("POST", "/v1/templates/import", body=req, headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        return await self._import_stream(resp, on_progress)

    async def upload(self, name: str, archive: bytes, *, on_progress: Optional[Callable[[m.ImportProgress], Any]] = None) -> m.Template:
        """Imports template ``name`` from a docker-save or OCI tarball sent
        from here (``archive``, its bytes)."""
        resp = await self._c._send("PUT", "/v1/templates/" + _seg(name) + "/archive", body=bytes(archive),
                                   headers={"Content-Type": "application/x-tar", "Accept": "application/x-ndjson"}, stream=True, long=True)
        return await self._import_stream(resp, on_progress)

    async def _import_stream(self, resp: httpx.Response, on_progress: Optional[Callable[[m.ImportProgress], Any]]) -> m.Template:
        def each(d: dict) -> Optional[m.Template]:
            # An ImportEvent: progress lines, then the template.
            if d.get("template"):
                return m.Template.from_dict(d["template"])
            if d.get("progress") and on_progress:
                on_progress(m.ImportProgress.from_dict(d["progress"]))
            return None

        return await self._c._result_stream(resp, "the import stream ended without a template", each)

    async def build(
        self,
        name: str,
        from_: str,
        run: Sequence[str],
        *,
        env: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        network: Optional[str] = None,
        allow: Optional[Sequence[str]] = None,
        service: Optional[m.TemplateService] = None,
        on_output: Optional[Callable[[m.BuildEvent], Any]] = None,
    ) -> m.Template:
        """Builds template ``name`` by running the ``run`` shell steps on
        top of template ``from_``, each step's output handed to
        ``on_output`` (BuildEvents: ``step``, ``stream``, ``data``) as it
        comes. Steps have no network unless ``network="egress"`` with
        ``allow`` rules. A step that fails raises its error with the step
        number in the message."""
        req = m.BuildTemplateRequest(name=name, from_=from_, run=list(run), env=env, timeout_seconds=timeout,
                                     network=network, allow=list(allow) if allow is not None else None, service=service)
        resp = await self._c._send("POST", "/v1/templates/build", body=req, headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        return await self._c._build_stream(resp, on_output)

    async def build_dockerfile(
        self,
        name: str,
        context: bytes,
        *,
        dockerfile: Optional[str] = None,
        target: Optional[str] = None,
        build_args: Optional[Dict[str, str]] = None,
        network: Optional[str] = None,
        allow: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
        on_output: Optional[Callable[[m.BuildEvent], Any]] = None,
    ) -> m.Template:
        """Builds template ``name`` from a Dockerfile: ``context`` is a tar
        archive of the build context holding it (``dockerfile`` names it,
        "Dockerfile" by default). ``FROM`` names a berth template."""
        params: Dict[str, Any] = {"dockerfile": dockerfile, "target": target,
                                  "buildargs": json.dumps(build_args) if build_args else None,
                                  "network": network, "allow": list(allow) if allow else None,
                                  "timeout_seconds": timeout}
        resp = await self._c._send("POST", "/v1/templates/" + _seg(name) + "/dockerfile", params=params, body=bytes(context),
                                   headers={"Content-Type": "application/x-tar", "Accept": "application/x-ndjson"}, stream=True, long=True)
        return await self._c._build_stream(resp, on_output)

    async def push(
        self,
        name: str,
        ref: str,
        *,
        insecure: Optional[bool] = None,
        registry_auth: Optional[m.RegistryAuth] = None,
        on_progress: Optional[Callable[[m.ImportProgress], Any]] = None,
    ) -> m.PushResult:
        """Writes template ``name`` to a registry as the OCI image ``ref``;
        each layer's upload goes to ``on_progress``."""
        req = m.PushTemplateRequest(ref=ref, insecure=insecure, registry_auth=registry_auth)
        resp = await self._c._send("POST", "/v1/templates/" + _seg(name) + "/push", body=req,
                                   headers={"Accept": "application/x-ndjson"}, stream=True, long=True)
        def each(d: dict) -> Optional[m.PushResult]:
            ev = m.PushEvent.from_dict(d)
            if ev.result is None and ev.progress is not None and on_progress:
                on_progress(ev.progress)
            return ev.result

        return await self._c._result_stream(resp, "the push stream ended without a result", each)


class AsyncVolumes:
    """client.volumes: named volumes."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def create(self, name: str, size_bytes: Optional[int] = None, inodes: Optional[int] = None, *, idempotency_key: Optional[str] = None) -> m.Volume:
        """Creates a named volume (retried safely with one Idempotency-Key)."""
        req = m.CreateVolumeRequest(name=name, size_bytes=size_bytes, inodes=inodes)
        return m.Volume.from_dict(await self._c._json("POST", "/v1/volumes", body=req, idempotency_key=idempotency_key or new_idempotency_key()))

    async def list(self, all: bool = False) -> List[m.Volume]:
        """Every volume (every page); ``all`` includes the tombstones of deleted ones."""
        return [m.Volume.from_dict(v) for v in await self._c._all("/v1/volumes", {"all": _bool(all)})]

    async def list_page(self, limit: Optional[int] = None, cursor: Optional[str] = None, all: bool = False) -> Page:
        """One page of volumes and the next cursor."""
        items, nxt = await self._c._page("/v1/volumes", {"all": _bool(all)}, limit, cursor)
        return Page(items=[m.Volume.from_dict(v) for v in items], next_cursor=nxt)

    async def get(self, name: str) -> m.Volume:
        """One volume by name, with its use."""
        return m.Volume.from_dict(await self._c._json("GET", "/v1/volumes/" + _seg(name)))

    async def delete(self, name: str) -> None:
        """Deletes a volume (refused while a sandbox mounts it)."""
        await self._c._send("DELETE", "/v1/volumes/" + _seg(name))


class AsyncSecrets:
    """client.secrets: values sandboxes see only as placeholders."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def set(self, name: str, value: str) -> m.Secret:
        """Stores a secret (its value is never returned; sandboxes see a placeholder)."""
        return m.Secret.from_dict(await self._c._json("PUT", "/v1/secrets/" + _seg(name), body=m.PutSecretRequest(value=value)))

    async def list(self) -> List[m.Secret]:
        """The secrets' names and metadata (never their values)."""
        return [m.Secret.from_dict(s) for s in await self._c._all("/v1/secrets")]

    async def delete(self, name: str) -> None:
        """Deletes a secret."""
        await self._c._send("DELETE", "/v1/secrets/" + _seg(name))

    async def rotate_key(self, key: str) -> m.RotateSecretsKeyResponse:
        """Re-wraps every stored secret under the new master key ``key``
        (the host's administrator only)."""
        return m.RotateSecretsKeyResponse.from_dict(await self._c._json("POST", "/v1/secrets/rotate-key", body=m.RotateSecretsKeyRequest(key=key)))


class AsyncEvents:
    """client.events: the recorded events, as pages or as a live stream."""

    def __init__(self, client: AsyncClient):
        self._c = client

    @staticmethod
    def _query(sandbox: Union[None, str, Sequence[str]], types: Optional[Sequence[str]], after: int) -> Tuple[str, Dict[str, Any]]:
        sbs = [sandbox] if isinstance(sandbox, str) else list(sandbox or [])
        q: Dict[str, Any] = {"type": list(types) if types else None, "after": after or None}
        if len(sbs) == 1:
            return "/v1/sandboxes/" + _seg(sbs[0]) + "/events", q
        q["sandbox"] = sbs or None
        return "/v1/events", q

    async def list(self, sandbox: Union[None, str, Sequence[str]] = None, types: Optional[Sequence[str]] = None, after: int = 0) -> List[m.Event]:
        """Every recorded event (every page) after id ``after``, of one or more sandboxes and types."""
        path, q = self._query(sandbox, types, after)
        return [m.Event.from_dict(e) for e in await self._c._all(path, q)]

    async def list_page(self, sandbox: Union[None, str, Sequence[str]] = None, types: Optional[Sequence[str]] = None,
                        after: int = 0, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """One page of events and the next cursor."""
        path, q = self._query(sandbox, types, after)
        items, nxt = await self._c._page(path, q, limit, cursor)
        return Page(items=[m.Event.from_dict(e) for e in items], next_cursor=nxt)

    async def stream(
        self,
        sandbox: Union[None, str, Sequence[str]] = None,
        types: Optional[Sequence[str]] = None,
        after: int = 0,
        reconnect_for: float = 60.0,
    ) -> AsyncIterator[m.Event]:
        """Follows the event stream (Server-Sent Events) from id ``after``:
        yields every event once, in order. A stream that breaks is reopened
        with Last-Event-ID set to the last event yielded, so none is lost or
        repeated; it gives up when no stream could be opened for
        ``reconnect_for`` seconds, or on a 4xx answer (other than 429)."""
        path, q = self._query(sandbox, types, after)
        q.pop("after", None)
        last = after
        retry = 2.0
        down = 0.0  # seconds spent without a stream
        while True:
            h = {"Accept": "text/event-stream"}
            if last > 0:
                h["Last-Event-ID"] = str(last)
            try:
                resp = await self._c._send("GET", path, params=q, headers=h, stream=True, long=True)
            except APIError as e:
                if e.status < 500 and e.status != 429:
                    raise
                resp = None
            except (ConnectError, TransportError):
                resp = None
            if resp is None:
                if down >= reconnect_for:
                    raise StreamError("event stream: no stream could be opened for %gs" % down)
                await _sleep(retry)
                down += retry
                continue
            down = 0.0
            try:
                ct = resp.headers.get("content-type", "")
                if not ct.startswith("text/event-stream"):
                    raise StreamError("GET %s answered %r, not an event stream" % (path, ct))
                parser = SSEParser()
                async for line in resp.aiter_lines():
                    for _, _, data, retry_ms in parser.feed(line):
                        if retry_ms:
                            retry = min(retry_ms / 1000.0, 30.0)
                        if not data:
                            continue
                        ev = m.Event.from_dict(json.loads(data))
                        if ev.id <= last:
                            continue  # never handed out twice, whatever the server sends
                        last = ev.id
                        yield ev
            except (httpx.TransportError,):
                pass  # cut: reconnect below
            finally:
                await resp.aclose()
            await _sleep(retry)


class AsyncAudit:
    """client.audit: the tamper-evident audit log."""

    def __init__(self, client: AsyncClient):
        self._c = client

    @staticmethod
    def _query(since, until, actor, action, target) -> Dict[str, Any]:
        from ._wire import format_time

        def t(v):
            return format_time(v) if hasattr(v, "isoformat") else v

        return {"since": t(since), "until": t(until), "actor": actor, "action": action, "target": target}

    async def list(self, *, since=None, until=None, actor: Optional[str] = None, action: Optional[str] = None, target: Optional[str] = None) -> List[m.AuditEntry]:
        """Every entry matching the filters (every page)."""
        return [m.AuditEntry.from_dict(e) for e in await self._c._all("/v1/audit", self._query(since, until, actor, action, target))]

    async def list_page(self, *, since=None, until=None, actor: Optional[str] = None, action: Optional[str] = None, target: Optional[str] = None,
                        limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """One page of audit entries and the next cursor."""
        items, nxt = await self._c._page("/v1/audit", self._query(since, until, actor, action, target), limit, cursor)
        return Page(items=[m.AuditEntry.from_dict(e) for e in items], next_cursor=nxt)

    async def export(self) -> bytes:
        """The whole log as NDJSON, for verification elsewhere."""
        return (await self._c._send("GET", "/v1/audit/export")).content

    async def verify(self, anchor: Optional[Dict[str, Any]] = None) -> m.AuditVerify:
        """Checks the audit chains (with ``anchor``: also against a signed anchor, which detects truncation)."""
        body = m.AuditVerifyRequest(anchor=anchor) if anchor is not None else None
        return m.AuditVerify.from_dict(await self._c._json("POST", "/v1/audit/verify", body=body))


class AsyncKeys:
    """client.keys: API keys (admin)."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def create(self, role: str, *, tenant: Optional[str] = None, name: Optional[str] = None,
                     scopes: Optional[Sequence[str]] = None, expires_in_seconds: Optional[int] = None) -> m.CreatedAPIKey:
        """Makes a key; its secret (``key``) is in this answer only."""
        req = m.CreateAPIKeyRequest(role=role, tenant=tenant, name=name, scopes=list(scopes) if scopes else None,
                                    expires_in_seconds=expires_in_seconds)
        return m.CreatedAPIKey.from_dict(await self._c._json("POST", "/v1/keys", body=req))

    async def list(self) -> List[m.APIKey]:
        """The API keys the caller may see (never their secrets)."""
        return [m.APIKey.from_dict(k) for k in await self._c._all("/v1/keys")]

    async def revoke(self, id_or_prefix: str) -> m.APIKey:
        """Revokes a key by id or prefix: it stops working at once, its streams closed."""
        return m.APIKey.from_dict(await self._c._json("DELETE", "/v1/keys/" + _seg(id_or_prefix)))


class AsyncTenants:
    """client.tenants (admin)."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def create(self, name: str) -> m.Tenant:
        """Creates a tenant (host admin)."""
        return m.Tenant.from_dict(await self._c._json("POST", "/v1/tenants", body=m.CreateTenantRequest(name=name)))

    async def list(self) -> List[m.Tenant]:
        """Every tenant (host admin)."""
        return [m.Tenant.from_dict(t) for t in await self._c._json("GET", "/v1/tenants") or []]

    async def delete(self, name: str) -> None:
        """Deletes an empty tenant (host admin)."""
        await self._c._send("DELETE", "/v1/tenants/" + _seg(name))


class AsyncQuotas:
    """client.quotas: a tenant's limits (admin) and the caller's own."""

    def __init__(self, client: AsyncClient):
        self._c = client

    async def get(self, tenant: str) -> m.Quota:
        """A tenant's quota and use."""
        return m.Quota.from_dict(await self._c._json("GET", "/v1/tenants/" + _seg(tenant) + "/quota"))

    async def set(self, tenant: str, quota: m.QuotaRequest) -> m.Quota:
        """Sets a tenant's quota (host admin)."""
        return m.Quota.from_dict(await self._c._json("PUT", "/v1/tenants/" + _seg(tenant) + "/quota", body=quota))

    async def own(self) -> m.Quota:
        """The calling key's tenant's quota and usage."""
        return m.Quota.from_dict(await self._c._json("GET", "/v1/quota"))
