// Contexts saved by the berth CLI (`berth context add`, kept in
// $XDG_CONFIG_HOME/berth/config.json): the client finds the daemon as the
// CLI does — option, BERTH_HOST, the context (option, BERTH_CONTEXT, the
// file's current one), the default socket — and a context's key and TLS
// settings never go to a host named elsewhere.
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Client, DEFAULT_HOST, UnauthenticatedError } from "../src/index.js";
import { need, withClient, withTenantKey } from "./helpers.mjs";

test("contexts as the CLI resolves them", () =>
  withClient((admin) =>
    withTenantKey(admin, "member", async (key, tenant) => {
      const dir = mkdtempSync(join(process.env.BERTH_TEST_TMP ?? tmpdir(), "contexts-"));
      const saved = {};
      for (const k of ["XDG_CONFIG_HOME", "BERTH_HOST", "BERTH_API_KEY", "BERTH_TLS_FINGERPRINT", "BERTH_CONTEXT"]) saved[k] = process.env[k];
      try {
        const keyFile = join(dir, "key");
        writeFileSync(keyFile, key + "\n");
        mkdirSync(join(dir, "cfg", "berth"), { recursive: true });
        const path = join(dir, "cfg", "berth", "config.json");
        const https = need("BERTH_TEST_HTTPS");
        const http = need("BERTH_TEST_HTTP");
        const cfg = {
          current: "tls",
          contexts: {
            tls: { host: https, api_key_file: keyFile, tls_fingerprint: need("BERTH_TEST_TLS_FINGERPRINT") },
            plain: { host: http, api_key: key },
            ca: { host: https, api_key: key, tls_ca: need("BERTH_TEST_TLS_CA") },
          },
        };
        writeFileSync(path, JSON.stringify(cfg), { mode: 0o600 });
        process.env.XDG_CONFIG_HOME = join(dir, "cfg");
        for (const k of ["BERTH_HOST", "BERTH_API_KEY", "BERTH_TLS_FINGERPRINT", "BERTH_CONTEXT"]) delete process.env[k];
        const as = async (options, fn) => {
          const c = new Client(options);
          try {
            return await fn(c);
          } finally {
            c.close();
          }
        };
        // The file's current context: TLS pinned, the key from its file.
        await as({}, async (c) => {
          assert.equal(c.host, https);
          assert.equal((await c.whoami()).tenant, tenant);
        });
        // BERTH_CONTEXT, then the option, over the current one.
        process.env.BERTH_CONTEXT = "plain";
        await as({}, async (c) => {
          assert.equal(c.host, http);
          assert.equal((await c.whoami()).tenant, tenant);
        });
        await as({ context: "ca" }, async (c) => {
          assert.equal(c.host, https);
          assert.equal((await c.whoami()).tenant, tenant);
        });
        // "default" is the local socket, whatever the file says.
        await as({ context: "default" }, async (c) => assert.equal(c.host, DEFAULT_HOST));
        // A host named elsewhere never gets the context's key.
        process.env.BERTH_HOST = http;
        await as({}, async (c) => assert.rejects(c.whoami(), UnauthenticatedError));
        delete process.env.BERTH_HOST;
        assert.throws(() => new Client({ host: http, context: "plain" }), /both name a daemon/);
        assert.throws(() => new Client({ context: "nope" }), /not in/);
        // A file holding a key that others can read is refused, as by the CLI.
        chmodSync(path, 0o644);
        assert.throws(() => new Client(), /readable by others/);
      } finally {
        for (const [k, v] of Object.entries(saved)) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
        rmSync(dir, { recursive: true, force: true });
      }
    }),
  ));
