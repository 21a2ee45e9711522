// Run code in a sandbox: write a script, run it, stream its output, read
// the file it made. The sandbox is deleted when the block ends (with
// TypeScript, or Node >= 24: `await using sb = await client.sandboxes.create()`).
//
//     BERTH_HOST=unix:///run/berth/berth.sock node run_code.mjs
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

const SCRIPT = `
import json, math
primes = [n for n in range(2, 60) if all(n % d for d in range(2, int(math.sqrt(n)) + 1))]
print("found", len(primes), "primes")
json.dump(primes, open("/tmp/primes.json", "w"))
`;

export async function main(client, out = process.stdout) {
  const sb = await client.sandboxes.create();
  try {
    await sb.files.write("/tmp/primes.py", SCRIPT);
    const result = await sb.exec(["python3", "/tmp/primes.py"], { onStdout: (b) => out.write(b) });
    if (result.exitCode !== 0) throw new Error("the script failed: " + result.stderr.toString());
    return JSON.parse((await sb.files.read("/tmp/primes.json")).toString());
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  console.log(await main(client));
  client.close();
}
