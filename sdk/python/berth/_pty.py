"""Interactive terminals over the exec WebSocket (GET /v1/sandboxes/{id}/exec/ws).

The wire, as client/interactive.go speaks it: the first message is the
ExecRequest as JSON text; then binary messages whose first byte says what
they carry: 0 stdin, 3 resize (JSON {"rows","cols"}), 5 stdin closed from
the client; 1 stdout, 2 stderr, 4 the exit (JSON ExecExit, then close),
6 an error (JSON Error, then close) from the daemon.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
import ssl
import threading
import time
from typing import Any, Dict, Optional, Set

import websockets.client
import websockets.exceptions

from . import _models as m
from ._conn import Conn
from .errors import ConnectError, FingerprintError, RequestTimeout, StreamError, TransportError, from_response, from_stream

WS_STDIN, WS_STDOUT, WS_STDERR, WS_RESIZE, WS_EXIT, WS_STDIN_EOF, WS_ERROR = 0, 1, 2, 3, 4, 5, 6
_READ_LIMIT = 4 << 20


class AsyncPty:
    """One terminal session of the asyncio client: ``async with
    sandbox.pty(["sh"]) as t``, or an attach to a background process
    (``sandbox.processes.attach(pid)``: the same wire without the opening
    request)."""

    def __init__(self, client: Any, path: str, req: Optional[m.ExecRequest]):
        self._conn: Conn = client._conn
        self._ua: str = client._user_agent
        self._host: str = client.host
        self._connect_timeout: Optional[float] = client.connect_timeout
        self._path, self._req = path, req
        self._ws = None
        self._out: "asyncio.Queue[Optional[bytes]]" = asyncio.Queue()
        self._reader: Optional[asyncio.Task] = None
        self.exit: Optional[m.ExecExit] = None
        self._error: Optional[BaseException] = None

    async def __aenter__(self) -> "AsyncPty":
        self._ws = await self._connect()
        if self._req is not None:  # an exec's session; an attach to a process sends none
            try:
                await self._ws.send(json.dumps(self._req.to_dict()))
            except websockets.exceptions.ConnectionClosed as e:
                await self._ws.close()
                raise StreamError("the terminal session ended as it opened: %s" % e) from e
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _connect(self):
        """Opens the WebSocket; its failures as the SDK's typed errors."""
        headers = self._conn.headers(self._ua)
        kw: Dict[str, Any] = {"extra_headers": headers, "max_size": _READ_LIMIT, "open_timeout": self._connect_timeout}
        try:
            if self._conn.uds:
                return await websockets.client.unix_connect(self._conn.uds, "ws://berth" + self._path, **kw)
            base = self._conn.base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
            if base.startswith("wss://") and self._conn.ssl_context:
                kw["ssl"] = self._conn.ssl_context
            return await websockets.client.connect(base + self._path, **kw)
        except FingerprintError:
            raise
        except websockets.exceptions.InvalidStatusCode as e:
            # The daemon refused the upgrade (no such sandbox or process, no
            # right, ...): websockets keeps its status and headers, not its
            # body, so the code comes from the status as the Go client maps it.
            raise from_response(e.status_code, "", e.headers, b"") from None
        except asyncio.TimeoutError as e:
            raise ConnectError(self._host, e) from e
        except ssl.SSLError as e:
            if isinstance(e.__context__, FingerprintError):
                raise e.__context__ from None
            raise ConnectError(self._host, e) from e
        except OSError as e:
            if isinstance(e.__context__, FingerprintError):
                raise e.__context__ from None
            raise ConnectError(self._host, e) from e
        except websockets.exceptions.WebSocketException as e:
            raise TransportError("GET %s: %s" % (self._path, e)) from e

    async def __aexit__(self, *exc) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except BaseException:
                pass
        if self._ws is not None:
            await self._ws.close()

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if not isinstance(msg, bytes) or not msg:
                    continue
                kind, payload = msg[0], msg[1:]
                if kind in (WS_STDOUT, WS_STDERR):
                    await self._out.put(payload)
                elif kind == WS_EXIT:
                    self.exit = m.ExecExit.from_dict(json.loads(payload))
                    break
                elif kind == WS_ERROR:
                    self._error = from_stream(json.loads(payload))
                    break
        except websockets.exceptions.ConnectionClosed:
            pass
        finally:
            await self._out.put(None)

    async def _send(self, msg: bytes) -> None:
        if self.exit is not None or self._error is not None:
            raise StreamError("the terminal session is over")
        try:
            await self._ws.send(msg)
        except websockets.exceptions.ConnectionClosed as e:
            raise StreamError("the terminal session is over") from e

    async def send(self, data) -> None:
        """Types ``data`` (bytes or str) into the terminal."""
        if isinstance(data, str):
            data = data.encode()
        await self._send(bytes([WS_STDIN]) + data)

    async def close_stdin(self) -> None:
        """Ends the command's input."""
        await self._send(bytes([WS_STDIN_EOF]))

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal (the command sees SIGWINCH)."""
        await self._send(bytes([WS_RESIZE]) + json.dumps({"rows": rows, "cols": cols}).encode())

    async def recv(self) -> bytes:
        """The next output chunk; b"" once the session ended."""
        chunk = await self._out.get()
        if chunk is None:
            await self._out.put(None)  # every later recv sees the end too
            return b""
        return chunk

    async def read_until(self, needle: bytes, limit: int = 1 << 20) -> bytes:
        """Output up to and including ``needle``; StreamError if the session ends first."""
        buf = b""
        while needle not in buf:
            chunk = await self.recv()
            if not chunk:
                if self._error is not None:
                    raise self._error
                raise StreamError("the terminal ended before %r appeared; got %r" % (needle, buf[-200:]))
            buf += chunk
            if len(buf) > limit:
                raise StreamError("no %r in the first %d bytes" % (needle, limit))
        return buf

    async def wait(self) -> m.ExecExit:
        """Waits for the command's exit status."""
        if self._reader is not None:
            await asyncio.shield(self._reader)
        if self._error is not None:
            raise self._error
        if self.exit is None:
            raise StreamError("the terminal closed without an exit status")
        return self.exit


