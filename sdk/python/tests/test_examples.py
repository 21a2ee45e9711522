"""The examples (sdk/python/examples) run as tests against the daemon."""
from __future__ import annotations

import importlib.util
import json
import os

from conftest import need

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


def test_warm_pool(client):
    r = load("warm_pool").main(client, template="example-warm-test", size=2)
    assert len(r["took"]) == 2
    assert r["pool"].hits >= 2  # both creates were claims of warm members
    assert "example-warm-test" not in [t.name for t in client.templates.list()]


def test_agent_tool_loop(client):
    """The loop with a scripted model: it asks for code twice (the second
    call reads a file the first wrote: one sandbox for the conversation),
    then answers from the tool's output."""
    ex = load("agent_tool_loop")
    seen = []

    def model(messages, tools):
        assert tools[0]["function"]["name"] == "run_python"
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        seen.append(len(tool_msgs))
        if len(tool_msgs) == 0:
            code = "a, b = 0, 1\nfor _ in range(20): a, b = b, a + b\nopen('/tmp/fib', 'w').write(str(a))\nprint(a)"
            return {"role": "assistant", "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}]}
        if len(tool_msgs) == 1:
            code = "import os; print(open('/tmp/fib').read(), os.path.exists('/etc/passwd'))"
            return {"role": "assistant", "content": None,
                    "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}]}
        out = json.loads(tool_msgs[-1]["content"])
        assert out["exit_code"] == 0
        return {"role": "assistant", "content": "The 20th Fibonacci number is " + out["stdout"].split()[0]}

    answer = ex.main(client, "What is the 20th Fibonacci number?", model)
    assert answer == "The 20th Fibonacci number is 6765"
    assert seen == [0, 1, 2]
    assert [s for s in client.sandboxes.list() if (s.info.labels or {}).get("example") == "agent"] == []


def test_egress_secret(client):
    """The key reaches the API host (the test internet's, which answers 200
    to its key alone and writes down each Authorization header it gets);
    the sandbox holds only the placeholder: not in its env, its processes'
    environments, /run/secrets or anything the call printed."""
    host, key, seen_file = need("BERTH_TEST_API_HOST"), need("BERTH_TEST_API_KEY"), need("BERTH_TEST_API_SEEN")
    with open(seen_file) as f:
        before = len(f.readlines())
    inside = []

    def look(sb):
        inside.append(sb.exec("env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; cat /run/secrets/* /tmp/* 2>/dev/null; true").text)

    r = load("egress_secret").main(client, host, key, look=look)
    assert r["status"] == 200 and json.loads(r["body"]) == {"user": "sdk-example", "authorized": True}, r
    assert r["placeholder"].startswith("berth-secret-placeholder-"), r
    with open(seen_file) as f:
        seen = [json.loads(line) for line in f.readlines()[before:]]
    assert [(s["host"], s["authorization"]) for s in seen] == [(host, "Bearer " + key)], seen
    assert "EXAMPLE_API_KEY=" + r["placeholder"] in inside[0]
    assert key not in inside[0] and key not in r["body"] and key not in r["placeholder"]
    assert "EXAMPLE_API_KEY" not in [s.name for s in client.secrets.list()]
