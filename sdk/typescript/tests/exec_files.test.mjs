// Exec (streaming output, stdin, exit status), run, files and background processes.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createReadStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Client, ExecResult, NotFoundError, Sandbox, UnauthenticatedError } from "../src/index.js";
import "./helpers.mjs";

let c;
let sb;
before(async () => {
  c = new Client();
  sb = await c.sandboxes.create();
});
after(async () => {
  await sb?.[Symbol.asyncDispose]();
  c.close();
});

test("exec streams output frames as they come, then the exit", async () => {
  const frames = [];
  for await (const ev of sb.execStream(["sh", "-c", "printf one; sleep 0.3; printf two >&2; sleep 0.3; printf three; exit 7"])) {
    frames.push(ev);
  }
  const data = frames.filter((f) => f.data);
  assert.ok(data.length >= 3, JSON.stringify(frames));
  assert.ok(data.every((f) => Buffer.isBuffer(f.data)));
  assert.equal(Buffer.concat(data.filter((f) => f.stream === "stdout").map((f) => f.data)).toString(), "onethree");
  assert.equal(Buffer.concat(data.filter((f) => f.stream === "stderr").map((f) => f.data)).toString(), "two");
  assert.equal(frames.at(-1).exit.code, 7);
  // in order: "two" came between the stdout frames
  const order = data.map((f) => f.data.toString()).join("|");
  assert.ok(order.indexOf("one") < order.indexOf("two") && order.indexOf("two") < order.indexOf("three"), order);
});

test("exec with stdin, env, workdir, binary output and callbacks", async () => {
  const seen = [];
  const r = await sb.exec(["sh", "-c", "cat; echo \"$A\"; pwd; printf '\\000\\377'"], {
    stdin: "in-put\n",
    env: { A: "b" },
    workdir: "/tmp",
    onStdout: (b) => seen.push(b),
  });
  assert.ok(r instanceof ExecResult);
  assert.equal(r.exitCode, 0);
  assert.deepEqual(r.stdout, Buffer.concat([Buffer.from("in-put\nb\n/tmp\n"), Buffer.from([0, 255])]));
  assert.deepEqual(Buffer.concat(seen), r.stdout);
  const bad = await sb.exec("exit 3");
  assert.equal(bad.exitCode, 3);
  const to = await sb.exec("sleep 30", { timeout: 1 });
  assert.ok(to.exit.timed_out, JSON.stringify(to.exit));
});

test("an exec stream broken off by the caller stops cleanly", async () => {
  let n = 0;
  for await (const ev of sb.execStream("yes | head -c 1000000")) {
    if (ev.data && ++n === 2) break;
  }
  assert.equal(n, 2);
  assert.equal((await sb.exec("echo still")).text, "still\n");
});

