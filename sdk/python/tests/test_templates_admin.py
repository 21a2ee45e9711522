"""Templates (build, Dockerfile, upload, import by path, apply, push's
errors, pool reset), quarantine and release, the port proxy, copies
between sandboxes, secret key rotation and attaching to a process."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import tarfile
import time

import pytest

import berth


def tar_of(files: dict) -> bytes:
    """An uncompressed tar archive of name -> content."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            if isinstance(data, str):
                data = data.encode()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def docker_save(files: dict, env=("PATH=/bin",)) -> bytes:
    """A docker-save tarball of one layer holding ``files``: what `docker
    save` writes, made here so the test needs no registry."""
    layer = tar_of(files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": list(env), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": ["example.test/sdk:1"], "Layers": ["layer.tar"]}])
    return tar_of({"manifest.json": manifest, config_name: config, "layer.tar": layer})


def test_build_streams_output_and_makes_a_template(client, unique):
    name = unique("built")
    out = []
    tpl = client.templates.build(name, "base", ["echo step one", "mkdir -p /opt && echo built > /opt/marker"],
                                 on_output=out.append)
    try:
        assert tpl.name == name and len(tpl.layers) >= 2
        assert any(ev.step == 1 and b"step one" in ev.data for ev in out), out
        with client.sandboxes.create(name) as sb:
            assert sb.files.read("/opt/marker") == b"built\n"
    finally:
        client.templates.delete(name)


def test_build_failure_names_its_step(client, unique):
    with pytest.raises(berth.APIError) as ei:
        client.templates.build(unique("bad"), "base", ["true", "echo failing >&2; exit 7"])
    assert "step 2" in str(ei.value)
    assert ei.value.status == 0  # carried inside the 200 stream


def test_build_dockerfile(client, unique):
    name = unique("df")
    ctx = tar_of({"Dockerfile": "FROM base\nCOPY hello.txt /srv/hello.txt\nRUN echo ran > /srv/ran\n", "hello.txt": "from the context\n"})
    out = []
    tpl = client.templates.build_dockerfile(name, ctx, on_output=out.append)
    try:
        with client.sandboxes.create(tpl.name) as sb:
            assert sb.exec("cat /srv/hello.txt /srv/ran").text == "from the context\nran\n"
    finally:
        client.templates.delete(name)
    with pytest.raises(berth.InvalidArgumentError):
        client.templates.build_dockerfile(unique("df"), tar_of({"Dockerfile": "FROM base\nHEALTHCHECK CMD true\n"}))


def test_upload_and_import_by_path(client, unique, tmp_path):
    archive = docker_save({"hello": "from-image\n"})
    name = unique("up")
    progress = []
    tpl = client.templates.upload(name, archive, on_progress=progress.append)
    try:
        assert tpl.name == name and len(tpl.layers) == 1
        assert progress and progress[-1].layers == 1
        # The same image from a path on the daemon's host (this host): the
        # same layer, already stored.
        path = tmp_path / "sdk.tar"
        path.write_bytes(archive)
        os.chmod(tmp_path, 0o755)
        os.chmod(path, 0o644)
        again = client.templates.import_(unique("path"), path=str(path))
        try:
            assert again.layers == tpl.layers
        finally:
            client.templates.delete(again.name)
    finally:
        client.templates.delete(name)
    with pytest.raises(berth.APIError) as ei:
        client.templates.upload(unique("up"), b"not a tarball at all")
    assert 400 <= ei.value.status < 500 or ei.value.status == 0


def test_push_error_is_the_registrys(client, unique):
    # Only an image of its own can be pushed: the builtin base is the host's /usr.
    with pytest.raises(berth.InvalidArgumentError):
        client.templates.push("base", "127.0.0.1:1/sdk/base:1")
    name = unique("push")
    client.templates.upload(name, docker_save({"pushed": "yes\n"}))
    try:
        # A registry nobody listens on, on this host: the stream's error.
        with pytest.raises(berth.APIError) as ei:
            client.templates.push(name, "127.0.0.1:1/sdk/pushed:1", insecure=True)
        assert ei.value.code == "registry_unreachable", ei.value
    finally:
        client.templates.delete(name)


