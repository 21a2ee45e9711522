"""Sandboxes, lifecycle, fork, snapshots, errors and cleanup against the daemon."""
from __future__ import annotations

import pytest

import berth
from berth import models as m


def test_create_with_options_get_list_delete(client, unique):
    name = unique("opts")
    sb = client.sandboxes.create(
        name=name, labels={"suite": "python"}, env={"GREETING": "hi"},
        resources=m.Resources(cpus=0.5, memory_bytes=256 << 20, pids=128), timeout_seconds=600,
        workdir="/tmp",
    )
    try:
        assert isinstance(sb, berth.Sandbox) and sb.state == "running"
        assert sb.info.name == name and sb.info.labels == {"suite": "python"}
        assert sb.info.resources.memory_bytes == 256 << 20
        got = client.sandboxes.get(name)  # a name works wherever an id does
        assert got.id == sb.id and got.info.created_at is not None
        assert sb.id in [s.id for s in client.sandboxes.list()]
        r = sb.exec("echo $GREETING; pwd")
        assert r.exit_code == 0 and r.text == "hi\n/tmp\n"
    finally:
        deleted = client.sandboxes.delete(sb.id, force=True)
    assert deleted.id == sb.id
    assert sb.id not in [s.id for s in client.sandboxes.list()]


def test_list_pages(client, unique):
    sbs = [client.sandboxes.create(labels={"page": "1"}) for _ in range(3)]
    try:
        seen, cursor, pages = [], None, 0
        while True:
            p = client.sandboxes.list_page(limit=1, cursor=cursor)
            assert len(p.items) <= 1
            seen += [s.id for s in p.items]
            pages += 1
            if not p.next_cursor:
                break
            cursor = p.next_cursor
        assert pages >= 3
        assert {s.id for s in sbs} <= set(seen)
        assert len(seen) == len(set(seen))
    finally:
        for sb in sbs:
            sb.delete(force=True)


def test_lifecycle_verbs(sandbox):
    assert sandbox.pause().state == "paused"
    assert sandbox.resume().state == "running"
    assert sandbox.stop(timeout=2).state == "stopped"
    assert sandbox.start().state == "running"
    assert sandbox.touch().state == "running"
    assert sandbox.refresh().state == "running"
    assert sandbox.exec("true").exit_code == 0


def test_errors_carry_code_status_and_request_id(client, unique):
    with pytest.raises(berth.NotFoundError) as ei:
        client.sandboxes.get("no-such-sandbox-" + unique())
    e = ei.value
    assert e.status == 404 and e.code == "not_found" and e.request_id
    assert isinstance(e, berth.APIError) and e.request_id in str(e)

    with pytest.raises(berth.InvalidArgumentError) as ei:
        client.sandboxes.create(resources=m.Resources(cpus=-1))
    assert ei.value.status == 400 and ei.value.code == "invalid_argument"

    name = unique("dup")
    with client.sandboxes.create(name=name):
        with pytest.raises(berth.ConflictError) as ei:
            client.sandboxes.create(name=name)
        assert ei.value.status == 409 and ei.value.code == "conflict"


def test_context_manager_deletes_even_when_the_block_raises(client):
    with pytest.raises(RuntimeError, match="boom"):
        with client.sandboxes.create() as sb:
            sid = sb.id
            assert sb.exec("true").exit_code == 0
            raise RuntimeError("boom")
    assert sid not in [s.id for s in client.sandboxes.list()]
    assert client.sandboxes.get(sid).state == "deleted"  # its record is kept a while


def test_idempotency_key_makes_one_sandbox(client):
    key = berth.new_idempotency_key()
    a = client.sandboxes.create(idempotency_key=key)
    try:
        b = client.sandboxes.create(idempotency_key=key)
        assert a.id == b.id
    finally:
        a.delete(force=True)


def test_fork_and_snapshots(client, unique):
    with client.sandboxes.create() as parent:
        parent.files.write("/tmp/state", b"parent-state")
        children = parent.fork(2, labels={"forked": "yes"})
        try:
            assert len(children) == 2 and len({c.id for c in children}) == 2
            for ch in children:
                assert ch.files.read("/tmp/state") == b"parent-state"
                assert ch.id != parent.id
        finally:
            for ch in children:
                ch.delete(force=True)

        snap = parent.snapshot(unique("snap"))
        try:
            assert snap.sandbox_id == parent.id
            assert snap.id in [s.id for s in parent.snapshots()]
            assert snap.id in [s.id for s in client.snapshots.list()]
            assert client.snapshots.get(snap.id).name == snap.name
        finally:
            client.snapshots.delete(snap.id)
        with pytest.raises(berth.NotFoundError):
            client.snapshots.get(snap.id)


def test_persistent_workspace_survives_stop_start(client):
    with client.sandboxes.create(persistent=True) as sb:
        sb.files.write("/workspace/notes.txt", "kept")
        sb.stop()
        sb.start()
        assert sb.files.read("/workspace/notes.txt") == b"kept"


def test_system_calls(client):
    assert client.health() is True
    v = client.version()
    assert v.version
    assert client.doctor().healthy is True
    assert client.doctor(fix=True).healthy is True  # nothing to fix on a healthy daemon
    with pytest.raises(berth.NotFoundError):
        client.templates.delete("no-such-template")
