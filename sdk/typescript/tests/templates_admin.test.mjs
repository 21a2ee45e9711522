// Templates (build, Dockerfile, upload, import by path, apply, push's
// errors, pool reset), quarantine and release, the port proxy, copies
// between sandboxes, secret key rotation and attaching to a process.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { APIError, InvalidArgumentError } from "../src/index.js";
import { unique, withClient } from "./helpers.mjs";
import { dockerSave, tarOf } from "./tar.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("build streams its steps' output and makes a template", () =>
  withClient(async (c) => {
    const name = unique("built");
    const out = [];
    const tpl = await c.templates.build(name, "base", ["echo step one", "mkdir -p /opt && echo built > /opt/marker"], { onOutput: (ev) => out.push(ev) });
    try {
      assert.equal(tpl.name, name);
      assert.ok(out.some((ev) => ev.step === 1 && ev.data.toString().includes("step one")), JSON.stringify(out));
      const sb = await c.sandboxes.create({ template: name });
      try {
        assert.equal((await sb.files.read("/opt/marker")).toString(), "built\n");
      } finally {
        await sb.delete({ force: true });
      }
    } finally {
      await c.templates.delete(name);
    }
    await assert.rejects(c.templates.build(unique("bad"), "base", ["true", "exit 7"]), (e) => e instanceof APIError && /step 2/.test(e.message));
  }));

test("a Dockerfile build, and its refusal", () =>
  withClient(async (c) => {
    const name = unique("df");
    const ctx = tarOf({ Dockerfile: "FROM base\nCOPY hello.txt /srv/hello.txt\nRUN echo ran > /srv/ran\n", "hello.txt": "from the context\n" });
    await c.templates.buildDockerfile(name, ctx);
    try {
      const sb = await c.sandboxes.create({ template: name });
      try {
        assert.equal((await sb.exec("cat /srv/hello.txt /srv/ran")).text, "from the context\nran\n");
      } finally {
        await sb.delete({ force: true });
      }
    } finally {
      await c.templates.delete(name);
    }
    await assert.rejects(c.templates.buildDockerfile(unique("df"), tarOf({ Dockerfile: "FROM base\nHEALTHCHECK CMD true\n" })), InvalidArgumentError);
  }));

