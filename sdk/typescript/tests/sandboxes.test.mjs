// Sandboxes: create with options, get, list (iterator and pages), delete,
// the lifecycle verbs, fork, snapshots, errors, and cleanup on exceptions.
import assert from "node:assert/strict";
import { test } from "node:test";

import { APIError, InvalidArgumentError, NotFoundError, Sandbox } from "../src/index.js";
import { unique, withClient } from "./helpers.mjs";

test("create with options, get, list, delete", () =>
  withClient(async (c) => {
    const label = unique("lbl");
    const sb = await c.sandboxes.create({
      name: unique("sb"),
      env: { GREETING: "hello" },
      labels: { run: label },
      resources: { cpus: 0.5, memory_bytes: 256 << 20, pids: 128 },
      timeout_seconds: 600,
    });
    try {
      assert.ok(sb instanceof Sandbox);
      assert.equal(sb.state, "running");
      assert.equal(sb.info.labels.run, label);
      assert.equal(sb.info.resources.pids, 128);
      const r = await sb.exec("echo $GREETING");
      assert.equal(r.text, "hello\n");
      const got = await c.sandboxes.get(sb.info.name);
      assert.equal(got.id, sb.id);
      const ids = [];
      for await (const s of c.sandboxes.list()) ids.push(s.id);
      assert.ok(ids.includes(sb.id));
    } finally {
      const gone = await c.sandboxes.delete(sb.id, { force: true });
      assert.equal(gone.id, sb.id);
    }
    assert.equal((await c.sandboxes.get(sb.id)).state, "deleted"); // its record is kept a while
  }));

test("list pages with a cursor, and as an async iterator across pages", () =>
  withClient(async (c) => {
    const made = [];
    try {
      for (let i = 0; i < 3; i++) made.push(await c.sandboxes.create());
      const seen = [];
      let cursor = "";
      let pages = 0;
      do {
        const p = await c.sandboxes.listPage({ limit: 1, cursor });
        assert.ok(p.items.length <= 1);
        seen.push(...p.items.map((s) => s.id));
        cursor = p.nextCursor;
        pages++;
      } while (cursor);
      assert.ok(pages >= 3);
      for (const sb of made) assert.ok(seen.includes(sb.id));
      assert.equal(new Set(seen).size, seen.length);
      const all = (await c.sandboxes.list().toArray()).map((s) => s.id);
      assert.deepEqual([...all].sort(), [...seen].sort());
    } finally {
      for (const sb of made) await sb.delete({ force: true });
    }
  }));

test("lifecycle verbs: stop, start, pause, resume, touch", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create({ persistent: true });
    try {
      assert.equal((await sb.stop({ timeout: 2 })).state, "stopped");
      assert.equal((await sb.start()).state, "running");
      assert.equal((await sb.pause()).state, "paused");
      assert.equal((await sb.resume()).state, "running");
      await sb.touch();
      assert.equal((await sb.refresh()).state, "running");
      await assert.rejects(sb.resume(), (e) => e instanceof APIError && e.code === "conflict" && e.status === 409 && e.requestId !== "");
    } finally {
      await sb.delete({ force: true });
    }
  }));

test("fork children share the parent's files", () =>
  withClient(async (c) => {
    const parent = await c.sandboxes.create();
    const kids = [];
    try {
      await parent.files.write("/tmp/seed", "from-parent");
      kids.push(...(await parent.fork(2, { labels: { role: "child" } })));
      assert.equal(kids.length, 2);
      for (const k of kids) {
        assert.notEqual(k.id, parent.id);
        assert.equal(k.info.labels.role, "child");
        assert.equal((await k.files.read("/tmp/seed")).toString(), "from-parent");
      }
    } finally {
      for (const k of kids) await k.delete({ force: true });
      await parent.delete({ force: true });
    }
  }));

test("snapshots: take, list, get, restore, delete", () =>
  withClient(async (c) => {
    const sb = await c.sandboxes.create({ persistent: true });
    try {
      await sb.files.write("/tmp/state", "one");
      const name = unique("snap");
      const snap = await sb.snapshot({ name });
      assert.equal(snap.name, name);
      assert.ok((await sb.snapshots().toArray()).some((s) => s.id === snap.id));
      assert.ok((await c.snapshots.list().toArray()).some((s) => s.id === snap.id));
      assert.equal((await c.snapshots.get(name)).id, snap.id);
      await sb.files.write("/tmp/state", "two");
      const restored = await c.snapshots.restore(snap.id);
      assert.equal(restored.id, sb.id);
      assert.equal((await sb.files.read("/tmp/state")).toString(), "one");
      await c.snapshots.delete(snap.id);
      await assert.rejects(c.snapshots.get(snap.id), NotFoundError);
    } finally {
      await sb.delete({ force: true });
    }
  }));

test("asyncDispose deletes the sandbox when the block throws", () =>
  withClient(async (c) => {
    let id;
    // What `await using sb = ...` compiles to (tests/types.test.mjs runs
    // the real syntax through tsc).
    await assert.rejects(async () => {
      const sb = await c.sandboxes.create();
      try {
        id = sb.id;
        throw new Error("boom");
      } finally {
        await sb[Symbol.asyncDispose]();
      }
    }, /boom/);
    assert.equal((await c.sandboxes.get(id)).state, "deleted");
  }));

test("bad input is a typed error with its stable code", () =>
  withClient(async (c) => {
    await assert.rejects(c.sandboxes.create({ resources: { cpus: -1 } }), (e) => {
      assert.ok(e instanceof InvalidArgumentError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.code, "invalid_argument");
      assert.ok(e.requestId);
      return true;
    });
    await assert.rejects(c.sandboxes.get("no-such-sandbox"), (e) => e instanceof NotFoundError && e.code === "not_found");
  }));
