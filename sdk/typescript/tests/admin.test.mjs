// Templates and pools, volumes, secrets, network rules, keys, tenants,
// quotas, audit and the system calls.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, ConflictError, NotFoundError, PermissionDeniedError, UnauthenticatedError } from "../src/index.js";
import { SCHEMAS } from "../src/schemas.js";
import { need, unique, withClient, withTenantKey } from "./helpers.mjs";

test("system: health, version, doctor", () =>
  withClient(async (c) => {
    assert.equal(await c.health(), true);
    const v = await c.version();
    assert.ok(v.version && v.runtime);
    const rep = await c.doctor();
    assert.equal(typeof rep.healthy, "boolean");
    assert.equal((await c.doctor({ fix: true })).healthy, true); // nothing to fix on a healthy daemon
  }));

test("hibernate and wake (runsc)", () =>
  withClient(async (c) => {
    // runc cannot checkpoint processes on this kernel: hibernation is gVisor's.
    await using_(await c.sandboxes.create({ runtime: "runsc" }), async (sb) => {
      await sb.exec("echo across hibernation > /tmp/kept");
      await sb.hibernate();
      assert.notEqual((await sb.refresh()).state, "running");
      assert.equal((await sb.wake()).state, "running");
      assert.equal((await sb.files.read("/tmp/kept")).toString(), "across hibernation\n");
    });
  }));

test("templates and pools", () =>
  withClient(async (c) => {
    await using_(await c.sandboxes.create(), async (sb) => {
      const names = (await c.templates.list().toArray()).map((t) => t.name);
      assert.ok(names.includes(sb.info.template));
      const t = await c.templates.get(sb.info.template);
      assert.equal(t.name, sb.info.template);
      assert.ok(t.created_at);
      assert.equal((await c.templates.listPage({ limit: 1 })).items.length, 1);
      await assert.rejects(c.templates.get("no-such-template"), NotFoundError);
      const pool = await c.templates.setPool(t.name, 1);
      try {
        assert.equal(pool.template, t.name);
        assert.equal(pool.min, 1);
        assert.equal((await c.templates.getPool(t.name)).min, 1);
        assert.ok((await c.pools()).some((p) => p.template === t.name));
      } finally {
        assert.equal((await c.templates.setPool(t.name, 0)).min, 0);
      }
    });
  }));

