// Per-route timeouts: short calls are bounded by the client's `timeout` (or
// withOptions({ timeout }) for some calls), long-running ones (exec streams,
// process waits, ...) by `streamTimeout`, unbounded by default. A bound is
// time without progress, so these tests use a server that never answers and
// commands that stay silent: no test measures a duration.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, DEFAULT_TIMEOUT, RequestTimeoutError, Sandbox, TransportError } from "../src/index.js";
import { need, withClient } from "./helpers.mjs";
import { Proxy } from "./proxy.mjs";

test("a short call is bounded and not retried", async () => {
  const px = await Proxy.to(need("BERTH_TEST_HTTP"), ["stall", "stall"]);
  try {
    await shortCalls(px);
  } finally {
    await px.close();
  }
});

async function shortCalls(px) {
  const c = new Client({ host: px.url, timeout: 0.3 });
  try {
    // A GET: safe to send twice, yet a timeout is not retried.
    const err = await c.version().catch((e) => e);
    assert.ok(err instanceof RequestTimeoutError && err instanceof TransportError, String(err));
    assert.equal(err.code, "timeout");
  } finally {
    c.close();
  }
  assert.equal(px.seen.length, 1);
  // The default overridden for one call.
  const d = new Client({ host: px.url });
  try {
    assert.equal(d.timeout, DEFAULT_TIMEOUT);
    assert.equal(d.streamTimeout, undefined);
    await assert.rejects(d.withOptions({ timeout: 0.3 }).sandboxes.list().toArray(), RequestTimeoutError);
    assert.equal(d.timeout, DEFAULT_TIMEOUT); // the client itself is unchanged
  } finally {
    d.close();
  }
  assert.deepEqual(px.seen.map((s) => s.path), ["/v1/version", "/v1/sandboxes"]);
}

test("long calls are not bound by the short timeout; streamTimeout bounds them", () =>
  withClient(async (c) => {
    const sandbox = await c.sandboxes.create();
    try {
      // Through a client whose short calls may not go 0.3 s without an
      // answer: a command silent for 1.5 s, and a wait for a process that
      // ends after 1.5 s, both complete.
      // (Bound to the sandbox here rather than read again: only the calls
      // under test go through the 0.3 s client.)
      const sb = new Sandbox(c.withOptions({ timeout: 0.3 }), sandbox.info);
      const r = await sb.exec("sleep 1.5; echo done");
      assert.equal(r.exitCode, 0);
      assert.equal(r.text, "done\n");
      const p = await sandbox.processes.start("sleep 1.5");
      assert.equal((await sb.processes.wait(p.id)).code, 0);

      const bounded = new Sandbox(c.withOptions({ streamTimeout: 0.3 }), sandbox.info);
      await assert.rejects(bounded.exec("sleep 3; echo late"), RequestTimeoutError);
      const q = await sandbox.processes.start("sleep 3");
      await assert.rejects(bounded.processes.wait(q.id), RequestTimeoutError);
      await sandbox.processes.kill(q.id);
    } finally {
      await sandbox.delete({ force: true });
    }
  }));

test("metrics and the OpenAPI document", () =>
  withClient(async (c) => {
    assert.match(await c.metrics(), /berth_http_requests_total/);
    const doc = await c.openapi();
    assert.match(doc.openapi, /^3\./);
    assert.ok("/v1/sandboxes" in doc.paths);
  }));