test("upload a docker-save tarball, then import it by path", () =>
  withClient(async (c) => {
    const archive = dockerSave({ hello: "from-image\n" });
    const name = unique("up");
    const progress = [];
    const tpl = await c.templates.upload(name, archive, { onProgress: (p) => progress.push(p) });
    const dir = await mkdtemp(join(tmpdir(), "berth-sdk-ts-"));
    try {
      assert.equal(tpl.layers.length, 1);
      assert.ok(progress.length && progress.at(-1).layers === 1, JSON.stringify(progress));
      await chmod(dir, 0o755);
      await writeFile(join(dir, "sdk.tar"), archive, { mode: 0o644 });
      const again = await c.templates.import(unique("path"), undefined, { path: join(dir, "sdk.tar") });
      try {
        assert.deepEqual(again.layers, tpl.layers);
      } finally {
        await c.templates.delete(again.name);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      await c.templates.delete(name);
    }
    await assert.rejects(c.templates.upload(unique("up"), Buffer.from("not a tarball")), APIError);
  }));

test("a push to a registry nobody listens on fails with the registry's error", () =>
  withClient(async (c) => {
    // Only an image of its own can be pushed: the builtin base is the host's /usr.
    await assert.rejects(c.templates.push("base", "127.0.0.1:1/sdk/base:1"), InvalidArgumentError);
    const name = unique("push");
    await c.templates.upload(name, dockerSave({ pushed: "yes\n" }));
    try {
      const progress = [];
      await assert.rejects(
        c.templates.push(name, "127.0.0.1:1/sdk/pushed:1", { insecure: true, onProgress: (p) => progress.push(p) }),
        (e) => e instanceof APIError && e.code === "registry_unreachable",
      );
    } finally {
      await c.templates.delete(name);
    }
  }));

test("apply builds once", () =>
  withClient(async (c) => {
    const name = unique("apply");
    const spec = `name: ${name}\nfrom: base\nsteps:\n  - run: echo applied > /etc/applied\n`;
    const tpl = await c.apply(spec);
    try {
      const again = await c.apply(spec);
      assert.deepEqual(again.layers, tpl.layers);
    } finally {
      await c.templates.delete(name);
    }
  }));

test("clearPool", () =>
  withClient(async (c) => {
    const name = unique("pool");
    await c.templates.build(name, "base", ["true"]);
    try {
      assert.equal((await c.templates.setPool(name, 1)).min, 1);
      const p = await c.templates.clearPool(name);
      assert.equal(p.min, 0);
      assert.ok(!p.auto);
    } finally {
      await c.templates.setPool(name, 0);
      await c.templates.delete(name);
    }
  }));

// step bounds one awaited call of a test, so that a call that never
// answers fails naming itself (and the test's cleanup still runs) instead
// of holding the suite until the harness kills it.
async function step(name, p, ms = 60_000) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${name}: no answer in ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

test("quarantine and release", () =>
  withClient(async (c) => {
    const a = await c.sandboxes.create();
    try {
      await step("write", a.files.write("/tmp/evidence", "kept"));
      assert.equal((await step("quarantine", a.quarantine())).state, "quarantined");
      assert.equal((await step("read while quarantined", a.files.read("/tmp/evidence"))).toString(), "kept");
      assert.equal((await step("release", a.release())).state, "running");
      assert.equal((await step("exec after release", a.exec("cat /tmp/evidence"))).text, "kept");
    } finally {
      await a.delete({ force: true });
    }
  }));

test("port requests through the proxy", () =>
  withClient(async (c) => {
    const a = await c.sandboxes.create();
    try {
      await step("exec", a.exec("mkdir -p /tmp/www && echo 'hello through the proxy' > /tmp/www/index.html"));
      await step("start httpd", a.processes.start(["busybox", "httpd", "-f", "-p", "8080", "-h", "/tmp/www"]));
      // Until httpd listens the proxy itself refuses (502 unreachable).
      let r;
      for (let i = 0; i < 200 && !r; i++) {
        try {
          r = await step("port request", a.portRequest(8080, "/index.html"), 20_000);
        } catch (e) {
          assert.equal(e.code, "unreachable", String(e));
          await sleep(50);
        }
      }
      assert.equal(r.status, 200);
      assert.equal(r.body.toString(), "hello through the proxy\n");
      assert.equal((await step("a 404 of the server", a.portRequest(8080, "/missing"))).status, 404);
      await assert.rejects(step("a port nobody listens on", a.portRequest(9, "/")), (e) => e instanceof APIError && (e.status === 502 || e.status === 503));
    } finally {
      await a.delete({ force: true });
    }
  }));

test("copies between sandboxes, and attach to a process", () =>
  withClient(async (c) => {
    const a = await c.sandboxes.create();
    const b = await c.sandboxes.create();
    try {
      await step("exec", a.exec("mkdir -p /tmp/out && echo artefact > /tmp/out/result.txt"));
      await step("copy", c.copy(a.id, "/tmp/out", b.id, "/tmp/in"));
      assert.equal((await step("read the copy", b.files.read("/tmp/in/result.txt"))).toString(), "artefact\n");

      const p = await step("start", b.processes.start(["sh", "-c", "echo started; read line; echo got $line"]));
      const t = await step("attach", b.processes.attach(p.id));
      try {
        await step("its kept output", t.readUntil("started\n"));
        await step("send", t.send("hello\n"));
        await step("its live output", t.readUntil("got hello\n"));
        assert.equal((await step("its exit", t.wait())).code, 0);
      } finally {
        t.close();
      }
    } finally {
      await a.delete({ force: true });
      await b.delete({ force: true });
    }
  }));

test("rotateKey re-wraps the stored secrets", () =>
  withClient(async (c) => {
    const name = unique("S").toUpperCase().replace(/-/g, "_");
    await c.secrets.set(name, "value-before-rotation");
    try {
      const r = await c.secrets.rotateKey(randomBytes(32).toString("base64"));
      assert.ok(r.key_id && r.rewrapped >= 1, JSON.stringify(r));
      assert.ok((await c.secrets.list().toArray()).some((s) => s.name === name));
      await assert.rejects(c.secrets.rotateKey("too short"), InvalidArgumentError);
    } finally {
      await c.secrets.delete(name);
    }
  }));
