"""The remaining calls: reset, diff, hibernate and wake, leases, snapshot
restore, listing deleted sandboxes, events across sandboxes, exec
timeouts, an unreachable daemon, and a terminal's stdin EOF."""
from __future__ import annotations

import asyncio
import os

import pytest

import berth


def test_reset_and_diff(sandbox):
    sandbox.files.write("/etc/added-by-test", b"x")
    changed = [d.path for d in sandbox.diff()]
    assert "/etc/added-by-test" in changed
    assert sandbox.reset().state == "running"
    assert "/etc/added-by-test" not in [d.path for d in sandbox.diff()]


def test_hibernate_and_wake(client):
    # runc cannot checkpoint processes on this kernel: hibernation is gVisor's.
    with client.sandboxes.create(runtime="runsc") as sb:
        sb.exec("echo across hibernation > /tmp/kept")
        sb.hibernate()
        assert sb.refresh().state != "running"
        assert sb.wake().state == "running"
        assert sb.files.read("/tmp/kept") == b"across hibernation\n"


def test_lease_token_runs_exec_on_its_sandbox_only(client, tenant_key):
    tenant, key, http = tenant_key
    with berth.Client(http, api_key=key) as tc:
        with tc.sandboxes.create() as sb, tc.sandboxes.create() as other:
            lease = sb.lease(["exec"], ttl_seconds=600)
            assert lease.sandbox_id == sb.id and lease.token
            with berth.Client(http, api_key=lease.token) as lc:
                assert berth.Sandbox(lc, sb.info).exec("echo leased").text == "leased\n"
                with pytest.raises(berth.APIError) as ei:
                    berth.Sandbox(lc, other.info).exec("true")
                assert ei.value.status in (403, 404)
                # Revoked by itself, the lease is refused from its next request.
                sb.revoke_lease(lease.id)
                with pytest.raises(berth.UnauthenticatedError):
                    berth.Sandbox(lc, sb.info).exec("true")


def test_snapshot_restore(client, unique):
    with client.sandboxes.create() as sb:
        sb.files.write("/tmp/v", b"1")
        snap = sb.snapshot(unique("r"))
        try:
            sb.files.write("/tmp/v", b"2")
            restored = client.snapshots.restore(snap.id)
            assert restored.id == sb.id
            assert sb.files.read("/tmp/v") == b"1"
        finally:
            client.snapshots.delete(snap.id)


def test_list_all_includes_deleted(client):
    sb = client.sandboxes.create()
    sb.delete(force=True)
    assert sb.id not in [s.id for s in client.sandboxes.list()]
    gone = [s for s in client.sandboxes.list(all=True) if s.id == sb.id]
    assert [s.state for s in gone] == ["deleted"]


def test_events_across_sandboxes(client):
    with client.sandboxes.create() as a, client.sandboxes.create() as b:
        a.touch()
        b.touch()
        both = client.events.list(sandbox=[a.id, b.id])
        assert {e.sandbox_id for e in both} == {a.id, b.id}
        everything = client.events.list(after=min(e.id for e in both) - 1)
        assert {e.id for e in both} <= {e.id for e in everything}
        got = []
        for ev in client.events.stream(sandbox=[a.id, b.id]):
            got.append(ev.id)
            if len(got) == len(both):
                break
        assert got == [e.id for e in both]


def test_exec_timeout(sandbox):
    r = sandbox.exec("sleep 30", timeout=0.5)
    assert r.exit.timed_out is True and r.exit_code != 0


def test_unreachable_daemon(tmp_path):
    with berth.Client("unix://%s/none.sock" % tmp_path) as c:
        with pytest.raises(berth.ConnectError) as ei:
            c.version()
    assert "none.sock" in str(ei.value)
    with pytest.raises(ValueError):
        berth.Client("ftp://x")


async def test_pty_stdin_eof(aclient):
    async with await aclient.sandboxes.create() as sb:
        async with sb.pty(["sh", "-c", "cat > /tmp/typed; echo saved"], rows=10, cols=40) as t:
            await t.send("typed text\n")
            await t.read_until(b"typed text")  # the terminal echoes it
            await t.send(b"\x04")  # ^D: end of input at the terminal
            await t.read_until(b"saved")
            assert (await asyncio.wait_for(t.wait(), 120)).code == 0
        assert (await sb.files.read("/tmp/typed")) == b"typed text\n"


async def test_pty_close_stdin(aclient):
    async with await aclient.sandboxes.create() as sb:
        async with sb.pty(["sh", "-c", "read line; echo got-$line"], rows=10, cols=40) as t:
            await t.send("x\n")
            await t.read_until(b"got-x")
            assert (await asyncio.wait_for(t.wait(), 120)).code == 0
            with pytest.raises(berth.StreamError):
                await t.send("too late\n")  # the session is over
        # Without a terminal (tty=False) the input is a pipe, which the
        # client can close: cat sees the end of its input and exits. (A
        # terminal has no end of input but the ^D of test_pty_stdin_eof.)
        async with sb.pty(["cat"], tty=False) as t:
            await t.send("piped")
            await t.close_stdin()
            assert await t.read_until(b"piped") == b"piped"
            assert (await asyncio.wait_for(t.wait(), 120)).code == 0
