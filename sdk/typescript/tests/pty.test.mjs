// Terminals over the exec WebSocket: typing, resize, exit status; pipes
// with the end of input; over the unix socket and over pinned TLS.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidArgumentError } from "../src/index.js";
import { need, withClient, withTenantKey } from "./helpers.mjs";

test("a terminal: type, resize (the shell sees it), exit status", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create();
    try {
      const t = await sb.pty(["sh"], { rows: 24, cols: 80 });
      try {
        await t.send("stty size; echo mark-$((6*7))\n");
        const out = (await t.readUntil("mark-42")).toString();
        assert.match(out, /24 80/);
        // A resize reaches the shell before the line typed after it: the
        // daemon carries both in one ordered stream to the agent.
        await t.resize(40, 132);
        // The output "done-1001", not the echo of the typed line.
        await t.send("stty size; echo done-$((1000+1))\n");
        assert.match((await t.readUntil("done-1001\r\n")).toString(), /40 132/);
        await t.send("exit 5\n");
        assert.equal((await t.wait()).code, 5);
        await assert.rejects(t.send("late\n"), (e) => e.code === "stream");
      } finally {
        t.close();
      }
    } finally {
      await sb.delete({ force: true });
    }
  }));

test("pipes without a terminal: close stdin ends the input", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create();
    try {
      const t = await sb.pty(["sh", "-c", "wc -c; exit 3"], { tty: false });
      await t.send("12345");
      await t.closeStdin();
      const out = (await t.readUntil("\n")).toString();
      assert.equal(out.trim(), "5");
      assert.equal((await t.wait()).code, 3);
      t.close();
    } finally {
      await sb.delete({ force: true });
    }
  }));

test("a terminal over pinned TLS with a tenant's key; a refused one is an error", () =>
  withClient((admin) =>
    withTenantKey(admin, "member", async (key) => {
      const c = new Client({ host: need("BERTH_TEST_HTTPS"), apiKey: key, tlsFingerprint: need("BERTH_TEST_TLS_FINGERPRINT") });
      const sb = await c.sandboxes.create();
      try {
        const t = await sb.pty("echo over-tls; exit 0");
        assert.match((await t.readUntil("over-tls")).toString(), /over-tls/);
        assert.equal((await t.wait()).code, 0);
        t.close();
        // A refused request is an error frame on the socket: status 0, the stable code.
        const t2 = await sb.pty([]);
        await assert.rejects(t2.wait(), (e) => e instanceof InvalidArgumentError && e.status === 0 && e.requestId !== "");
        t2.close();
      } finally {
        await sb.delete({ force: true });
        c.close();
      }
    }),
  ));
