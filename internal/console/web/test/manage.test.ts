// Unit tests of the templates page's and the sandbox page's pure logic:
// the build context's tar archive, the live log of an import or a build,
// the forks-and-snapshots tree.
import assert from "node:assert/strict";
import { test } from "node:test";
import { rootOf, treeRows, type Known } from "../src/lineage";
import { contextOf, dockerfileQuery } from "../src/pages/templates";
import { feed, startProgress } from "../src/progress";
import { tar, tarPath } from "../src/tar";
import type { Sandbox, Snapshot } from "../src/types";

const dec = new TextDecoder();
const field = (b: Uint8Array, off: number, len: number) => dec.decode(b.subarray(off, off + len)).replace(/\0.*$/s, "");

/** The entries of a ustar archive, read back as tar(1) would. */
function untar(b: Uint8Array): { name: string; body: string }[] {
  const out = [];
  for (let off = 0; off + 512 <= b.length; ) {
    const h = b.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break;
    let sum = 0;
    h.forEach((x, i) => (sum += i >= 148 && i < 156 ? 32 : x));
    assert.equal(parseInt(field(h, 148, 8), 8), sum, "checksum");
    assert.equal(field(h, 257, 6), "ustar");
    const size = parseInt(field(h, 124, 12), 8);
    const prefix = field(h, 345, 155);
    const name = (prefix ? prefix + "/" : "") + field(h, 0, 100);
    out.push({ name, body: dec.decode(b.subarray(off + 512, off + 512 + size)) });
    off += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

test("tar: entries, long names, the end blocks", () => {
  const long = "a/".repeat(60) + "file.txt";
  const b = tar([
    { name: "Dockerfile", data: new TextEncoder().encode("FROM base\n") },
    { name: "./src/app.py", data: new TextEncoder().encode("x".repeat(513)) },
    { name: long, data: new Uint8Array() },
  ]);
  assert.equal(b.length % 512, 0);
  assert.ok(b.subarray(b.length - 1024).every((x) => x === 0), "two zero blocks end it");
  assert.deepEqual(untar(b), [
    { name: "Dockerfile", body: "FROM base\n" },
    { name: "src/app.py", body: "x".repeat(513) },
    { name: long, body: "" },
  ]);
  assert.throws(() => tarPath("../etc/passwd"), /leaves the context/);
  assert.throws(() => tarPath("a/../../b"), /leaves the context/);
  assert.throws(() => tarPath("/"), /no name/);
  assert.equal(tarPath("/abs//x/./y"), "abs/x/y");
});

test("the build context: typed Dockerfile over picked files, a folder's files under it", async () => {
  const bytes = (s: string) => async () => new TextEncoder().encode(s);
  const b = await contextOf("FROM base\nCOPY app.py /\n", [
    { name: "app.py", path: "proj/app.py", bytes: bytes("print(1)") },
    { name: "Dockerfile", path: "proj/Dockerfile", bytes: bytes("FROM other") },
  ]);
  assert.deepEqual(untar(b).map((e) => e.name + "=" + e.body), ["app.py=print(1)", "Dockerfile=FROM base\nCOPY app.py /\n"]);
  const picked = await contextOf("", [{ name: "Dockerfile", bytes: bytes("FROM base") }]);
  assert.deepEqual(untar(picked).map((e) => e.name), ["Dockerfile"]);
  await assert.rejects(contextOf("  ", [{ name: "x", bytes: bytes("") }]), /no Dockerfile/);
  assert.equal(dockerfileQuery("none", "a.example"), "network=none");
  assert.equal(dockerfileQuery("egress", "a.example, :443  10.0.0.0/8"), "network=egress&allow=a.example&allow=%3A443&allow=10.0.0.0%2F8");
});

test("the live log: layers in place, output across chunks and steps, the end", () => {
  const b64 = (s: string) => btoa(s);
  let p = startProgress();
  p = feed(p, { progress: { layer: 1, layers: 2, digest: "sha256:0123456789abcdef", bytes: 1024, size: 4096 } });
  p = feed(p, { progress: { layer: 2, layers: 2, digest: "sha256:fedcba", bytes: 0, cached: true } });
  p = feed(p, { progress: { layer: 1, layers: 2, digest: "sha256:0123456789abcdef", bytes: 4096, done: true } });
  assert.deepEqual(p.lines, ["layer 1 of 2 (0123456789ab): done, 4 KiB", "layer 2 of 2 (fedcba): already stored"]);
  let q = startProgress();
  q = feed(q, { step: 1, stream: "stdout", data: b64("hel") });
  q = feed(q, { step: 1, stream: "stdout", data: b64("lo\nwor") });
  q = feed(q, { step: 1, stream: "stderr", data: b64("ld\n") });
  q = feed(q, { step: 1, stream: "stdout", data: b64("no newline") });
  q = feed(q, { step: 2, stream: "stdout", data: b64("42\n") });
  assert.deepEqual(q.lines, ["hello", "world", "no newline", "42"]);
  const done = feed(q, { step: 2, template: { name: "t" } as never });
  assert.equal(done.template?.name, "t");
  assert.equal(q.template, undefined, "feed leaves its input alone");
  assert.equal(feed(q, { step: 2, error: { code: "build_failed", message: "step 2 exited with 7" } }).error, "step 2 exited with 7");
});

test("the forks-and-snapshots tree", () => {
  const sb = (id: string, parent?: string, children: string[] = []) => ({ id, name: id, state: "running", lineage: { parent, children } }) as unknown as Sandbox;
  const snap = (id: string) => ({ id, name: "s-" + id }) as Snapshot;
  const known = new Map<string, Known>([
    ["root", { sb: sb("root", undefined, ["a", "b"]), snaps: [snap("r1")] }],
    ["a", { sb: sb("a", "root", ["a1"]), snaps: [] }],
    ["a1", { sb: sb("a1", "a"), snaps: [snap("x1"), snap("x2")] }],
    ["b", { sb: null, snaps: [] }],
  ]);
  assert.equal(rootOf("a1", known), "root");
  const rows = treeRows("root", known, "a1");
  assert.deepEqual(rows.map((r) => r.depth + ":" + r.kind + ":" + r.id + (r.current ? "*" : "")), [
    "0:sandbox:root", "1:sandbox:a", "2:sandbox:a1*", "3:snapshot:x1", "3:snapshot:x2", "1:sandbox:b", "1:snapshot:r1",
  ]);
  // A child not fetched is named, a cycle does not loop, the rows are bounded.
  known.set("a1", { sb: sb("a1", "a", ["zz", "root"]), snaps: [] });
  assert.deepEqual(treeRows("root", known, "a").map((r) => r.kind + ":" + r.id), [
    "sandbox:root", "sandbox:a", "sandbox:a1", "more:zz", "sandbox:b", "snapshot:r1",
  ]);
  assert.equal(treeRows("root", known, "a", 3).length, 3);
  assert.equal(rootOf("a", new Map([["a", { sb: sb("a", "gone"), snaps: [] }]])), "a");
});
