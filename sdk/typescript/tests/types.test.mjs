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

test("src/index.d.ts declares what src/index.js has, no more and no less", async () => {
  const ts = (await import("typescript")).default;
  const sdk = await import("../src/index.js");
  const file = join(root, "src", "index.d.ts");
  const { readFileSync } = await import("node:fs");
  const src = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const client = new sdk.Client({ host: "unix:///nonexistent/berth.sock" });
  const sb = new sdk.Sandbox(client, { id: "x" });
  // Where each declared class's members are found at run time.
  const instances = {
    Client: client,
    Sandbox: sb,
    Sandboxes: client.sandboxes,
    Files: sb.files,
    Processes: sb.processes,
    Network: sb.network,
    Snapshots: client.snapshots,
    Templates: client.templates,
    Volumes: client.volumes,
    Secrets: client.secrets,
    Events: client.events,
    Audit: client.audit,
    Keys: client.keys,
    Tenants: client.tenants,
    Quotas: client.quotas,
    ExecResult: new sdk.ExecResult({ code: 0 }, Buffer.alloc(0), Buffer.alloc(0)),
    Pty: new sdk.Pty({}, {}, "/"),
    PageIterator: new sdk.PageIterator(async () => ({ items: [], nextCursor: "" }), (x) => x),
  };
  const missing = [];
  let checked = 0;
  for (const st of src.statements) {
    const exported = st.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
    const name = st.name?.text ?? st.declarationList?.declarations[0].name.text;
    if (exported && (ts.isClassDeclaration(st) || ts.isFunctionDeclaration(st) || ts.isVariableStatement(st))) {
      if (!(name in sdk) && !(name in instances)) missing.push(`export ${name}`);
    }
    if (!ts.isClassDeclaration(st) || !(name in instances)) continue;
    const declared = new Set(st.members.filter((m) => m.name && !ts.isComputedPropertyName(m.name)).map((m) => m.name.text));
    for (const k of Object.getOwnPropertyNames(Object.getPrototypeOf(instances[name]))) {
      if (k !== "constructor" && !k.startsWith("_") && !declared.has(k)) missing.push(`undeclared ${name}.${k}`);
    }
    for (const m of st.members) {
      if (ts.isConstructorDeclaration(m) || !m.name) continue;
      let key = m.name.text;
      if (ts.isComputedPropertyName(m.name)) {
        key = m.name.expression.getText() === "Symbol.asyncDispose" ? Symbol.asyncDispose : Symbol.asyncIterator;
      }
      const optional = Boolean(m.questionToken);
      checked++;
      if (!optional && !(key in instances[name])) missing.push(`${name}.${String(key)}`);
    }
  }
  client.close();
  assert.deepEqual(missing, []);
  assert.ok(checked > 100, `only ${checked} members checked`);
});
