"""Fixtures of the SDK suite. test/sdk/python_test.go starts the daemon and
says where it is: BERTH_HOST (its unix socket: the host's admin), and
BERTH_TEST_HTTP / BERTH_TEST_HTTPS (+ BERTH_TEST_TLS_FINGERPRINT,
BERTH_TEST_TLS_CA) for its loopback TCP listeners. Every test deletes what
it creates; the harness fails the run for any sandbox left."""
from __future__ import annotations

import faulthandler
import os
import uuid

import pytest

import berth
from berth import _wire

# Every answer the suite decodes must be what api/openapi.json describes.
_wire.STRICT = True


def _record_requests(log: str) -> None:
    """Appends "METHOD /path" of every request the SDK sends (HTTP through
    httpx, WebSockets through websockets) to ``log``: test/sdk checks that
    the suite called every operation of api/openapi.json (coverage_test.go)."""
    import threading
    from urllib.parse import urlsplit

    import httpx
    import websockets.client

    lock = threading.Lock()

    def record(method: str, url) -> None:
        with lock, open(log, "a") as f:
            f.write("%s %s\n" % (method, urlsplit(str(url)).path))

    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send
    connect, unix_connect = websockets.client.connect, websockets.client.unix_connect

    def send(self, request, **kw):
        record(request.method, request.url)
        return sync_send(self, request, **kw)

    async def asend(self, request, **kw):
        record(request.method, request.url)
        return await async_send(self, request, **kw)

    def ws_connect(uri, *a, **kw):
        record("GET", uri)
        return connect(uri, *a, **kw)

    def ws_unix_connect(path, uri, *a, **kw):
        record("GET", uri)
        return unix_connect(path, uri, *a, **kw)

    httpx.Client.send, httpx.AsyncClient.send = send, asend
    websockets.client.connect, websockets.client.unix_connect = ws_connect, ws_unix_connect


if os.environ.get("BERTH_SDK_REQUEST_LOG"):
    _record_requests(os.environ["BERTH_SDK_REQUEST_LOG"])


def need(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        pytest.fail("%s is not set: run this suite through test/sdk (go test ./test/sdk/)" % name)
    return v


@pytest.fixture(scope="session")
def host() -> str:
    return need("BERTH_HOST")


@pytest.fixture
def client(host):
    with berth.Client() as c:
        yield c


@pytest.fixture
async def aclient(host):
    async with berth.AsyncClient() as c:
        yield c


@pytest.fixture
def sandbox(client):
    with client.sandboxes.create() as sb:
        yield sb


@pytest.fixture
def unique():
    return lambda prefix="py": "%s-%s" % (prefix, uuid.uuid4().hex[:8])


@pytest.fixture
def tenant_key(client, unique):
    """A fresh tenant and a member key of it: (tenant, key secret, http url)."""
    name = unique("t")
    client.tenants.create(name)
    k = client.keys.create("member", tenant=name, name="pytest")
    yield name, k.key, need("BERTH_TEST_HTTP")
    client.keys.revoke(k.id)
    client.tenants.delete(name)


@pytest.fixture(autouse=True)
def _bounded():
    """A test that hangs ends the run with every thread's stack printed
    after four minutes, instead of holding the suite until the harness
    kills it with its cause unsaid."""
    faulthandler.dump_traceback_later(240, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