class AsyncTerminals:
    """The asyncio client's side of the terminal runner: its sessions run
    on the caller's own event loop, so there is nothing to own or stop
    (each session closes when its ``async with`` ends)."""

    async def aclose(self) -> None:
        pass


class Terminals:
    """The sync client's runner of terminal and attach sessions.

    websockets 10 (Debian 12's) has only an asyncio client, so a sync
    session is the asyncio one (AsyncPty) run on a private event loop in a
    background thread this runner owns: one loop and one thread per client,
    started at the first session, stopped by ``Client.close()`` (or the end
    of its ``with``), which first closes the sessions still open. Each
    blocking call hands a coroutine to that loop
    (``asyncio.run_coroutine_threadsafe``) and waits for its result, so a
    session may be used from any thread, and what the coroutine raises (the
    SDK's typed errors) is raised in the caller's thread. Output is moved
    by a task on the loop into a thread-safe queue, which a sync read waits
    on with its timeout: a read that times out loses nothing. (The other
    designs: a second, blocking WebSocket implementation would duplicate
    the wire and its errors; a loop per call cannot keep a session open
    between calls.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._open: Set["Pty"] = set()
        self._closed = False

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise StreamError("the client is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                t = threading.Thread(target=self._main, args=(loop, ready), name="berth-terminals", daemon=True)
                t.start()
                ready.wait()
                self._loop, self._thread = loop, t
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def run(self, fn: Any, *args: Any, timeout: Optional[float] = None) -> Any:
        """Runs ``fn(*args)`` (a coroutine function) on the loop and waits
        for its result, at most ``timeout`` seconds (then the coroutine is
        cancelled and concurrent.futures.TimeoutError raised)."""
        loop = self._start()
        if threading.current_thread() is self._thread:
            raise RuntimeError("a berth sync terminal call from the SDK's own loop thread")
        fut = asyncio.run_coroutine_threadsafe(fn(*args), loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.CancelledError:
            # The client closed (from another thread) while this call waited.
            raise StreamError("the client was closed during the call") from None
        except BaseException:
            fut.cancel()  # a timeout, or the caller interrupted (KeyboardInterrupt)
            raise

    def _add(self, p: "Pty") -> None:
        with self._lock:
            if self._closed:
                raise StreamError("the client is closed")
            self._open.add(p)

    def _forget(self, p: "Pty") -> None:
        with self._lock:
            self._open.discard(p)

    def close(self) -> None:
        """Closes the sessions still open, then stops the loop and its thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._open)
        for p in sessions:
            try:
                p._close_on_loop()
            except Exception:  # a session already broken: its socket is closed below
                pass
        with self._lock:
            loop, t = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and t is not None:
            loop.call_soon_threadsafe(loop.stop)
            t.join()


