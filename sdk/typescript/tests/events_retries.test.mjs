// Events (pages and the SSE stream with resumption), retries through a
// fault proxy, TLS pinning and the CA file.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import tls from "node:tls";

import {
  Client,
  ConnectError,
  FingerprintError,
  RateLimitedError,
  TransportError,
  UnauthenticatedError,
  UnavailableError,
  Sandbox,
  StreamError,
  fingerprintOf,
  parseFingerprint,
} from "../src/index.js";
import { need, recorder, unique, withClient, withTenantKey } from "./helpers.mjs";
import { Proxy } from "./proxy.mjs";

const http = () => need("BERTH_TEST_HTTP");

test("events: pages, filters, after", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create({ persistent: true });
    try {
      await sb.stop();
      await sb.start();
      const evs = await sb.events().toArray();
      assert.ok(evs.length >= 3 && evs.every((e) => e.sandbox_id === sb.id));
      const ids = evs.map((e) => e.id);
      assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
      const later = await c.events.list({ sandbox: sb.id, after: ids[0] }).toArray();
      assert.deepEqual(later.map((e) => e.id), ids.slice(1));
      const type = evs.at(-1).type;
      const typed = await c.events.list({ sandbox: [sb.id], types: [type] }).toArray();
      // Across sandboxes (GET /v1/events): no filter, or more than one.
      const everything = await c.events.list({ after: ids[0] - 1 }).toArray();
      assert.ok(ids.every((id) => everything.some((e) => e.id === id)));
      assert.ok(typed.length && typed.every((e) => e.type === type));
      const p = await c.events.listPage({ sandbox: sb.id, limit: 1 });
      assert.equal(p.items.length, 1);
      assert.ok(p.nextCursor);
    } finally {
      await sb.delete({ force: true });
    }
  }));

async function streamIds(c, sandbox, n) {
  const got = [];
  for await (const ev of c.events.stream({ sandbox })) {
    got.push(ev.id);
    if (got.length === n) break;
  }
  return got;
}

test("the event stream resumes with Last-Event-ID after a cut", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const direct = new Client({ host: http(), apiKey: key });
      const sb = await direct.sandboxes.create({ persistent: true });
      try {
        await sb.stop();
        await sb.start();
        const want = (await sb.events().toArray()).map((e) => e.id);
        assert.ok(want.length >= 3);
        const px = await Proxy.to(http(), ["cut-after-event"]);
        const { sleep } = recorder();
        const c = new Client({ host: px.url, apiKey: key, sleep });
        try {
          assert.deepEqual(await streamIds(c, sb.id, want.length), want);
        } finally {
          c.close();
          await px.close();
        }
        const streams = px.seen.filter((s) => s.path.startsWith(`/v1/sandboxes/${sb.id}/events`));
        assert.ok(streams.length >= 2, JSON.stringify(px.seen));
        assert.equal(streams[0].headers["last-event-id"], undefined);
        assert.equal(streams[1].headers["last-event-id"], String(want[0]));
        assert.equal(streams[1].headers.accept, "text/event-stream");
      } finally {
        await sb.delete({ force: true });
        direct.close();
      }
    }),
  ));

test("the event stream never hands out an event twice", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const direct = new Client({ host: http(), apiKey: key });
      const sb = await direct.sandboxes.create({ persistent: true });
      try {
        await sb.stop();
        const want = (await sb.events().toArray()).map((e) => e.id);
        assert.ok(want.length >= 2);
        const px = await Proxy.to(http(), ["cut-after-event", "replay"]);
        const c = new Client({ host: px.url, apiKey: key, sleep: recorder().sleep });
        try {
          assert.deepEqual(await streamIds(c, sb.id, want.length), want);
        } finally {
          c.close();
          await px.close();
        }
        assert.equal(px.seen[1].headers["last-event-id"], String(want[0]));
      } finally {
        await sb.delete({ force: true });
        direct.close();
      }
    }),
  ));

test("the event stream from an id", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create();
    try {
      await sb.touch();
      await sb.stop();
      const evs = await sb.events().toArray();
      const got = [];
      for await (const ev of c.events.stream({ sandbox: sb.id, after: evs[0].id })) {
        got.push(ev.id);
        if (got.length === evs.length - 1) break;
      }
      assert.deepEqual(got, evs.slice(1).map((e) => e.id));
    } finally {
      await sb.delete({ force: true });
    }
  }));

