// Runs test/*.test.ts: esbuild bundles each for node, then node's own test
// runner runs them (no test framework to install).
import { build } from "esbuild";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = mkdtempSync(join(tmpdir(), "berth-console-test-"));
try {
  const entries = readdirSync(join(here, "test")).filter((f) => f.endsWith(".test.ts")).map((f) => join("test", f));
  await build({ absWorkingDir: here, entryPoints: entries, bundle: true, platform: "node", format: "esm", outdir: out,
    outExtension: { ".js": ".mjs" }, jsx: "automatic", jsxImportSource: "preact", logLevel: "warning" });
  const files = readdirSync(out).map((f) => join(out, f));
  const r = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
  process.exitCode = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
