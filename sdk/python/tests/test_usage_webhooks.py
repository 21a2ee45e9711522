"""A sandbox's resource use now (GET /v1/sandboxes/{id}/usage) and the
daemon's webhook endpoint (GET /v1/webhooks): the harness starts the
daemon with --webhook-url (a user, a password and a query token in it) and
--webhook-secret, pointing at a receiver on the test internet."""
from __future__ import annotations

import json
import time

import pytest

import berth
from berth import models as m
from conftest import need


def test_usage_of_a_running_and_a_stopped_sandbox(client, sandbox):
    sandbox.exec("head -c 8000000 /dev/urandom > /var/tmp/ballast && sync")
    u = sandbox.usage()
    assert isinstance(u, m.SandboxUsage)
    assert u.state == "running"
    assert u.memory_bytes > 0
    assert u.memory_limit_bytes >= u.memory_bytes
    assert u.cpus > 0 and u.cpu_percent >= 0
    assert u.disk_bytes >= 8000000 and u.disk_limit_bytes >= u.disk_bytes
    assert u.time is not None

    by_name = client.sandboxes.usage(sandbox.id)
    assert by_name.state == "running" and by_name.memory_bytes > 0

    sandbox.stop()
    s = sandbox.usage()
    assert s.state == sandbox.refresh().state != "running"
    assert (s.cpu_percent, s.cpus, s.memory_bytes, s.memory_limit_bytes, s.disk_bytes, s.disk_limit_bytes) == (0, 0, 0, 0, 0, 0)

    with pytest.raises(berth.NotFoundError) as ei:
        client.sandboxes.usage("no-such-sandbox")
    assert ei.value.status == 404


async def test_usage_async(aclient):
    async with await aclient.sandboxes.create() as sb:
        u = await sb.usage()
        assert u.state == "running" and u.memory_bytes > 0


def test_webhooks_redacted_for_the_host_admin(client, sandbox):
    want = need("BERTH_TEST_WEBHOOK_URL")
    hidden = need("BERTH_TEST_WEBHOOK_HIDDEN").split()
    assert len(hidden) == 4
    hooks = client.webhooks()
    assert len(hooks) == 1
    h = hooks[0]
    assert isinstance(h, m.Webhook)
    assert h.url == want
    assert h.signed is True
    # The raw answer too: no field, known or not, holds a credential.
    raw = client._send("GET", "/v1/webhooks").text
    for s in hidden:
        assert s not in raw
        assert s not in json.dumps(h.to_dict(), default=str)
    # The sandbox's creation is an event: the receiver (204) gets it.
    deadline = time.monotonic() + 60
    while h.delivered == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        h = client.webhooks()[0]
    assert h.delivered > 0 and h.last_event_id > 0
    assert h.recent and h.recent[0].status == 204 and h.recent[0].event_id > 0
    assert all(isinstance(r, m.WebhookDelivery) for r in h.recent)


def test_webhooks_refused_to_a_tenant_key(tenant_key):
    tenant, key, http = tenant_key
    with berth.Client(http, api_key=key) as tc:
        with pytest.raises(berth.PermissionDeniedError) as ei:
            tc.webhooks()
        assert ei.value.status == 403 and ei.value.code == "permission_denied"
