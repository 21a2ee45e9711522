"""The generated files must match their sources: the models the spec
(api/openapi.json), the sync client the asyncio one."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")


def regenerate_and_compare(tool, committed, tmp_path):
    out = tmp_path / os.path.basename(committed)
    subprocess.run([sys.executable, os.path.join(TOOLS, tool), "-o", str(out)], check=True)
    with open(committed, encoding="utf-8") as f:
        want = f.read()
    assert out.read_text(encoding="utf-8") == want, (
        "%s drifted from its source: run /usr/bin/python3 sdk/python/tools/%s" % (committed, tool))


def test_models_match_the_spec(tmp_path):
    regenerate_and_compare("gen_models.py", os.path.join(HERE, "..", "berth", "_models.py"), tmp_path)


def test_sync_client_matches_the_async_one(tmp_path):
    regenerate_and_compare("unasync.py", os.path.join(HERE, "..", "berth", "_sync_client.py"), tmp_path)


def test_drift_is_detected(tmp_path):
    """The comparison can fail: a spec with one more field gives another file."""
    import json

    spec = json.load(open(os.path.join(HERE, "..", "..", "..", "api", "openapi.json")))
    spec["components"]["schemas"]["Tenant"]["properties"]["drift"] = {"type": "string"}
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec))
    out = tmp_path / "m.py"
    subprocess.run([sys.executable, os.path.join(TOOLS, "gen_models.py"), "--spec", str(p), "-o", str(out)], check=True)
    with open(os.path.join(HERE, "..", "berth", "_models.py"), encoding="utf-8") as f:
        assert out.read_text(encoding="utf-8") != f.read()
    r = subprocess.run([sys.executable, os.path.join(TOOLS, "gen_models.py"), "--spec", str(p), "--check"])
    assert r.returncode == 1


def test_models_round_trip(monkeypatch):
    from datetime import timezone

    from berth import _wire
    from berth import models as m

    monkeypatch.setattr(_wire, "STRICT", False)  # as users decode: unknown keys ignored

    sb = m.Sandbox.from_dict({"id": "a", "name": "n", "template": "t", "state": "running",
                              "created_at": "2026-12-07T00:45:59.123456789Z", "resources": {"cpus": 0.5},
                              "isolation": {"runtime": "runc", "shared_kernel": True, "user_namespace": True,
                                            "seccomp": "default", "capabilities": [], "no_new_privileges": True,
                                            "readonly_image": True}, "unknown_future_field": 1})
    assert sb.created_at.tzinfo == timezone.utc and sb.created_at.microsecond == 123456
    assert sb.resources.cpus == 0.5 and sb.isolation.runtime == "runc"
    ev = m.ExecEvent.from_dict({"stream": "stdout", "data": "aGk="})
    assert ev.data == b"hi"
    assert m.ExecRequest(cmd=["x"], stdin=b"hi").to_dict() == {"cmd": ["x"], "stdin": "aGk="}
    e = m.Event.from_dict({"id": 1, "sandbox_id": "s", "time": "2026-01-01T00:00:00+02:00", "type": "x", "from": "a"})
    assert e.from_ == "a" and e.to_dict()["from"] == "a"


def test_strict_decoding_refuses_what_the_spec_does_not_describe(monkeypatch):
    from berth import _wire
    from berth import models as m

    monkeypatch.setattr(_wire, "STRICT", True)
    with pytest.raises(_wire.SpecMismatch):
        m.Tenant.from_dict({"name": "a", "created_at": "2026-01-01T00:00:00Z", "extra": 1})
    with pytest.raises(_wire.SpecMismatch):
        m.Tenant.from_dict({"name": "a"})
    assert m.Tenant.from_dict({"name": "a", "created_at": "2026-01-01T00:00:00Z"}).name == "a"


def test_reference_matches_the_docstrings(tmp_path):
    """docs/sdk-python-reference.md is generated from the SDK's docstrings."""
    regenerate_and_compare("gen_reference.py", os.path.join(HERE, "..", "..", "..", "docs", "sdk-python-reference.md"), tmp_path)