test("run: a one-shot sandbox that is gone afterwards", async () => {
  const r = await c.run("echo -n ran; echo oops >&2", { sandbox: { labels: { kind: "oneshot" } } });
  assert.equal(r.text, "ran");
  assert.equal(r.stderr.toString(), "oops\n");
  assert.ok(r.sandboxId);
  // A one-shot sandbox may still run a moment after its stream ends.
  for (let i = 0; i < 100; i++) {
    const s = await c.sandboxes.get(r.sandboxId).catch((e) => (e instanceof NotFoundError ? null : Promise.reject(e)));
    if (!s || s.state === "deleted") return;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.fail("the run's sandbox was not deleted");
});

test("files: write, read, stat, list, mkdir, move, remove, mode, tar", async () => {
  await sb.files.mkdir("/tmp/w");
  await sb.files.write("/tmp/w/a.txt", "alpha", { mode: 0o640 });
  assert.equal((await sb.files.read("/tmp/w/a.txt")).toString(), "alpha");
  assert.equal(await sb.files.mode("/tmp/w/a.txt"), 0o640);
  const st = await sb.files.stat("/tmp/w/a.txt");
  assert.equal(st.size, 5);
  await sb.files.mkdir("/tmp/w/sub/deeper", { parents: true });
  await sb.files.write("/tmp/w/bin", Buffer.from([0, 1, 2, 255]));
  assert.deepEqual(await sb.files.read("/tmp/w/bin"), Buffer.from([0, 1, 2, 255]));
  const names = (await sb.files.list("/tmp/w")).map((f) => f.name).sort();
  assert.deepEqual(names, ["a.txt", "bin", "sub"]);
  await sb.files.move("/tmp/w/a.txt", "/tmp/w/sub/b.txt");
  await assert.rejects(sb.files.stat("/tmp/w/a.txt"), NotFoundError);
  const chunks = [];
  for await (const ch of sb.files.readStream("/tmp/w/sub/b.txt")) chunks.push(ch);
  assert.equal(Buffer.concat(chunks).toString(), "alpha");
  const tar = await sb.files.readTar("/tmp/w");
  assert.ok(tar.length >= 1024 && tar.length % 512 === 0);
  await sb.files.mkdir("/tmp/copy");
  await sb.files.writeTar("/tmp/copy", tar);
  assert.equal((await sb.exec("find /tmp/copy -name b.txt | xargs cat")).text, "alpha");
  assert.ok((await sb.export(["/tmp/w/bin"])).length >= 1024);
  await sb.files.remove("/tmp/w", { recursive: true });
  await assert.rejects(sb.files.stat("/tmp/w"), (e) => e instanceof NotFoundError && e.code === "not_found");
});

test("background processes: start, list, get, logs, stdin, signal, kill, wait", async () => {
  const p = await sb.processes.start("read line; echo got:$line; echo err >&2; exec sleep 600", { tag: "bg" });
  assert.ok(p.id && p.pid > 0);
  assert.ok((await sb.processes.list()).some((x) => x.id === p.id));
  assert.equal((await sb.processes.get(p.id)).tag, "bg");
  await sb.processes.stdin(p.id, "hello\n");
  let out;
  for (let i = 0; i < 100; i++) {
    out = await sb.processes.logs(p.id);
    if (out.stdout.toString().includes("got:hello") && out.stderr.length) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(out.stdout.toString(), "got:hello\n");
  assert.equal(out.stderr.toString(), "err\n");
  assert.equal(out.exit, undefined);
  await sb.processes.kill(p.id);
  const ex = await sb.processes.wait(p.id);
  assert.notEqual(ex.code, 0);
  const followed = await sb.processes.logs(p.id, { follow: true });
  assert.equal(followed.exit.code, ex.code);

  const q = await sb.processes.start(["sh", "-c", "cat; exit 4"]);
  await sb.processes.stdin(q.id, "bye", { close: true });
  assert.equal((await sb.processes.wait(q.id)).code, 4);
  assert.equal((await sb.processes.logs(q.id, { follow: true })).stdout.toString(), "bye");

  const r = await sb.processes.start("trap 'exit 9' TERM; while :; do sleep 0.1; done");
  await new Promise((res) => setTimeout(res, 300));
  await sb.processes.signal(r.id, "TERM");
  assert.equal((await sb.processes.wait(r.id)).code, 9);
});

test("files.watch: ready, the changes, and the end when the directory goes", async () => {
  await sb.files.mkdir("/tmp/watched");
  let it = sb.files.watch("/tmp/watched")[Symbol.asyncIterator]();
  assert.equal((await it.next()).value.type, "ready");
  await sb.files.write("/tmp/watched/new.txt", "x");
  const seen = [];
  for (let r = await it.next(); !r.done; r = await it.next()) {
    seen.push([r.value.type, r.value.path]);
    if (r.value.type === "write") break;
  }
  // The daemon writes a temp file and renames it into place.
  assert.deepEqual(seen.at(-1), ["write", "/tmp/watched/new.txt"]);
  assert.ok(seen.every(([t]) => ["create", "write", "rename"].includes(t)), JSON.stringify(seen));
  await it.return();
  it = sb.files.watch("/tmp/watched")[Symbol.asyncIterator]();
  assert.equal((await it.next()).value.type, "ready");
  await sb.files.remove("/tmp/watched", { recursive: true });
  const rest = [];
  for (let r = await it.next(); !r.done; r = await it.next()) rest.push([r.value.type, r.value.path]);
  assert.deepEqual(rest, [["remove", "/tmp/watched/new.txt"]]);
});

test("port tokens and leases", async () => {
  const tok = await sb.portToken(8080, { ttlSeconds: 300 });
  assert.equal(tok.port, 8080);
  assert.equal(tok.sandbox_id, sb.id);
  assert.ok(tok.token);
  assert.deepEqual((await sb.portTokens()).map((t) => t.id), [tok.id]);
  const revoked = await sb.revokePortToken(tok.id);
  assert.equal(revoked.id, tok.id);
  assert.ok(revoked.revoked_at);
  const lease = await sb.lease(["exec"], { ttlSeconds: 600 });
  assert.equal(lease.sandbox_id, sb.id);
  assert.ok(lease.token);
  // The lease runs commands in its sandbox until it is revoked by itself.
  const lc = new Client({ host: process.env.BERTH_TEST_HTTP, apiKey: lease.token });
  try {
    const leased = new Sandbox(lc, sb.info);
    assert.equal((await leased.exec("echo leased")).text, "leased\n");
    await sb.revokeLease(lease.id);
    await assert.rejects(leased.exec("true"), UnauthenticatedError);
  } finally {
    lc.close();
  }
});

test("files.writeStream: an async generator and a file's read stream, as they come", async () => {
  const chunks = Array.from({ length: 64 }, (_, i) => Buffer.alloc(65536, i)); // 4 MiB
  async function* gen() {
    for (const ch of chunks) yield ch;
  }
  await sb.files.writeStream("/tmp/streamed", gen(), { mode: 0o640 });
  assert.equal((await sb.files.stat("/tmp/streamed")).size, 4 << 20);
  const want = createHash("sha256").update(Buffer.concat(chunks)).digest("hex");
  assert.equal((await sb.exec("sha256sum /tmp/streamed")).text.split(" ")[0], want);
  assert.equal(await sb.files.mode("/tmp/streamed"), 0o640);
  const dir = mkdtempSync(join(process.env.BERTH_TEST_TMP ?? tmpdir(), "ws-"));
  try {
    const src = join(dir, "src");
    writeFileSync(src, "from a file\n".repeat(1000));
    await sb.files.writeStream("/tmp/from-file", createReadStream(src));
    assert.deepEqual(await sb.files.read("/tmp/from-file"), readFileSync(src));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
