// A warm pool: keep sandboxes of a template started ahead (frozen, no CPU),
// so that a create is a claim that takes milliseconds, not a container
// start. Builds a template with its dependencies once, keeps two of it
// warm, claims them, and empties the pool again.
//
//     node warm_pool.mjs
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function main(client, { template = "example-warm", size = 2 } = {}) {
  // The environment is built once; every sandbox of the template has it.
  await client.templates.build(template, "base", ["mkdir -p /opt/tool && echo 'tool v1' > /opt/tool/VERSION"]);
  try {
    await client.templates.setPool(template, size);
    const deadline = Date.now() + 120_000;
    while ((await client.templates.getPool(template)).ready < size) {
      if (Date.now() > deadline) throw new Error("the pool did not fill in two minutes");
      await sleep(100);
    }
    const took = {};
    for (let i = 0; i < size; i++) {
      const t0 = performance.now();
      // A create that fits the pool (its template, default resources,
      // ephemeral) is served by a ready member.
      const sb = await client.sandboxes.create({ template, labels: { example: "warm" } });
      took[`claim ${i}`] = performance.now() - t0;
      try {
        if ((await sb.exec("cat /opt/tool/VERSION")).text !== "tool v1\n") throw new Error("not the template's files");
      } finally {
        await sb.delete({ force: true });
      }
    }
    return { took, pool: await client.templates.getPool(template) };
  } finally {
    // Empty the pool, wait for its members to go, then drop the template.
    await client.templates.setPool(template, 0);
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(100)) {
      const p = await client.templates.getPool(template);
      if (p.ready + p.starting === 0) break;
    }
    await client.templates.delete(template);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  const r = await main(client);
  for (const [what, ms] of Object.entries(r.took)) console.log(`${what}: ${ms.toFixed(0)} ms`);
  client.close();
}
