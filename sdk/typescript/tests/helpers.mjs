// Shared setup of the suite. test/sdk/typescript_test.go starts the daemon
// and says where it is: BERTH_HOST (its unix socket: the host's admin), and
// BERTH_TEST_HTTP / BERTH_TEST_HTTPS (+ BERTH_TEST_TLS_FINGERPRINT,
// BERTH_TEST_TLS_CA) for its loopback TCP listeners. Every test deletes
// what it creates; the harness fails the run for any sandbox left.
import { randomBytes } from "node:crypto";
import { appendFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";

import { Client, setStrict } from "../src/index.js";

// Every answer the suite decodes must be what api/openapi.json describes.
setStrict(true);

export function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this suite through test/sdk (go test ./test/sdk/ -run TypeScript)`);
  return v;
}

need("BERTH_HOST");

// Appends "METHOD /path" of every request this process sends (the SDK's
// HTTP calls, and the WebSocket upgrades ws makes through the same
// http.request) to BERTH_SDK_REQUEST_LOG: test/sdk checks that the suite
// called every operation of api/openapi.json (coverage_test.go).
if (process.env.BERTH_SDK_REQUEST_LOG) {
  const log = process.env.BERTH_SDK_REQUEST_LOG;
  for (const mod of [http, https]) {
    const request = mod.request;
    mod.request = function (opts, ...rest) {
      if (opts && typeof opts === "object" && !(opts instanceof URL) && opts.path) {
        appendFileSync(log, `${opts.method ?? "GET"} ${opts.path.split("?")[0]}\n`);
      }
      return request.call(this, opts, ...rest);
    };
  }
}

export const unique = (prefix = "ts") => `${prefix}-${randomBytes(4).toString("hex")}`;

/** A client of the daemon's unix socket (admin), closed after fn. */
export async function withClient(fn, options = {}) {
  const c = new Client(options);
  try {
    return await fn(c);
  } finally {
    c.close();
  }
}

/** A fresh tenant and a key of it with `role`; removed after fn(key, tenant). */
export async function withTenantKey(c, role, fn) {
  const tenant = unique("t");
  await c.tenants.create(tenant);
  const k = await c.keys.create(role, { tenant, name: "node-test" });
  try {
    return await fn(k.key, tenant);
  } finally {
    await c.keys.revoke(k.id);
    await c.tenants.delete(tenant);
  }
}

/** Records the retry loops' waits (seconds) instead of sleeping them. */
export function recorder() {
  const got = [];
  const sleep = async (s) => {
    got.push(s);
  };
  return { got, sleep };
}
