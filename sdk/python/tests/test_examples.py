"""The examples (sdk/python/examples) run as tests against the daemon."""
from __future__ import annotations

import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location("example_" + name, os.path.join(EXAMPLES, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_run_code(client, capsys):
    primes = load("run_code").main(client)
    assert primes[:5] == [2, 3, 5, 7, 11] and len(primes) == 17
    assert "found 17 primes" in capsys.readouterr().out


def test_persistent_workspace(client):
    assert load("persistent_workspace").main(client) == "step 1 done\nstep 2 done\n"


def test_fork_artefacts(client):
    got = load("fork_artefacts").main(client, variants=3)
    assert sorted(got.values()) == [5050, 10100, 15150]
    assert len(got) == 3
    left = [s for s in client.sandboxes.list() if (s.info.labels or {}).get("example") == "fork"]
    assert left == []