class Pty:
    """One terminal session of the sync client: ``with sandbox.pty(["sh"])
    as t``, or an attach to a background process
    (``sandbox.processes.attach(pid)``: the same wire without the opening
    request). The calls block; ``recv``, ``read_until`` and ``wait`` take a
    ``timeout`` in seconds (default None: no bound) and raise RequestTimeout
    past it, the session still usable. The session runs on an event loop in
    a thread of the client's (websockets 10, Debian 12's, has only an
    asyncio client), so it may be used from any thread, one reader at a
    time. Leaving the ``with`` (or ``close()``) closes it; so does closing
    the client, which ends that thread."""

    def __init__(self, client: Any, path: str, req: Optional[m.ExecRequest]):
        self._client, self._rt = client, client._terminals
        self._path, self._req = path, req
        self._apty: Optional[AsyncPty] = None
        self._pump: Optional["asyncio.Task"] = None
        self._q: "queue.Queue[bytes]" = queue.Queue()
        self._pending = b""
        self._rlock = threading.RLock()
        self._closed = False

    @property
    def exit(self) -> Optional[m.ExecExit]:
        """The command's exit status once it came, else None."""
        return self._apty.exit if self._apty is not None else None

    def __enter__(self) -> "Pty":
        self._rt._add(self)
        try:
            self._apty = self._rt.run(self._open)
        except BaseException:
            self._rt._forget(self)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def _open(self) -> AsyncPty:
        p = AsyncPty(self._client, self._path, self._req)
        await p.__aenter__()
        self._pump = asyncio.ensure_future(self._pump_output(p))
        return p

    async def _pump_output(self, p: AsyncPty) -> None:
        while True:
            chunk = await p.recv()
            self._q.put(chunk)
            if not chunk:
                return

    async def _aclose(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            try:
                await self._pump
            except BaseException:
                pass
        if self._apty is not None:
            await self._apty.__aexit__(None, None, None)

    def _close_on_loop(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._q.put(b"")  # a reader still waiting sees the end
        loop = self._rt._loop
        if loop is not None and self._apty is not None:
            asyncio.run_coroutine_threadsafe(self._aclose(), loop).result()

    def close(self) -> None:
        """Closes the session (a background process attached to goes on)."""
        try:
            self._close_on_loop()
        finally:
            self._rt._forget(self)

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._closed or self._apty is None:
            raise StreamError("the terminal session is closed")
        return self._rt.run(fn, *args)

    def send(self, data: Any) -> None:
        """Types ``data`` (bytes or str) into the terminal."""
        self._call(self._apty.send, data)

    def close_stdin(self) -> None:
        """Ends the command's input."""
        self._call(self._apty.close_stdin)

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal (the command sees SIGWINCH)."""
        self._call(self._apty.resize, rows, cols)

    def recv(self, timeout: Optional[float] = None) -> bytes:
        """The next output chunk; b"" once the session ended."""
        with self._rlock:
            if self._pending:
                chunk, self._pending = self._pending, b""
                return chunk
            try:
                chunk = self._q.get(timeout=timeout)
            except queue.Empty:
                raise RequestTimeout("no output from the terminal within %s s" % timeout) from None
            if not chunk:
                self._q.put(b"")  # every later recv sees the end too
            return chunk

    def read_until(self, needle: bytes, limit: int = 1 << 20, timeout: Optional[float] = None) -> bytes:
        """Output up to and including ``needle``; StreamError if the session
        ends first. After a RequestTimeout the output read so far comes
        first to the next read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._rlock:
            buf = b""
            while needle not in buf:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    chunk = self.recv(left)
                except RequestTimeout:
                    self._pending = buf
                    raise RequestTimeout("no %r from the terminal within %s s" % (needle, timeout)) from None
                if not chunk:
                    if self._apty is not None and self._apty._error is not None:
                        raise self._apty._error
                    raise StreamError("the terminal ended before %r appeared; got %r" % (needle, buf[-200:]))
                buf += chunk
                if len(buf) > limit:
                    raise StreamError("no %r in the first %d bytes" % (needle, limit))
            return buf

    def wait(self, timeout: Optional[float] = None) -> m.ExecExit:
        """Waits for the command's exit status."""
        try:
            return self._call(self._wait, timeout)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError):
            raise RequestTimeout("the terminal's command did not end within %s s" % timeout) from None

    async def _wait(self, timeout: Optional[float]) -> m.ExecExit:
        return await asyncio.wait_for(self._apty.wait(), timeout)