test("Retry-After is honoured, then the backoff", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const px = await Proxy.to(http(), ["429:1", "503", "pass"]);
      const r = recorder();
      const c = new Client({ host: px.url, apiKey: key, sleep: r.sleep });
      try {
        assert.ok(Array.isArray(await c.sandboxes.list().toArray()));
      } finally {
        c.close();
        await px.close();
      }
      assert.equal(px.seen.length, 3);
      assert.deepEqual(r.got, [1, 0.5]); // Retry-After, then the backoff of a 503 without one
    }),
  ));

test("a Retry-After past maxRetryWait is the error, with its fields", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const px = await Proxy.to(http(), ["429:120"]);
      const r = recorder();
      const c = new Client({ host: px.url, apiKey: key, sleep: r.sleep, maxRetryWait: 30 });
      try {
        await assert.rejects(c.version(), (e) => {
          assert.ok(e instanceof RateLimitedError);
          assert.equal(e.status, 429);
          assert.equal(e.code, "rate_limited");
          assert.equal(e.retryAfter, 120);
          assert.equal(e.requestId, "proxy-1");
          return true;
        });
      } finally {
        c.close();
        await px.close();
      }
      assert.equal(px.seen.length, 1);
      assert.deepEqual(r.got, []);
    }),
  ));

test("retries give up after maxRetries", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const px = await Proxy.to(http(), Array(10).fill("503"));
      const r = recorder();
      const c = new Client({ host: px.url, apiKey: key, sleep: r.sleep, maxRetries: 2 });
      try {
        await assert.rejects(c.version(), UnavailableError);
      } finally {
        c.close();
        await px.close();
      }
      assert.equal(px.seen.length, 3);
      assert.equal(r.got.length, 2);
    }),
  ));

test("a dropped create is retried with the same Idempotency-Key and makes one sandbox", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const label = unique("idem");
      const px = await Proxy.to(http(), ["drop", "pass"]);
      const c = new Client({ host: px.url, apiKey: key, sleep: recorder().sleep });
      let sb;
      try {
        sb = await c.sandboxes.create({ labels: { run: label } });
      } finally {
        c.close();
        await px.close();
      }
      const direct = new Client({ host: http(), apiKey: key });
      try {
        const posts = px.seen.filter((s) => s.method === "POST");
        assert.equal(posts.length, 2);
        assert.ok(posts[0].headers["idempotency-key"]);
        assert.equal(posts[0].headers["idempotency-key"], posts[1].headers["idempotency-key"]);
        const mine = (await direct.sandboxes.list().toArray()).filter((s) => s.info.labels?.run === label);
        assert.deepEqual(mine.map((s) => s.id), [sb.id]);
      } finally {
        await direct.sandboxes.delete(sb.id, { force: true });
        direct.close();
      }
    }),
  ));

test("a dropped exec (no Idempotency-Key) is not sent again", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const direct = new Client({ host: http(), apiKey: key });
      const sb = await direct.sandboxes.create();
      try {
        const px = await Proxy.to(http(), ["drop"]);
        const c = new Client({ host: px.url, apiKey: key, sleep: recorder().sleep });
        try {
          const same = new Sandbox(c, sb.info);
          await assert.rejects(same.exec("touch /tmp/ran"), (e) => e instanceof TransportError && e.code === "transport");
        } finally {
          c.close();
          await px.close();
        }
        assert.equal(px.seen.filter((s) => s.method === "POST").length, 1);
      } finally {
        await sb.delete({ force: true });
        direct.close();
      }
    }),
  ));

test("an exec stream cut before its exit is a StreamError, and the exec is not sent again", () =>
  withClient((admin) =>
    withTenantKey(admin, "admin", async (key) => {
      const direct = new Client({ host: http(), apiKey: key });
      const sb = await direct.sandboxes.create();
      try {
        const px = await Proxy.to(http(), ["cut-after-line"]);
        const c = new Client({ host: px.url, apiKey: key, sleep: recorder().sleep });
        try {
          const got = [];
          await assert.rejects(
            (async () => {
              for await (const ev of new Sandbox(c, sb.info).execStream("echo first; sleep 1; echo second")) got.push(ev);
            })(),
            (e) => e instanceof StreamError && e.code === "stream",
          );
          assert.equal(got.length, 1);
          assert.equal(got[0].data.toString(), "first\n");
        } finally {
          c.close();
          await px.close();
        }
        assert.equal(px.seen.length, 1);
      } finally {
        await sb.delete({ force: true });
        direct.close();
      }
    }),
  ));