def test_apply_builds_once(client, unique):
    name = unique("apply")
    spec = "name: %s\nfrom: base\nsteps:\n  - run: echo applied > /etc/applied\n" % name
    out = []
    tpl = client.apply(spec, on_output=out.append)
    try:
        assert tpl.name == name
        again = client.apply(spec)  # nothing changed: nothing rebuilt
        assert again.layers == tpl.layers
        with client.sandboxes.create(name) as sb:
            assert sb.files.read("/etc/applied") == b"applied\n"
    finally:
        client.templates.delete(name)


def test_clear_pool(client, unique):
    name = unique("pool")
    client.templates.build(name, "base", ["true"])
    try:
        assert client.templates.set_pool(name, 1).min == 1
        p = client.templates.clear_pool(name)
        assert p.min == 0 and not p.auto
    finally:
        client.templates.set_pool(name, 0)
        client.templates.delete(name)


def test_quarantine_and_release(sandbox):
    sandbox.files.write("/tmp/evidence", b"kept")
    q = sandbox.quarantine()
    assert q.state == "quarantined"
    assert sandbox.files.read("/tmp/evidence") == b"kept"  # readable while frozen
    assert sandbox.release().state == "running"
    assert sandbox.exec("cat /tmp/evidence").text == "kept"


def test_port_request(sandbox):
    sandbox.exec("mkdir -p /tmp/www")
    sandbox.files.write("/tmp/www/index.html", b"hello through the proxy\n")
    sandbox.processes.start(["busybox", "httpd", "-f", "-p", "8080", "-h", "/tmp/www"])
    # Until httpd listens the proxy itself refuses (502 unreachable).
    r = None
    for _ in range(200):
        try:
            r = sandbox.port_request(8080, "/index.html")
            break
        except berth.APIError as e:
            assert e.code == "unreachable", e
            time.sleep(0.05)
    assert r.status_code == 200 and r.text == "hello through the proxy\n"
    r = sandbox.port_request(8080, "/missing")
    assert r.status_code == 404  # the sandbox's server's answer, not an error
    with pytest.raises(berth.APIError) as ei:
        sandbox.port_request(9, "/")  # nothing listens there: the proxy's refusal
    assert ei.value.status in (502, 503)


def test_copy_between_sandboxes(client):
    with client.sandboxes.create() as a, client.sandboxes.create() as b:
        a.exec("mkdir -p /tmp/out && echo artefact > /tmp/out/result.txt")
        client.copy(a.id, "/tmp/out", b.id, "/tmp/in")
        assert b.files.read("/tmp/in/result.txt") == b"artefact\n"


def test_rotate_secrets_key(client, unique):
    name = unique("S").upper().replace("-", "_")
    client.secrets.set(name, "value-before-rotation")
    try:
        r = client.secrets.rotate_key(base64.b64encode(os.urandom(32)).decode())
        assert r.key_id and r.rewrapped >= 1
        assert name in [s.name for s in client.secrets.list()]
        with pytest.raises(berth.InvalidArgumentError):
            client.secrets.rotate_key("too short")
    finally:
        client.secrets.delete(name)


@pytest.mark.asyncio
async def test_attach_to_a_process(aclient):
    async with await aclient.sandboxes.create() as sb:
        p = await sb.processes.start(["sh", "-c", "echo started; read line; echo got $line"])
        async with sb.processes.attach(p.id) as t:
            assert b"started" in await t.read_until(b"started\n")
            await t.send("hello\n")
            assert b"got hello" in await t.read_until(b"got hello\n")
            ex = await t.wait()
            assert ex.code == 0
