// The examples (sdk/typescript/examples) run as tests against the daemon:
// imported (their main) and, for one, run as a program the way its header says.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { need, withClient } from "./helpers.mjs";
import * as egressSecret from "../examples/egress_secret.mjs";
import * as forkArtefacts from "../examples/fork_artefacts.mjs";
import * as persistentWorkspace from "../examples/persistent_workspace.mjs";
import * as agentToolLoop from "../examples/agent_tool_loop.mjs";
import * as runCode from "../examples/run_code.mjs";
import * as warmPool from "../examples/warm_pool.mjs";

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

// Deno runs the SDK as it is (node:http and node:https, ws from
// node_modules): the same example as a Deno program, nothing fetched.
test("run_code as a Deno program", async () => {
  const denoDir = join(need("BERTH_TEST_TMP"), "deno-dir");
  const { stdout } = await promisify(execFile)("deno", ["run", "--allow-all", "--quiet", "--no-lock", join(examples, "run_code.mjs")], {
    env: { ...process.env, DENO_DIR: denoDir, DENO_NO_UPDATE_CHECK: "1" },
    cwd: dirname(examples),
  });
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

test("warm_pool", () =>
  withClient(async (c) => {
    const r = await warmPool.main(c, { template: "example-warm-ts", size: 2 });
    assert.equal(Object.keys(r.took).length, 2);
    assert.ok(r.pool.hits >= 2, JSON.stringify(r.pool)); // both creates were claims of warm members
    assert.ok(!(await c.templates.list().toArray()).some((t) => t.name === "example-warm-ts"));
  }));

test("agent_tool_loop with a scripted model", () =>
  withClient(async (c) => {
    const seen = [];
    const call = (id, code) => ({
      role: "assistant",
      content: null,
      tool_calls: [{ id, type: "function", function: { name: "run_python", arguments: JSON.stringify({ code }) } }],
    });
    const model = async (messages, tools) => {
      assert.equal(tools[0].function.name, "run_python");
      const tool = messages.filter((m) => m.role === "tool");
      seen.push(tool.length);
      // The second call reads the file the first wrote: one sandbox for the conversation.
      if (tool.length === 0) return call("c1", "a, b = 0, 1\nfor _ in range(20): a, b = b, a + b\nopen('/tmp/fib', 'w').write(str(a))\nprint(a)");
      if (tool.length === 1) return call("c2", "print(open('/tmp/fib').read())");
      const out = JSON.parse(tool.at(-1).content);
      assert.equal(out.exit_code, 0);
      return { role: "assistant", content: "The 20th Fibonacci number is " + out.stdout.trim() };
    };
    assert.equal(await agentToolLoop.main(c, "What is the 20th Fibonacci number?", model), "The 20th Fibonacci number is 6765");
    assert.deepEqual(seen, [0, 1, 2]);
    const left = (await c.sandboxes.list().toArray()).filter((s) => s.info.labels?.example === "agent");
    assert.deepEqual(left, []);
  }));

// The key reaches the API host (the test internet's, which answers 200 to
// its key alone and writes down each Authorization header it gets); the
// sandbox holds only the placeholder: not in its env, its processes'
// environments, /run/secrets or anything the call printed.
test("egress_secret", () =>
  withClient(async (c) => {
    const [host, key, seenFile] = ["BERTH_TEST_API_HOST", "BERTH_TEST_API_KEY", "BERTH_TEST_API_SEEN"].map(need);
    const seenLines = () => readFileSync(seenFile, "utf8").split("\n").filter(Boolean);
    const before = seenLines().length;
    let inside = "";
    const look = async (sb) => {
      inside = (await sb.exec("env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; cat /run/secrets/* /tmp/* 2>/dev/null; true")).text;
    };
    const r = await egressSecret.main(c, host, key, look);
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.deepEqual(JSON.parse(r.body), { user: "sdk-example", authorized: true });
    assert.match(r.placeholder, /^berth-secret-placeholder-/);
    const seen = seenLines().slice(before).map((l) => JSON.parse(l));
    assert.deepEqual(seen.map((s) => [s.host, s.authorization]), [[host, "Bearer " + key]]);
    assert.ok(inside.includes("EXAMPLE_API_KEY=" + r.placeholder), inside);
    for (const where of [inside, r.body, r.placeholder]) assert.ok(!where.includes(key));
    assert.ok(!(await c.secrets.list().toArray()).some((s) => s.name === "EXAMPLE_API_KEY"));
  }));
