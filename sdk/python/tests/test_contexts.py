"""Contexts saved by the berth CLI (``berth context add``, kept in
$XDG_CONFIG_HOME/berth/config.json): the client finds the daemon as the CLI
does — argument, BERTH_HOST, the context (argument, BERTH_CONTEXT, the
file's current one), the default socket — and a context's key and TLS
settings never go to a host named elsewhere."""
from __future__ import annotations

import json
import os

import pytest

import berth


@pytest.fixture
def config(tmp_path, monkeypatch, tenant_key):
    tenant, key, http = tenant_key
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    path = tmp_path / "cfg" / "berth" / "config.json"
    path.parent.mkdir(parents=True)
    cfg = {"current": "tls", "contexts": {
        "tls": {"host": os.environ["BERTH_TEST_HTTPS"], "api_key_file": str(key_file),
                "tls_fingerprint": os.environ["BERTH_TEST_TLS_FINGERPRINT"]},
        "plain": {"host": http, "api_key": key},
        "ca": {"host": os.environ["BERTH_TEST_HTTPS"], "api_key": key, "tls_ca": os.environ["BERTH_TEST_TLS_CA"]},
    }}
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for k in ("BERTH_HOST", "BERTH_API_KEY", "BERTH_TLS_FINGERPRINT", "BERTH_CONTEXT"):
        monkeypatch.delenv(k, raising=False)
    return tenant, http, path


def test_contexts_as_the_cli_resolves_them(config, monkeypatch):
    tenant, http, path = config
    # The file's current context: TLS pinned, the key from its file.
    with berth.Client() as c:
        assert c.host == os.environ["BERTH_TEST_HTTPS"] and c.whoami().tenant == tenant
    # BERTH_CONTEXT, then the argument, over the current one.
    monkeypatch.setenv("BERTH_CONTEXT", "plain")
    with berth.Client() as c:
        assert c.host == http and c.whoami().tenant == tenant
    with berth.Client(context="ca") as c:
        assert c.host == os.environ["BERTH_TEST_HTTPS"] and c.whoami().tenant == tenant
    # "default" is the local socket, whatever the file says.
    with berth.Client(context="default") as c:
        assert c.host == berth.DEFAULT_HOST
    # A host named elsewhere never gets the context's key.
    monkeypatch.setenv("BERTH_HOST", http)
    with berth.Client() as c:
        with pytest.raises(berth.UnauthenticatedError):
            c.whoami()
    monkeypatch.delenv("BERTH_HOST")
    with pytest.raises(ValueError, match="both name a daemon"):
        berth.Client(http, context="plain")
    with pytest.raises(ValueError, match="not in"):
        berth.Client(context="nope")
    # A file holding a key that others can read is refused, as by the CLI.
    path.chmod(0o644)
    with pytest.raises(ValueError, match="readable by others"):
        berth.Client()
