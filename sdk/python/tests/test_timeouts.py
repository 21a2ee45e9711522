"""Per-route timeouts: short calls are bounded by the client's ``timeout``
(or ``with_options(timeout=)`` for some calls), long-running ones (exec
streams, process waits, ...) by ``stream_timeout``, unbounded by default.
A bound is time without progress, so these tests use a server that never
answers and commands that stay silent: no test measures a duration."""
from __future__ import annotations

import os

import pytest

import berth
from proxy import Proxy


def test_short_call_bounded_and_not_retried():
    with Proxy.to(os.environ["BERTH_TEST_HTTP"], ["stall", "stall"]) as px:
        with berth.Client(px.url, timeout=0.3) as c:
            with pytest.raises(berth.RequestTimeout):
                c.version()  # a GET: safe to send twice, yet a timeout is not retried
        assert len(px.seen) == 1
        # The default (60 s) overridden for one call.
        with berth.Client(px.url) as c:
            assert c.timeout == 60.0 and c.stream_timeout is None
            with pytest.raises(berth.RequestTimeout):
                c.with_options(timeout=0.3).sandboxes.list()
            assert c.timeout == 60.0  # the client itself is unchanged
        assert [s.path for s in px.seen] == ["/v1/version", "/v1/sandboxes"]


async def test_short_call_bounded_async():
    with Proxy.to(os.environ["BERTH_TEST_HTTP"], ["stall"]) as px:
        async with berth.AsyncClient(px.url) as c:
            with pytest.raises(berth.RequestTimeout):
                await c.with_options(timeout=0.3).health()


def test_long_calls_not_bound_by_the_short_timeout(client, sandbox):
    # Through a client whose short calls may not go 0.3 s without an
    # answer: a command silent for 1.5 s, and a wait for a process that
    # ends after 1.5 s, both complete.
    # (Bound to the sandbox here rather than read again: only the calls
    # under test go through the 0.3 s client.)
    sb = berth.Sandbox(client.with_options(timeout=0.3), sandbox.info)
    r = sb.exec("sleep 1.5; echo done")
    assert r.exit_code == 0 and r.text == "done\n"
    p = sandbox.processes.start("sleep 1.5")
    assert sb.processes.wait(p.id).code == 0


def test_stream_timeout_bounds_long_calls(client, sandbox):
    sb = berth.Sandbox(client.with_options(stream_timeout=0.3), sandbox.info)
    with pytest.raises(berth.RequestTimeout):
        sb.exec("sleep 3; echo late")
    p = sandbox.processes.start("sleep 3")
    with pytest.raises(berth.RequestTimeout):
        sb.processes.wait(p.id)
    sandbox.processes.kill(p.id)


def test_metrics_and_openapi(client):
    assert "berth_http_requests_total" in client.metrics()
    doc = client.openapi()
    assert doc["openapi"].startswith("3.") and "/v1/sandboxes" in doc["paths"]
