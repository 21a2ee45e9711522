// Unit tests of the console's pure logic: humane values, which actions a
// state allows, what the create form sends. Run by test.mjs (esbuild
// bundles this file for node's test runner), in make console-check.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ago, bytes, duration } from "../src/format";
import { requestOf } from "../src/pages/create";
import { Rights, opsFor } from "../src/rights";
import type { Sandbox } from "../src/types";

test("bytes", () => {
  assert.equal(bytes(536870912), "512 MiB");
  assert.equal(bytes(1536), "1.5 KiB");
  assert.equal(bytes(10 * 1024 ** 3), "10 GiB");
  assert.equal(bytes(0), "0 B");
  assert.equal(bytes(undefined), "");
});

test("duration and ago", () => {
  assert.equal(duration(45), "45 s");
  assert.equal(duration(600), "10 min");
  assert.equal(duration(3600 + 5 * 60), "1 h 05 min");
  assert.equal(duration(2 * 86400 + 4 * 3600), "2 days 4 h");
  const now = Date.parse("2026-01-01T12:00:00Z");
  assert.equal(ago("2026-01-01T11:57:00Z", now), "3 min ago");
  assert.equal(ago("2026-01-01T12:00:00Z", now), "just now");
  assert.equal(ago("2026-01-01T13:00:00Z", now), "in 1 h");
});

const sb = (state: string) => ({ state }) as Sandbox;

test("actions follow the state", () => {
  assert.deepEqual(opsFor(sb("running"), false), ["pause", "stop", "delete"]);
  assert.deepEqual(opsFor(sb("running"), true), ["pause", "stop", "hibernate", "delete"]);
  assert.deepEqual(opsFor(sb("paused"), false), ["resume", "stop", "delete"]);
  assert.deepEqual(opsFor(sb("stopped"), true), ["start", "delete"]);
  assert.deepEqual(opsFor(sb("deleting"), true), []);
  assert.deepEqual(opsFor(sb("deleted"), true), []);
});

test("rights follow the scopes", () => {
  const viewer = new Rights({ actor: "key:v", tenant: "t", role: "viewer", scopes: ["sandboxes:read"], host: false });
  assert.equal(viewer.can("sandboxes:write"), false);
  assert.equal(viewer.can("exec"), false);
  assert.match(viewer.lacks("exec", "run commands"), /viewer, tenant t.*“exec”/);
  const admin = new Rights({ actor: "key:a", tenant: "t", role: "admin", scopes: ["admin"], host: false });
  assert.equal(admin.can("keys"), true);
  assert.equal(admin.host, false);
});

test("the create form's request", () => {
  assert.deepEqual(requestOf({ network: "none" }), {});
  assert.deepEqual(
    requestOf({ name: " web ", template: "python", cpus: "0.5", memory: "256", disk: "2", timeout: "30", network: "none",
      allow: "example.com:443\n*.pypi.org", ports: "8080, 3000", labels: "team=red\nenv = dev", secrets: "TOKEN=API_TOKEN\nDB" }),
    {
      name: "web", template: "python", resources: { cpus: 0.5, memory_bytes: 256 << 20, disk_bytes: 2 * 1024 ** 3 },
      timeout_seconds: 1800, network: "egress", allow: ["example.com:443", "*.pypi.org"], public_ports: [8080, 3000],
      labels: { team: "red", env: "dev" }, secrets: [{ name: "TOKEN", env: "API_TOKEN" }, { name: "DB" }],
    },
  );
  assert.deepEqual(requestOf({ volume: "1" }), { persistent: true, volume_size_bytes: 1024 ** 3 });
  assert.throws(() => requestOf({ ports: "99999" }), /1 to 65535/);
  assert.throws(() => requestOf({ labels: "novalue" }), /key=value/);
  assert.throws(() => requestOf({ memory: "-1" }), /positive/);
});
