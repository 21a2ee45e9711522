"""Exec (streamed), background processes and files."""
from __future__ import annotations

import io
import tarfile

import pytest

import berth


def test_exec_exit_status_output_stdin_env(sandbox):
    r = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert r.exit_code == 3 and r.stdout == b"out\n" and r.stderr == b"err\n"
    assert sandbox.exec("cat", stdin=b"from stdin").stdout == b"from stdin"
    assert sandbox.exec("echo $X", env={"X": "y"}).text == "y\n"
    got = []
    sandbox.exec("printf a; printf b >&2", on_stdout=got.append, on_stderr=got.append)
    assert sorted(got) == [b"a", b"b"]


def test_exec_streams_output_before_the_command_ends(sandbox):
    """The first line arrives while the command still waits for a file that
    the test writes only after reading that line: output is streamed."""
    it = sandbox.exec_stream("echo ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done")
    first = next(it)
    assert first.stream == "stdout" and first.data == b"ready\n"
    sandbox.files.write("/tmp/go", b"")
    rest = list(it)
    assert b"".join(e.data or b"" for e in rest) == b"done\n"
    assert rest[-1].exit is not None and rest[-1].exit.code == 0


def test_background_processes(sandbox):
    p = sandbox.processes.start(["cat"], tag="echoer")
    assert p.id and p.state == "running"
    assert p.id in [x.id for x in sandbox.processes.list()]
    assert sandbox.processes.get(p.id).tag == "echoer"
    sandbox.processes.stdin(p.id, b"hello ")
    sandbox.processes.stdin(p.id, b"world", close=True)
    ex = sandbox.processes.wait(p.id)
    assert ex.code == 0
    out = sandbox.processes.logs(p.id)
    assert out.stdout == b"hello world"
    followed = sandbox.processes.logs(p.id, follow=True)
    assert followed.exit is not None and followed.exit.code == 0

    s = sandbox.processes.start("sleep 600")
    sandbox.processes.kill(s.id)
    ex = sandbox.processes.wait(s.id)
    assert ex.signal or ex.code != 0

    t = sandbox.processes.start("trap 'exit 7' TERM; echo trapped; while true; do sleep 0.05; done")
    for ev in sandbox.processes.logs_stream(t.id, follow=True):  # the trap is set once it says so
        if ev.data and b"trapped" in ev.data:
            break
    sandbox.processes.signal(t.id, "TERM")
    assert sandbox.processes.wait(t.id).code == 7


def test_files(sandbox):
    sandbox.files.mkdir("/tmp/d/sub", parents=True)
    info = sandbox.files.write("/tmp/d/a.txt", b"alpha", mode=0o640)
    assert info.size == 5
    assert sandbox.files.read("/tmp/d/a.txt") == b"alpha"
    assert b"".join(sandbox.files.read_stream("/tmp/d/a.txt")) == b"alpha"
    assert sandbox.files.mode("/tmp/d/a.txt") & 0o777 == 0o640
    st = sandbox.files.stat("/tmp/d/a.txt")
    assert st.size == 5 and not st.is_dir and st.permissions & 0o777 == 0o640
    names = sorted(f.name for f in sandbox.files.list("/tmp/d"))
    assert names == ["a.txt", "sub"]
    sandbox.files.move("/tmp/d/a.txt", "/tmp/d/sub/b.txt")
    with pytest.raises(berth.NotFoundError):
        sandbox.files.stat("/tmp/d/a.txt")
    sandbox.files.write("/tmp/d/c.txt", "gamma")
    with pytest.raises(berth.APIError):
        sandbox.files.move("/tmp/d/c.txt", "/tmp/d/sub/b.txt", no_replace=True)

    # tar out, tar in elsewhere
    archive = sandbox.files.read_tar("/tmp/d")
    names = tarfile.open(fileobj=io.BytesIO(archive)).getnames()
    assert any(n.endswith("sub/b.txt") for n in names)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        data = b"from a tar"
        ti = tarfile.TarInfo("x/y.txt")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    sandbox.files.mkdir("/tmp/untar")
    sandbox.files.write_tar("/tmp/untar", buf.getvalue())
    assert sandbox.files.read("/tmp/untar/x/y.txt") == b"from a tar"

    sandbox.files.remove("/tmp/d", recursive=True)
    with pytest.raises(berth.NotFoundError):
        sandbox.files.stat("/tmp/d")


def test_write_stream(sandbox, tmp_path):
    """A file written from chunks as they come: a generator, and an open
    file; the sandbox holds exactly those bytes."""
    import hashlib

    chunks = [bytes([i]) * 65536 for i in range(64)]  # 4 MiB
    info = sandbox.files.write_stream("/tmp/streamed", (c for c in chunks), mode=0o640)
    assert info.size == 4 << 20 or info.size is None
    assert sandbox.files.stat("/tmp/streamed").size == 4 << 20
    want = hashlib.sha256(b"".join(chunks)).hexdigest()
    assert sandbox.exec("sha256sum /tmp/streamed").text.split()[0] == want
    assert sandbox.files.mode("/tmp/streamed") == 0o640
    src = tmp_path / "src"
    src.write_bytes(b"from a file\n" * 1000)
    with open(src, "rb") as f:
        sandbox.files.write_stream("/tmp/from-file", f)
    assert sandbox.files.read("/tmp/from-file") == src.read_bytes()


async def test_write_stream_async(aclient):
    async def chunks():
        for i in range(16):
            yield b"%04d\n" % i

    async with await aclient.sandboxes.create() as sb:
        await sb.files.write_stream("/tmp/a", chunks())
        await sb.files.write_stream("/tmp/b", [b"sync ", b"iterable"])
        assert await sb.files.read("/tmp/a") == b"".join(b"%04d\n" % i for i in range(16))
        assert await sb.files.read("/tmp/b") == b"sync iterable"
