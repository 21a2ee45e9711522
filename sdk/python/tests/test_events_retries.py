"""Events (pages and the SSE stream with resumption), retries through a
fault proxy, and TLS pinning."""
from __future__ import annotations

import os

import pytest

import berth
from berth import _async_client, _sync_client

from proxy import Proxy


@pytest.fixture
def admin_key(client, unique):
    """An admin key of a fresh tenant (TCP callers are always some tenant's)."""
    tenant = unique("ta")
    client.tenants.create(tenant)
    k = client.keys.create("admin", tenant=tenant, name="pytest-admin")
    yield k.key
    client.keys.revoke(k.id)
    client.tenants.delete(tenant)


@pytest.fixture
def sleeps(monkeypatch):
    """Records the retry loops' waits instead of sleeping them."""
    got = []
    monkeypatch.setattr(_sync_client, "_sleep", got.append)

    async def asleep(d):
        got.append(d)

    monkeypatch.setattr(_async_client, "_sleep", asleep)
    return got


def test_events_pages_and_filters(client, sandbox):
    sandbox.stop()
    sandbox.start()
    evs = client.events.list(sandbox=sandbox.id)
    assert evs and all(e.sandbox_id == sandbox.id for e in evs)
    ids = [e.id for e in evs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert sandbox.events() == evs
    later = client.events.list(sandbox=sandbox.id, after=ids[0])
    assert [e.id for e in later] == ids[1:]
    some_type = evs[-1].type
    typed = client.events.list(sandbox=[sandbox.id], types=[some_type])
    assert typed and all(e.type == some_type for e in typed)
    p = client.events.list_page(sandbox=sandbox.id, limit=1)
    assert len(p.items) == 1 and p.next_cursor


def test_event_stream_resumes_with_last_event_id(client, admin_key):
    """The proxy cuts the first stream right after its first event; the
    client reopens it with Last-Event-ID and every event arrives once."""
    http = os.environ["BERTH_TEST_HTTP"]
    with berth.Client(http, api_key=admin_key) as direct:
        with direct.sandboxes.create() as sb:
            sb.stop()
            sb.start()
            want = [e.id for e in direct.events.list(sandbox=sb.id)]
            assert len(want) >= 3
            with Proxy.to(http, ["cut-after-event"]) as px:
                with berth.Client(px.url, api_key=admin_key) as c:
                    got = []
                    for ev in c.events.stream(sandbox=sb.id):
                        got.append(ev.id)
                        if len(got) == len(want):
                            break
            assert got == want
            streams = [s for s in px.seen if s.path.startswith("/v1/sandboxes/%s/events" % sb.id)]
            assert len(streams) >= 2, px.seen
            assert "last-event-id" not in streams[0].headers
            assert streams[1].headers["last-event-id"] == str(want[0])
            assert streams[1].headers["accept"] == "text/event-stream"


def test_event_stream_never_repeats_an_event(client, admin_key):
    """A server that starts the reopened stream over (here: the proxy
    strips Last-Event-ID) resends the first event; the client drops it."""
    http = os.environ["BERTH_TEST_HTTP"]
    with berth.Client(http, api_key=admin_key) as direct:
        with direct.sandboxes.create() as sb:
            sb.stop()
            want = [e.id for e in direct.events.list(sandbox=sb.id)]
            with Proxy.to(http, ["cut-after-event", "replay"]) as px:
                with berth.Client(px.url, api_key=admin_key) as c:
                    got = []
                    for ev in c.events.stream(sandbox=sb.id):
                        got.append(ev.id)
                        if len(got) == len(want):
                            break
            assert got == want
            assert px.seen[1].headers["last-event-id"] == str(want[0])


def test_event_stream_from_an_id(client, sandbox):
    sandbox.touch()
    sandbox.stop()
    evs = client.events.list(sandbox=sandbox.id)
    first = evs[0].id
    got = []
    for ev in client.events.stream(sandbox=sandbox.id, after=first):
        got.append(ev.id)
        if len(got) == len(evs) - 1:
            break
    assert got == [e.id for e in evs[1:]]


def test_retry_after_is_honoured(admin_key, sleeps):
    http = os.environ["BERTH_TEST_HTTP"]
    with Proxy.to(http, ["429:1", "503", "pass"]) as px:
        with berth.Client(px.url, api_key=admin_key) as c:
            assert isinstance(c.sandboxes.list(), list)
    assert len(px.seen) == 3
    assert sleeps == [1.0, 0.5]  # Retry-After, then the backoff of a 503 without one


def test_retry_after_past_the_limit_is_an_error(admin_key, sleeps):
    with Proxy.to(os.environ["BERTH_TEST_HTTP"], ["429:120"]) as px:
        with berth.Client(px.url, api_key=admin_key, max_retry_wait=30) as c:
            with pytest.raises(berth.RateLimitedError) as ei:
                c.sandboxes.list()
    e = ei.value
    assert e.status == 429 and e.code == "rate_limited" and e.retry_after == 120 and e.request_id == "proxy-1"
    assert len(px.seen) == 1 and sleeps == []


def test_retries_give_up(admin_key, sleeps):
    with Proxy.to(os.environ["BERTH_TEST_HTTP"], ["503"] * 10) as px:
        with berth.Client(px.url, api_key=admin_key, max_retries=2) as c:
            with pytest.raises(berth.UnavailableError):
                c.version()
    assert len(px.seen) == 3 and len(sleeps) == 2


def test_dropped_create_is_retried_with_the_same_idempotency_key(client, admin_key, sleeps, unique):
    label = unique("idem")
    http = os.environ["BERTH_TEST_HTTP"]
    with Proxy.to(http, ["drop", "pass"]) as px:
        with berth.Client(px.url, api_key=admin_key) as c:
            sb = c.sandboxes.create(labels={"run": label})
    try:
        posts = [s for s in px.seen if s.method == "POST"]
        assert len(posts) == 2
        keys = {s.headers.get("idempotency-key") for s in posts}
        assert len(keys) == 1 and None not in keys
        with berth.Client(http, api_key=admin_key) as direct:
            mine = [s for s in direct.sandboxes.list() if (s.info.labels or {}).get("run") == label]
            assert [s.id for s in mine] == [sb.id]
    finally:
        client.sandboxes.delete(sb.id, force=True)


def test_dropped_connection_retries_only_what_is_safe_to_repeat(admin_key, sleeps):
    """A GET cut before its answer is sent again; an exec (a POST without
    an Idempotency-Key) is not: it may have run."""
    http = os.environ["BERTH_TEST_HTTP"]
    with berth.Client(http, api_key=admin_key) as direct:
        with direct.sandboxes.create() as sb:
            with Proxy.to(http, ["drop", "pass"]) as px:
                with berth.Client(px.url, api_key=admin_key) as c:
                    assert c.sandboxes.get(sb.id).id == sb.id
            assert [s.method for s in px.seen] == ["GET", "GET"]
            with Proxy.to(http, ["drop", "pass"]) as px:
                with berth.Client(px.url, api_key=admin_key) as c:
                    with pytest.raises(berth.TransportError):
                        berth.Sandbox(c, sb.info).exec("true")
            assert [s.method for s in px.seen] == ["POST"]


def test_tls_pinning_and_ca(admin_key, monkeypatch):
    https = os.environ["BERTH_TEST_HTTPS"]
    fp = os.environ["BERTH_TEST_TLS_FINGERPRINT"]
    with berth.Client(https, api_key=admin_key, tls_fingerprint=fp) as c:
        assert c.version().tls_fingerprint == fp
    with berth.Client(https, api_key=admin_key, tls_ca=os.environ["BERTH_TEST_TLS_CA"]) as c:
        assert c.version().tls_fingerprint == fp
    wrong = "sha256:" + "00" * 32
    with berth.Client(https, api_key=admin_key, tls_fingerprint=wrong) as c:
        with pytest.raises(berth.FingerprintError) as ei:
            c.version()
    assert ei.value.got == fp
    monkeypatch.setenv("BERTH_TLS_FINGERPRINT", wrong)
    with berth.Client(https, api_key=admin_key) as c:
        with pytest.raises(berth.FingerprintError):
            c.version()
    monkeypatch.delenv("BERTH_TLS_FINGERPRINT")
    with berth.Client(https, api_key=admin_key) as c:  # self-signed: the system's CAs refuse it
        with pytest.raises(berth.BerthError):
            c.version()
    with pytest.raises(ValueError):
        berth.Client(os.environ["BERTH_HOST"], tls_fingerprint=fp)
    with pytest.raises(ValueError):
        berth.Client(https, tls_fingerprint="sha256:xyz")