test("TLS: a pinned fingerprint, a CA file, and a wrong pin that never sends the key", async () => {
  const https = need("BERTH_TEST_HTTPS");
  const fp = need("BERTH_TEST_TLS_FINGERPRINT");
  await withClient(async (admin) => {
    await withTenantKey(admin, "member", async (key) => {
      const pinned = new Client({ host: https, apiKey: key, tlsFingerprint: fp });
      try {
        assert.ok((await pinned.version()).tls_fingerprint === fp);
        assert.ok(Array.isArray(await pinned.sandboxes.list().toArray()));
      } finally {
        pinned.close();
      }
      const colons = "sha256:" + parseFingerprint(fp).toString("hex").match(/../g).join(":");
      const pinned2 = new Client({ host: https, apiKey: key, tlsFingerprint: colons.toUpperCase().replace("SHA256", "sha256") });
      try {
        assert.ok(await pinned2.health());
      } finally {
        pinned2.close();
      }
      const ca = new Client({ host: https, apiKey: key, tlsCa: need("BERTH_TEST_TLS_CA") });
      try {
        assert.ok(await ca.health());
      } finally {
        ca.close();
      }
      const wrong = "sha256:" + "00".repeat(32);
      const bad = new Client({ host: https, apiKey: key, tlsFingerprint: wrong });
      try {
        await assert.rejects(bad.version(), (e) => {
          assert.ok(e instanceof FingerprintError, String(e));
          assert.equal(e.code, "tls_fingerprint");
          assert.equal(e.got, fp);
          assert.equal(e.want, wrong);
          return true;
        });
      } finally {
        bad.close();
      }
      // No pin and no CA: the self-signed certificate is refused, at once.
      const r = recorder();
      const plain = new Client({ host: https, apiKey: key, sleep: r.sleep });
      try {
        await assert.rejects(plain.version(), (e) => e instanceof ConnectError && /SELF_SIGNED|self-signed|certificate/i.test(e.message));
        assert.deepEqual(r.got, []);
      } finally {
        plain.close();
      }
    });
  });
  assert.throws(() => new Client({ host: http(), tlsFingerprint: fp }), /needs an https/);
  assert.throws(() => new Client({ host: https, tlsFingerprint: "md5:00" }), /invalid TLS fingerprint/);
});

test("connection and credential errors", async () => {
  const c = new Client({ host: "unix:///nonexistent/berth.sock" });
  await assert.rejects(c.version(), (e) => e instanceof ConnectError && e.code === "connect" && /BERTH_HOST/.test(e.message));
  c.close();
  const bad = new Client({ host: http(), apiKey: "berth_not-a-key" });
  try {
    await assert.rejects(bad.sandboxes.list().toArray(), (e) => e instanceof UnauthenticatedError && e.status === 401);
  } finally {
    bad.close();
  }
  assert.throws(() => new Client({ host: "ftp://x" }), /scheme must be unix, http or https/);
});

test("TLS: the pin is checked before the request, and so the key, is written", async () => {
  // A TLS server of our own with the daemon's certificate records every
  // byte a client sends once the handshake is done.
  const dir = dirname(need("BERTH_TEST_TLS_CA"));
  const cert = readFileSync(join(dir, "cert.pem"));
  const got = [];
  const server = tls.createServer({ cert, key: readFileSync(join(dir, "key.pem")) }, (s) => {
    s.on("data", (b) => got.push(b));
    s.on("error", () => {});
    s.on("end", () => s.end());
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const host = `https://127.0.0.1:${server.address().port}`;
  const der = Buffer.from(cert.toString().replace(/-----[^-]+-----|\s/g, ""), "base64");
  try {
    const bad = new Client({ host, apiKey: "berth_secret-key", tlsFingerprint: "sha256:" + "ab".repeat(32), maxRetries: 0 });
    await assert.rejects(bad.version(), FingerprintError);
    bad.close();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(Buffer.concat(got).length, 0, "a request was written to a connection whose pin did not match");
    // The right pin: the request, key and all, arrives (the server never
    // answers, so the call times out).
    const good = new Client({ host, apiKey: "berth_secret-key", tlsFingerprint: fingerprintOf(der), maxRetries: 0, timeout: 0.5 });
    await assert.rejects(good.version(), TransportError);
    good.close();
    assert.match(Buffer.concat(got).toString(), /^GET \/v1\/version HTTP\/1.1\r\n[\s\S]*authorization: Bearer berth_secret-key/i);
  } finally {
    server.close();
  }
});
