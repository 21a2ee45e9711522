// Builds the console's sources (src/, public/) into ../assets, the files
// the daemon embeds (internal/console, go:embed). The output is committed;
// `node build.mjs --check` builds into memory and fails if it differs from
// what is committed (make lint runs it), so the embedded files are always
// what these sources and package-lock.json make. The build is
// deterministic: esbuild is pinned, no timestamps, no absolute paths, no
// source maps (a browser would ask the daemon for them).
import { build } from "esbuild";
import { readFileSync, readdirSync, rmSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "assets");
const check = process.argv.includes("--check");

// Everything from the API is rendered as text: no source may write markup.
for (const f of readdirSync(join(here, "src"), { recursive: true })) {
  if (!/\.(ts|tsx)$/.test(f)) continue;
  const src = readFileSync(join(here, "src", f), "utf8");
  if (/dangerouslySetInnerHTML|innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/.test(src)) {
    console.error(`src/${f} writes markup or evaluates code: the console renders text only (docs/console.md)`);
    process.exit(1);
  }
}

const result = await build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  format: "iife",
  target: ["chrome110", "firefox115", "safari16"],
  minify: true,
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none", // the licences go to LICENSES.txt
  charset: "utf8",
  write: false,
  outdir: out,
  logLevel: "warning",
});

// What the bundle holds from npm, with each package's licence.
const bundled = ["preact", "@xterm/xterm", "@xterm/addon-fit"];
let licences = "Third-party code in app.js and app.css (bundled from npm at build time):\n";
for (const name of bundled) {
  const dir = join(here, "node_modules", name);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  licences += `\n==== ${name} ${pkg.version} (${pkg.license}) ====\n\n` + readFileSync(join(dir, "LICENSE"), "utf8").trim() + "\n";
}

const files = new Map();
for (const f of result.outputFiles) files.set(f.path.slice(out.length + 1), Buffer.from(f.contents));
for (const f of readdirSync(join(here, "public"))) files.set(f, readFileSync(join(here, "public", f)));
files.set("LICENSES.txt", Buffer.from(licences));

if (check) {
  const have = existsSync(out) ? readdirSync(out) : [];
  const bad = [];
  for (const [name, b] of files) {
    if (!have.includes(name) || !readFileSync(join(out, name)).equals(b)) bad.push(name);
  }
  for (const name of have) if (!files.has(name)) bad.push(name + " (not built)");
  if (bad.length) {
    console.error(`internal/console/assets differs from a fresh build of internal/console/web: ${bad.join(", ")}\n` +
      "run: make console (or cd internal/console/web && npm ci && node build.mjs) and commit the result");
    process.exit(1);
  }
  console.log(`internal/console/assets matches its sources (${files.size} files)`);
} else {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  for (const [name, b] of files) writeFileSync(join(out, name), b);
  console.log(`built ${[...files.keys()].join(", ")} into ${out}`);
}
