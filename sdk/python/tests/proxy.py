"""A loopback-only fault proxy for the retry and resumption tests: it
reads each connection's first request, records it, and answers it as the
next scripted action says — a canned 429/503 with Retry-After, a dropped
connection (closed with no answer), or a pass-through to the daemon's
plain-HTTP listener, optionally cut right after the first Server-Sent
Event or stripped of its Last-Event-ID. Every later request on a passed-through connection is piped
unseen, so tests script one action per connection."""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import List, Optional, Tuple
from urllib.parse import urlsplit


@dataclass
class Seen:
    method: str
    path: str
    headers: dict


@dataclass
class Proxy:
    upstream: Tuple[str, int]
    # "429[:N]", "503[:N]" (N: Retry-After), "drop", "pass", "cut-after-event",
    # "replay" (pass without the Last-Event-ID header), "stall" (read the
    # request, never answer: the connection is held until close())
    actions: List[str] = field(default_factory=list)
    seen: List[Seen] = field(default_factory=list)
    default: str = "pass"

    def __post_init__(self):
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._held: List[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def to(cls, http_url: str, actions: Optional[List[str]] = None) -> "Proxy":
        u = urlsplit(http_url)
        return cls(upstream=(u.hostname, u.port), actions=list(actions or []))

    def close(self):
        self._stop = True
        self._sock.close()
        with self._lock:
            for c in self._held:
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket):
        try:
            req = _read_request(c)
            if req is None:
                c.close()
                return
            raw, method, path, headers = req
            with self._lock:
                self.seen.append(Seen(method, path, headers))
                action = self.actions.pop(0) if self.actions else self.default
            if action == "drop":
                c.close()
            elif action == "stall":
                with self._lock:
                    self._held.append(c)
            elif action.startswith(("429", "503")):
                code, _, after = action.partition(":")
                reason = "Too Many Requests" if code == "429" else "Service Unavailable"
                body = b'{"error":{"code":"%s","message":"slow down","request_id":"proxy-1"}}' % (
                    b"rate_limited" if code == "429" else b"unavailable")
                hdr = "HTTP/1.1 %s %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n" % (
                    code, reason, len(body))
                if after:
                    hdr += "Retry-After: %s\r\n" % after
                c.sendall(hdr.encode() + b"\r\n" + body)
                c.close()
            else:
                if action == "replay":
                    # As a server that lost its place would: drop
                    # Last-Event-ID, so the stream starts over from the first event.
                    raw = b"\r\n".join(ln for ln in raw.split(b"\r\n") if not ln.lower().startswith(b"last-event-id:"))
                self._pipe(c, raw, cut=(action == "cut-after-event"))
        except OSError:
            c.close()

    def _pipe(self, c: socket.socket, raw: bytes, cut: bool):
        u = socket.create_connection(self.upstream)
        u.sendall(raw)

        def up():
            try:
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    u.sendall(b)
            except OSError:
                pass
            finally:
                try:
                    u.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        threading.Thread(target=up, daemon=True).start()
        seen = b""
        try:
            while True:
                b = u.recv(65536)
                if not b:
                    break
                if not cut:
                    c.sendall(b)
                    continue
                # Forward up to the end of the first event, then cut (in
                # the middle of a chunk of the chunked body, as a network would).
                start = len(seen)
                seen += b
                d = seen.find(b"\ndata:")
                end = seen.find(b"\n\n", d) if d >= 0 else -1
                if end < 0:
                    c.sendall(b)
                    continue
                c.sendall(seen[start:end + 2])
                break
        except OSError:
            pass
        finally:
            # shutdown first: close alone does not end a connection that
            # the other thread is blocked reading.
            for sock in (u, c):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


def _read_request(c: socket.socket):
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = c.recv(65536)
        if not b:
            return None
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0") or 0)
    while len(rest) < n:
        b = c.recv(65536)
        if not b:
            break
        rest += b
    return head + b"\r\n\r\n" + rest, method, path, headers
