"""Templates and pools, volumes, secrets, network rules, keys, tenants,
quotas and audit."""
from __future__ import annotations

import pytest

import berth
from berth import models as m


def test_templates_and_pools(client, sandbox):
    templates = client.templates.list()
    names = [t.name for t in templates]
    assert sandbox.info.template in names
    t = client.templates.get(sandbox.info.template)
    assert t.name == sandbox.info.template and t.created_at is not None
    page = client.templates.list_page(limit=1)
    assert len(page.items) == 1
    with pytest.raises(berth.NotFoundError):
        client.templates.get("no-such-template")

    pool = client.templates.set_pool(t.name, 1)
    try:
        assert pool.template == t.name and pool.min == 1
        assert client.templates.get_pool(t.name).min == 1
        assert t.name in [p.template for p in client.pools()]
    finally:
        assert client.templates.set_pool(t.name, 0).min == 0


def test_volumes(client, unique):
    name = unique("vol")
    v = client.volumes.create(name, size_bytes=64 << 20)
    try:
        assert v.name == name and v.size_bytes == 64 << 20
        assert client.volumes.get(name).id == v.id
        assert name in [x.name for x in client.volumes.list()]
        assert len(client.volumes.list_page(limit=1).items) == 1
        with client.sandboxes.create(volumes=[m.VolumeMount(name=name, path="/data")]) as sb:
            sb.files.write("/data/f", b"on the volume")
            assert sb.exec("cat /data/f").stdout == b"on the volume"
    finally:
        client.volumes.delete(name)
    with pytest.raises(berth.NotFoundError):
        client.volumes.get(name)
    # Gone from the list; its tombstone only with all.
    assert name not in [x.name for x in client.volumes.list()]
    assert name in [x.name for x in client.volumes.list(all=True)]


def test_secrets(client, unique):
    name = unique("SECRET").replace("-", "_").upper()
    s = client.secrets.set(name, "s3cr3t")
    try:
        assert s.name == name
        assert name in [x.name for x in client.secrets.list()]
    finally:
        client.secrets.delete(name)
    assert name not in [x.name for x in client.secrets.list()]


def test_network_rules(client):
    with client.sandboxes.create(network="egress", allow=["192.0.2.1"]) as sb:
        rules = sb.network.get()
        assert rules.mode == "egress" and any("192.0.2.1" in a for a in rules.allow)
        rules = sb.network.update(allow=["198.51.100.7:443"])
        assert any("198.51.100.7" in a for a in rules.allow)
        rules = sb.network.update(deny=["198.51.100.7:443"])
        assert not any("198.51.100.7" in a for a in rules.allow)
        assert isinstance(sb.network.flows(), list)


def test_tenants_keys_quotas(client, tenant_key, unique):
    tenant, key, http = tenant_key
    assert tenant in [t.name for t in client.tenants.list()]
    assert any(k.tenant == tenant for k in client.keys.list())

    q = client.quotas.get(tenant)
    assert q.tenant == tenant
    q2 = client.quotas.set(tenant, m.QuotaRequest(
        max_sandboxes=2, max_cpus=q.max_cpus, max_memory_bytes=q.max_memory_bytes,
        max_storage_bytes=q.max_storage_bytes, create_rate_per_minute=q.create_rate_per_minute,
        create_burst=q.create_burst, key_rate_per_second=q.key_rate_per_second, key_burst=q.key_burst))
    assert q2.max_sandboxes == 2

    with berth.Client(http, api_key=key) as tc:
        own = tc.quotas.own()
        assert own.tenant == tenant and own.max_sandboxes == 2
        with tc.sandboxes.create() as sb:
            assert sb.exec("echo tenant").text == "tenant\n"
            assert [s.id for s in tc.sandboxes.list()] == [sb.id]
            with pytest.raises(berth.PermissionDeniedError) as ei:
                tc.tenants.list()
            assert ei.value.status == 403
    with berth.Client(http) as anon:
        with pytest.raises(berth.UnauthenticatedError) as ei:
            anon.sandboxes.list()
        assert ei.value.status == 401 and ei.value.code == "unauthenticated"
    with berth.Client(http, api_key="berth_not_a_real_key") as bad:
        with pytest.raises(berth.UnauthenticatedError):
            bad.sandboxes.list()


def test_api_key_from_the_environment(client, tenant_key, monkeypatch):
    tenant, key, http = tenant_key
    monkeypatch.setenv("BERTH_HOST", http)
    monkeypatch.setenv("BERTH_API_KEY", key)
    with berth.Client() as c:
        assert c.host == http
        assert c.quotas.own().tenant == tenant
        me = c.whoami()
        assert (me.tenant, me.role, me.host) == (tenant, "member", False)
    assert client.whoami().host is True


def test_audit(client, sandbox):
    sandbox.touch()  # audited with the sandbox as its target
    entries = client.audit.list()
    assert entries and all(e.seq > 0 for e in entries)
    mine = client.audit.list(target=sandbox.id)
    assert mine and all(e.target == sandbox.id for e in mine)
    touched = client.audit.list(target=sandbox.id, action="POST /v1/sandboxes/{id}/touch")
    assert [e.action for e in touched] == ["POST /v1/sandboxes/{id}/touch"]
    mid = entries[len(entries) // 2].time  # a datetime, sent as RFC 3339
    after, before = client.audit.list(since=mid), client.audit.list(until=mid)
    assert after and before and all(e.time >= mid for e in after) and all(e.time <= mid for e in before)
    assert {e.seq for e in after} | {e.seq for e in before} >= {e.seq for e in entries}
    assert len(after) < len(entries) and len(before) < len(entries)
    local = client.audit.list(actor="local")  # the unix socket's caller
    assert local and all(e.actor == "local" for e in local)
    page = client.audit.list_page(limit=1)
    assert len(page.items) == 1 and page.next_cursor
    assert client.audit.list_page(limit=1, cursor=page.next_cursor).items[0].seq != page.items[0].seq
    assert client.audit.export().count(b"\n") >= len(entries)
    assert client.audit.verify().ok is True
