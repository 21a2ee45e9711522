// The examples (sdk/typescript/examples) run as tests against the daemon:
// imported (their main) and, for one, run as a program the way its header says.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { withClient } from "./helpers.mjs";
import * as forkArtefacts from "../examples/fork_artefacts.mjs";
import * as persistentWorkspace from "../examples/persistent_workspace.mjs";
import * as runCode from "../examples/run_code.mjs";

const examples = join(dirname(fileURLToPath(import.meta.url)), "..", "examples");

test("run_code", () =>
  withClient(async (c) => {
    let printed = "";
    const primes = await runCode.main(c, { write: (b) => (printed += b.toString()) });
    assert.deepEqual(primes.slice(0, 5), [2, 3, 5, 7, 11]);
    assert.equal(primes.length, 17);
    assert.match(printed, /found 17 primes/);
  }));

test("run_code as a program", async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [join(examples, "run_code.mjs")], { env: process.env });
  assert.match(stdout, /found 17 primes\n\[\s*2,/);
});

test("persistent_workspace", () =>
  withClient(async (c) => {
    assert.equal(await persistentWorkspace.main(c), "step 1 done\nstep 2 done\n");
  }));

test("fork_artefacts", () =>
  withClient(async (c) => {
    const got = await forkArtefacts.main(c, 3);
    assert.deepEqual(Object.values(got).sort((a, b) => a - b), [5050, 10100, 15150]);
    assert.equal(Object.keys(got).length, 3);
    const left = (await c.sandboxes.list().toArray()).filter((s) => s.info.labels?.example === "fork");
    assert.deepEqual(left, []);
  }));
