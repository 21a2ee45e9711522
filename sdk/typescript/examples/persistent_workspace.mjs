// A persistent workspace: /workspace survives stop and start (and a daemon
// restart), so an agent can put its work down and pick it up later.
//
//     node persistent_workspace.mjs
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

export async function main(client) {
  const sb = await client.sandboxes.create({ persistent: true, labels: { example: "workspace" } });
  try {
    await sb.exec("mkdir -p /workspace/project && echo 'step 1 done' > /workspace/project/log.txt");
    await sb.stop(); // the sandbox's processes end; its workspace stays
    if ((await sb.refresh()).state !== "stopped") throw new Error(`not stopped: ${sb.state}`);
    await sb.start();
    await sb.exec("echo 'step 2 done' >> /workspace/project/log.txt");
    return (await sb.files.read("/workspace/project/log.txt")).toString();
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  process.stdout.write(await main(client));
  client.close();
}
