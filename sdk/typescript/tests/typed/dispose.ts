// Compiled by tests/types.test.mjs with tsc (which type-checks it against
// src/index.d.ts and lowers `await using` for Node 20) and run: prints what
// it saw as JSON.
import { Client, NotFoundError, type Sandbox, type models } from "@berth-sh/sdk";

declare const console: { log(s: string): void };

async function main(): Promise<void> {
  await using client = new Client();
  let id = "";
  let thrown = "";
  try {
    await using sb: Sandbox = await client.sandboxes.create({ labels: { typed: "yes" } });
    id = sb.id;
    const r = await sb.exec(["sh", "-c", "echo typed"]);
    const exit: models.ExecExit = r.exit;
    if (exit.code !== 0 || r.text !== "typed\n") throw new Error(`exec: ${r.text}`);
    throw new Error("boom");
  } catch (e) {
    thrown = (e as Error).message;
  }
  const after = await client.sandboxes.get(id);
  let missing = "";
  try {
    await client.sandboxes.get("no-such-" + id);
  } catch (e) {
    if (e instanceof NotFoundError) missing = e.code;
  }
  console.log(JSON.stringify({ id, thrown, state: after.state, missing }));
}

await main();
