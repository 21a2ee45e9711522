"""Interactive terminals over the exec WebSocket (GET /v1/sandboxes/{id}/exec/ws).

The wire, as client/interactive.go speaks it: the first message is the
ExecRequest as JSON text; then binary messages whose first byte says what
they carry: 0 stdin, 3 resize (JSON {"rows","cols"}), 5 stdin closed from
the client; 1 stdout, 2 stderr, 4 the exit (JSON ExecExit, then close),
6 an error (JSON Error, then close) from the daemon.
"""
from __future__ import annotations

import asyncio
import json
from typing import Optional

import websockets.client
import websockets.exceptions

from . import _models as m
from ._conn import Conn
from .errors import StreamError, from_stream

WS_STDIN, WS_STDOUT, WS_STDERR, WS_RESIZE, WS_EXIT, WS_STDIN_EOF, WS_ERROR = 0, 1, 2, 3, 4, 5, 6
_READ_LIMIT = 4 << 20


class Pty:
    """One terminal session: ``async with sandbox.pty(["sh"]) as t``, or an
    attach to a background process (``sandbox.processes.attach(pid)``: the
    same wire without the opening request)."""

    def __init__(self, conn: Conn, user_agent: str, path: str, req: Optional[m.ExecRequest]):
        self._conn, self._ua, self._path, self._req = conn, user_agent, path, req
        self._ws = None
        self._out: "asyncio.Queue[Optional[bytes]]" = asyncio.Queue()
        self._reader: Optional[asyncio.Task] = None
        self.exit: Optional[m.ExecExit] = None
        self._error: Optional[BaseException] = None

    async def __aenter__(self) -> "Pty":
        headers = self._conn.headers(self._ua)
        if self._conn.uds:
            self._ws = await websockets.client.unix_connect(
                self._conn.uds, "ws://berth" + self._path, extra_headers=headers, max_size=_READ_LIMIT)
        else:
            base = self._conn.base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
            kw = {"ssl": self._conn.ssl_context} if base.startswith("wss://") and self._conn.ssl_context else {}
            self._ws = await websockets.client.connect(base + self._path, extra_headers=headers, max_size=_READ_LIMIT, **kw)
        if self._req is not None:  # an exec's session; an attach to a process sends none
            await self._ws.send(json.dumps(self._req.to_dict()))
        self._reader = asyncio.ensure_future(self._read())
        return self

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
