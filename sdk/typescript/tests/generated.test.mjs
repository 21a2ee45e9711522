// The generated files match api/openapi.json: regenerate in memory and
// compare, so a spec change without `node tools/gen-models.mjs` fails here.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { OUT_SCHEMAS, OUT_TYPES, SPEC, generate } from "../tools/gen-models.mjs";
import { SCHEMAS } from "../src/schemas.js";

test("src/models.d.ts and src/schemas.js are what the generator makes of the spec", () => {
  const { types, schemas } = generate();
  assert.ok(readFileSync(OUT_TYPES, "utf8") === types, "src/models.d.ts is stale: run node sdk/typescript/tools/gen-models.mjs");
  assert.ok(readFileSync(OUT_SCHEMAS, "utf8") === schemas, "src/schemas.js is stale: run node sdk/typescript/tools/gen-models.mjs");
});

test("every schema of the spec has its interface and its table", () => {
  const spec = JSON.parse(readFileSync(SPEC, "utf8"));
  const types = readFileSync(OUT_TYPES, "utf8");
  for (const [name, s] of Object.entries(spec.components.schemas)) {
    assert.ok(types.includes(`export interface ${name} {`), name);
    assert.deepEqual(Object.keys(SCHEMAS[name].props), Object.keys(s.properties ?? {}), name);
    assert.deepEqual(SCHEMAS[name].required, (s.required ?? []).filter((k) => k in (s.properties ?? {})), name);
  }
});

test("a drifted spec is noticed", async () => {
  const { mkdtempSync, writeFileSync, rmSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(join(process.env.BERTH_TEST_TMP || tmpdir(), "spec-"));
  try {
    const spec = JSON.parse(readFileSync(SPEC, "utf8"));
    spec.components.schemas.Sandbox.properties.new_field = { type: "string", description: "Added." };
    writeFileSync(join(dir, "openapi.json"), JSON.stringify(spec));
    const { types, schemas } = generate(join(dir, "openapi.json"));
    assert.notEqual(types, readFileSync(OUT_TYPES, "utf8"));
    assert.notEqual(schemas, readFileSync(OUT_SCHEMAS, "utf8"));
    assert.match(types, /\/\*\* Added\. \*\/\n  new_field\?: string;/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("strict mode refuses an answer the spec does not describe", async () => {
  const { check, setStrict, SpecMismatch } = await import("../src/wire.js");
  setStrict(true);
  assert.throws(() => check("ExecExit", { code: 0, surprise: 1 }), SpecMismatch);
  assert.throws(() => check("ExecExit", { signal: "KILL" }), SpecMismatch);
  assert.throws(() => check("ForkResponse", { children: [{ id: "x" }] }), SpecMismatch);
  const ok = { code: 0, timed_out: false, oom_killed: false, duration_ms: 1 };
  assert.deepEqual(check("ExecExit", ok), ok);
});

test("docs/sdk-typescript-reference.md is what the generator makes of the declarations", async () => {
  const { OUT, generate } = await import("../tools/gen-reference.mjs");
  assert.ok(readFileSync(OUT, "utf8") === generate(), "docs/sdk-typescript-reference.md is stale: run node sdk/typescript/tools/gen-reference.mjs");
});
