"""The asyncio client: the same calls with await, async with, async for,
and terminals over the exec WebSocket."""
from __future__ import annotations

import asyncio
import os

import pytest

import berth


async def test_async_sandbox_exec_files_and_cleanup(aclient):
    async with await aclient.sandboxes.create(labels={"client": "async"}) as sb:
        assert isinstance(sb, berth.AsyncSandbox) and sb.state == "running"
        sid = sb.id
        r = await sb.exec(["sh", "-c", "echo hi; echo oops >&2; exit 2"])
        assert (r.exit_code, r.stdout, r.stderr) == (2, b"hi\n", b"oops\n")
        await sb.files.write("/tmp/a", b"async")
        assert await sb.files.read("/tmp/a") == b"async"
        assert [f.name for f in await sb.files.list("/tmp") if f.name == "a"] == ["a"]
        events = [ev async for ev in sb.exec_stream("printf x; printf y")]
        assert b"".join(e.data or b"" for e in events) == b"xy" and events[-1].exit.code == 0
        assert sid in [s.id for s in await aclient.sandboxes.list()]
        p = await sb.processes.start("echo bg")
        assert (await sb.processes.wait(p.id)).code == 0
        assert (await sb.processes.logs(p.id)).stdout == b"bg\n"
    assert sid not in [s.id for s in await aclient.sandboxes.list()]


async def test_async_context_manager_deletes_on_exception(aclient):
    with pytest.raises(ValueError):
        async with await aclient.sandboxes.create() as sb:
            sid = sb.id
            raise ValueError("inside")
    assert (await aclient.sandboxes.get(sid)).state == "deleted"


async def test_async_errors_and_events(aclient):
    with pytest.raises(berth.NotFoundError) as ei:
        await aclient.sandboxes.get("nope-nope")
    assert ei.value.code == "not_found" and ei.value.request_id
    async with await aclient.sandboxes.create() as sb:
        await sb.stop()
        await sb.start()
        want = [e.id for e in await aclient.events.list(sandbox=sb.id)]
        got = []
        async for ev in aclient.events.stream(sandbox=sb.id):
            got.append(ev.id)
            if len(got) == len(want):
                break
        assert got == want


async def test_async_tls_pin(client, unique):
    tenant = unique("tp")
    client.tenants.create(tenant)
    k = client.keys.create("member", tenant=tenant)
    try:
        https, fp = os.environ["BERTH_TEST_HTTPS"], os.environ["BERTH_TEST_TLS_FINGERPRINT"]
        async with berth.AsyncClient(https, api_key=k.key, tls_fingerprint=fp) as c:
            assert (await c.quotas.own()).tenant == tenant
        async with berth.AsyncClient(https, api_key=k.key, tls_fingerprint="sha256:" + "ab" * 32) as c:
            with pytest.raises(berth.FingerprintError):
                await c.quotas.own()
    finally:
        client.keys.revoke(k.id)
        client.tenants.delete(tenant)


async def test_pty_with_resize(aclient):
    async with await aclient.sandboxes.create() as sb:
        async with sb.pty(["sh"], rows=24, cols=80) as t:
            await t.send("stty size; echo mark-$((6*7))\n")
            out = await t.read_until(b"mark-42")
            assert b"24 80" in out
            # A resize reaches the shell before the line typed after it:
            # the daemon carries both in one ordered stream to the agent.
            await t.resize(40, 132)
            await t.send("stty size; echo done-$((1000+1))\n")
            out = await t.read_until(b"done-1001\r\n")
            assert b"40 132" in out
            await t.send("exit 5\n")
            ex = await asyncio.wait_for(t.wait(), 60)
            assert ex.code == 5


async def test_async_retry_after(client, unique, monkeypatch):
    from berth import _async_client
    from proxy import Proxy

    waits = []

    async def rec(d):
        waits.append(d)

    monkeypatch.setattr(_async_client, "_sleep", rec)
    tenant = unique("tr")
    client.tenants.create(tenant)
    k = client.keys.create("member", tenant=tenant)
    try:
        with Proxy.to(os.environ["BERTH_TEST_HTTP"], ["429:2", "pass"]) as px:
            async with berth.AsyncClient(px.url, api_key=k.key) as c:
                assert (await c.quotas.own()).tenant == tenant
        assert waits == [2.0] and len(px.seen) == 2
    finally:
        client.keys.revoke(k.id)
        client.tenants.delete(tenant)
