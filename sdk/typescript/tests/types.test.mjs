// The declarations: tsc type-checks src/index.d.ts, src/models.d.ts and a
// program using them (tsconfig.json), then compiles that program — its
// `await using` lowered for Node 20 — and runs it against the daemon: the
// sandbox is deleted when the block throws.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import "./helpers.mjs";

const run = promisify(execFile);
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

test("the declarations type-check (tsc --noEmit)", async () => {
  await run(process.execPath, [tsc, "-p", join(root, "tsconfig.json")], { cwd: root }).catch((e) => {
    assert.fail(`tsc: ${e.stdout}${e.stderr}`);
  });
});

test("await using deletes the sandbox when the block throws (compiled TypeScript)", async () => {
  const out = join(root, "tests", "typed", "out");
  rmSync(out, { recursive: true, force: true });
  try {
    await run(process.execPath, [tsc, "-p", join(root, "tsconfig.json"), "--noEmit", "false", "--outDir", out, "--rootDir", join(root, "tests", "typed")], {
      cwd: root,
    }).catch((e) => assert.fail(`tsc: ${e.stdout}${e.stderr}`));
    const { stdout } = await run(process.execPath, [join(out, "dispose.js")], { cwd: root, env: process.env });
    const got = JSON.parse(stdout);
    assert.equal(got.thrown, "boom");
    assert.equal(got.state, "deleted");
    assert.equal(got.missing, "not_found");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