// What `await using` does, for a suite that runs on Node 20 without the syntax.
async function using_(sb, fn) {
  try {
    return await fn(sb);
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}

test("volumes", () =>
  withClient(async (c) => {
    const name = unique("vol");
    const v = await c.volumes.create(name, { sizeBytes: 64 << 20 });
    try {
      assert.equal(v.name, name);
      assert.equal(v.size_bytes, 64 << 20);
      assert.equal((await c.volumes.get(name)).id, v.id);
      assert.ok((await c.volumes.list().toArray()).some((x) => x.name === name));
      assert.equal((await c.volumes.listPage({ limit: 1 })).items.length, 1);
      await using_(await c.sandboxes.create({ volumes: [{ name, path: "/data" }] }), async (sb) => {
        await sb.files.write("/data/f", "on the volume");
        assert.equal((await sb.exec("cat /data/f")).text, "on the volume");
      });
    } finally {
      await c.volumes.delete(name);
    }
    await assert.rejects(c.volumes.get(name), NotFoundError);
    // Gone from the list; its tombstone only with all.
    assert.ok(!(await c.volumes.list().toArray()).some((x) => x.name === name));
    assert.ok((await c.volumes.list({ all: true }).toArray()).some((x) => x.name === name));
  }));

test("secrets", () =>
  withClient(async (c) => {
    const name = unique("SECRET").replace(/-/g, "_").toUpperCase();
    const s = await c.secrets.set(name, "s3cr3t");
    try {
      assert.equal(s.name, name);
      assert.ok((await c.secrets.list().toArray()).some((x) => x.name === name));
    } finally {
      await c.secrets.delete(name);
    }
    assert.ok(!(await c.secrets.list().toArray()).some((x) => x.name === name));
  }));

test("network rules, live", () =>
  withClient(async (c) => {
    await using_(await c.sandboxes.create({ network: "egress", allow: ["192.0.2.1"] }), async (sb) => {
      let rules = await sb.network.get();
      assert.equal(rules.mode, "egress");
      assert.ok(rules.allow.some((a) => a.includes("192.0.2.1")));
      rules = await sb.network.update({ allow: ["198.51.100.7:443"] });
      assert.ok(rules.allow.some((a) => a.includes("198.51.100.7")));
      rules = await sb.network.update({ deny: ["198.51.100.7:443"] });
      assert.ok(!(rules.allow ?? []).some((a) => a.includes("198.51.100.7")));
      assert.ok(Array.isArray(await sb.network.flows()));
    });
  }));

test("tenants, keys and quotas", () =>
  withClient((c) =>
    withTenantKey(c, "member", async (key, tenant) => {
      const http = need("BERTH_TEST_HTTP");
      assert.ok((await c.tenants.list()).some((t) => t.name === tenant));
      assert.ok((await c.keys.list().toArray()).some((k) => k.tenant === tenant));
      const q = await c.quotas.get(tenant);
      assert.equal(q.tenant, tenant);
      // Every limit of the QuotaRequest, as read, with one changed.
      const limits = Object.fromEntries(Object.keys(SCHEMAS.QuotaRequest.props).map((k) => [k, q[k]]));
      const q2 = await c.quotas.set(tenant, { ...limits, max_sandboxes: 2 });
      assert.equal(q2.max_sandboxes, 2);
      const tc = new Client({ host: http, apiKey: key });
      try {
        const me = await tc.whoami();
        assert.equal(me.tenant, tenant);
        assert.equal(me.role, "member");
        assert.equal(me.host, false);
        assert.equal((await c.whoami()).host, true);
        const own = await tc.quotas.own();
        assert.equal(own.tenant, tenant);
        assert.equal(own.max_sandboxes, 2);
        await using_(await tc.sandboxes.create(), async (sb) => {
          assert.equal((await sb.exec("echo tenant")).text, "tenant\n");
          assert.deepEqual((await tc.sandboxes.list().toArray()).map((s) => s.id), [sb.id]);
          await assert.rejects(tc.tenants.list(), (e) => e instanceof PermissionDeniedError && e.status === 403);
        });
      } finally {
        tc.close();
      }
      const anon = new Client({ host: http, apiKey: "" });
      try {
        await assert.rejects(anon.sandboxes.list().toArray(), (e) => e instanceof UnauthenticatedError && e.code === "unauthenticated");
      } finally {
        anon.close();
      }
      // BERTH_HOST and BERTH_API_KEY, as the CLI reads them.
      const saved = { h: process.env.BERTH_HOST, k: process.env.BERTH_API_KEY };
      process.env.BERTH_HOST = http;
      process.env.BERTH_API_KEY = key;
      try {
        const ec = new Client();
        assert.equal(ec.host, http);
        assert.equal((await ec.quotas.own()).tenant, tenant);
        ec.close();
      } finally {
        process.env.BERTH_HOST = saved.h;
        if (saved.k === undefined) delete process.env.BERTH_API_KEY;
        else process.env.BERTH_API_KEY = saved.k;
      }
      const made = await c.keys.create("viewer", { tenant, name: "short", expiresInSeconds: 3600 });
      assert.ok(made.key && made.id);
      const revoked = await c.keys.revoke(made.id);
      assert.equal(revoked.id, made.id);
    }),
  ));

test("audit: filters, pages, export, verify", () =>
  withClient(async (c) => {
    await using_(await c.sandboxes.create(), async (sb) => {
      await sb.touch(); // audited with the sandbox as its target
      const entries = await c.audit.list().toArray();
      assert.ok(entries.length && entries.every((e) => e.seq > 0));
      const mine = await c.audit.list({ target: sb.id }).toArray();
      assert.ok(mine.length && mine.every((e) => e.target === sb.id));
      const touched = await c.audit.list({ target: sb.id, action: "POST /v1/sandboxes/{id}/touch" }).toArray();
      assert.deepEqual(touched.map((e) => e.action), ["POST /v1/sandboxes/{id}/touch"]);
      const mid = entries[Math.floor(entries.length / 2)].time;
      const after = await c.audit.list({ since: mid }).toArray();
      const before = await c.audit.list({ until: new Date(Date.parse(mid)) }).toArray();
      assert.ok(after.length && before.length);
      assert.ok(after.every((e) => Date.parse(e.time) >= Date.parse(mid)));
      assert.ok(after.length < entries.length);
      const local = await c.audit.list({ actor: "local" }).toArray();
      assert.ok(local.length && local.every((e) => e.actor === "local"));
      const page = await c.audit.listPage({ limit: 1 });
      assert.equal(page.items.length, 1);
      assert.ok(page.nextCursor);
      assert.notEqual((await c.audit.listPage({ limit: 1, cursor: page.nextCursor })).items[0].seq, page.items[0].seq);
      const exported = await c.audit.export();
      assert.ok(exported.toString().split("\n").filter(Boolean).length >= entries.length);
      assert.equal((await c.audit.verify()).ok, true);
    });
  }));

test("diff, reset, and hibernate refused on runc", () =>
  withClient(async (c) => {
    await using_(await c.sandboxes.create({ persistent: true }), async (sb) => {
      await sb.files.write("/tmp/changed", "x");
      assert.ok((await sb.diff()).some((d) => d.path.includes("changed")));
      // runc cannot checkpoint here: a typed 409 that says what to use instead.
      await assert.rejects(sb.hibernate(), (e) => e instanceof ConflictError && /runsc/.test(e.message));
      assert.equal((await sb.refresh()).state, "running");
      await sb.reset();
      assert.ok(!(await sb.diff()).some((d) => d.path.includes("changed")));
    });
  }));
