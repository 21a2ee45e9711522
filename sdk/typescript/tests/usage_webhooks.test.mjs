// A sandbox's resource use now (GET /v1/sandboxes/{id}/usage) and the
// daemon's webhook endpoint (GET /v1/webhooks): test/sdk starts the daemon
// with --webhook-url (a user, a password and a query token in it) and
// --webhook-secret, pointing at a receiver on the test internet.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";

import { Client, NotFoundError, PermissionDeniedError } from "../src/index.js";
import { need, withClient, withTenantKey } from "./helpers.mjs";

async function using_(sb, fn) {
  try {
    return await fn(sb);
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}

test("usage of a running and of a stopped sandbox", () =>
  withClient(async (c) => {
    await using_(await c.sandboxes.create(), async (sb) => {
      await sb.exec("head -c 8000000 /dev/urandom > /var/tmp/ballast && sync");
      const u = await sb.usage();
      assert.equal(u.state, "running");
      assert.ok(u.memory_bytes > 0, `memory_bytes ${u.memory_bytes}`);
      assert.ok(u.memory_limit_bytes >= u.memory_bytes);
      assert.ok(u.cpus > 0 && u.cpu_percent >= 0);
      assert.ok(u.disk_bytes >= 8000000 && u.disk_limit_bytes >= u.disk_bytes, `disk ${u.disk_bytes}/${u.disk_limit_bytes}`);
      assert.ok(!Number.isNaN(Date.parse(u.time)));

      const byId = await c.sandboxes.usage(sb.id);
      assert.equal(byId.state, "running");
      assert.ok(byId.memory_bytes > 0);

      await sb.stop();
      const s = await sb.usage();
      assert.notEqual(s.state, "running");
      assert.equal(s.state, (await sb.refresh()).state);
      assert.deepEqual(
        [s.cpu_percent, s.cpus, s.memory_bytes, s.memory_limit_bytes, s.disk_bytes, s.disk_limit_bytes],
        [0, 0, 0, 0, 0, 0],
      );
    });
    await assert.rejects(c.sandboxes.usage("no-such-sandbox"), (e) => e instanceof NotFoundError && e.status === 404);
  }));

test("webhooks: the endpoint redacted, for the host's administrator", () =>
  withClient(async (c) => {
    const want = need("BERTH_TEST_WEBHOOK_URL");
    const hidden = need("BERTH_TEST_WEBHOOK_HIDDEN").split(" ");
    assert.equal(hidden.length, 4);
    await using_(await c.sandboxes.create(), async () => {
      let hooks = await c.webhooks();
      assert.equal(hooks.length, 1);
      assert.equal(hooks[0].url, want);
      assert.equal(hooks[0].signed, true);
      // The raw answer too: no field, known or not, holds a credential.
      const raw = (await c._send("GET", "/v1/webhooks")).body.toString("utf8");
      for (const s of hidden) {
        assert.ok(!raw.includes(s), `GET /v1/webhooks shows ${s}`);
      }
      // The sandbox's creation is an event: the receiver (204) gets it.
      for (let i = 0; i < 300 && hooks[0].delivered === 0; i++) {
        await sleep(200);
        hooks = await c.webhooks();
      }
      const h = hooks[0];
      assert.ok(h.delivered > 0 && h.last_event_id > 0, JSON.stringify(h));
      assert.ok(h.recent.length > 0);
      assert.equal(h.recent[0].status, 204);
      assert.ok(h.recent[0].event_id > 0);
    });
  }));

test("webhooks: refused to a tenant's key", () =>
  withClient((c) =>
    withTenantKey(c, "admin", async (key) => {
      const tc = new Client({ host: need("BERTH_TEST_HTTP"), apiKey: key });
      try {
        await assert.rejects(tc.webhooks(), (e) => e instanceof PermissionDeniedError && e.status === 403 && e.code === "permission_denied");
      } finally {
        tc.close();
      }
    }),
  ));
