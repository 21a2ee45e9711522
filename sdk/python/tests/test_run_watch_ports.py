"""One-shot runs, file watches, export and port tokens."""
from __future__ import annotations

import io
import tarfile
import time

import berth


def test_run_one_shot(client):
    r = client.run("echo one-shot; echo e >&2; exit 4", stdin="ignored")
    assert (r.exit_code, r.stdout, r.stderr) == (4, b"one-shot\n", b"e\n")
    assert r.sandbox_id
    # The daemon destroys it once the command ended (in the background:
    # wait for it, so the suite leaves nothing running).
    for _ in range(1200):
        state = client.sandboxes.get(r.sandbox_id).state
        if state == "deleted":
            break
        time.sleep(0.05)
    assert state == "deleted"
    r = client.run(["cat"], stdin=b"fed", sandbox=berth.models.CreateSandboxRequest(labels={"one": "shot"}))
    assert r.stdout == b"fed"


def test_watch(sandbox):
    sandbox.files.mkdir("/tmp/w")
    it = sandbox.files.watch("/tmp/w")
    assert next(it).type == "ready"
    sandbox.files.write("/tmp/w/new.txt", b"x")
    seen = []
    for ev in it:
        seen.append((ev.type, ev.path))
        if ev.type == "write":
            break
    # The daemon writes a temp file and renames it into place.
    assert seen[-1] == ("write", "/tmp/w/new.txt")
    assert {t for t, _ in seen} <= {"create", "write", "rename"}
    it.close()
    # The watch ends (the iteration stops at the daemon's end event) when
    # its directory goes.
    it = sandbox.files.watch("/tmp/w")
    assert next(it).type == "ready"
    sandbox.files.remove("/tmp/w", recursive=True)
    assert [(ev.type, ev.path) for ev in it] == [("remove", "/tmp/w/new.txt")]


def test_export(sandbox):
    sandbox.files.mkdir("/tmp/e")
    sandbox.files.write("/tmp/e/a.txt", b"exported")
    archive = sandbox.export(["/tmp/e"])
    tf = tarfile.open(fileobj=io.BytesIO(archive))
    member = [n for n in tf.getnames() if n.endswith("a.txt")]
    assert member and tf.extractfile(member[0]).read() == b"exported"


def test_port_tokens(sandbox):
    tok = sandbox.port_token(8080, ttl_seconds=300)
    assert tok.port == 8080 and tok.token and tok.sandbox_id == sandbox.id
    infos = sandbox.port_tokens()
    assert [t.id for t in infos] == [tok.id]
    revoked = sandbox.revoke_port_token(tok.id)
    assert revoked.id == tok.id and revoked.revoked_at is not None
