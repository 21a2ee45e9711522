// Fork children from a prepared sandbox, let each try a different variant,
// and collect the artefact each one made.
//
//     node fork_artefacts.mjs
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

// One variant of the work: weight the parent's data by k, write the result.
const VARIANT = `
import sys
k = int(sys.argv[1])
total = sum(int(line) * k for line in open("/tmp/data.txt"))
open("/tmp/result", "w").write(str(total))
`;

export async function main(client, variants = 3) {
  const parent = await client.sandboxes.create();
  try {
    // Expensive setup happens once, in the parent.
    await parent.files.write("/tmp/data.txt", Array.from({ length: 100 }, (_, i) => String(i + 1)).join("\n"));
    const children = await parent.fork(variants, { labels: { example: "fork" } });
    try {
      // The children work at the same time, each on its own copy.
      const values = await Promise.all(
        children.map(async (child, i) => {
          const r = await child.exec(["python3", "-c", VARIANT, String(i + 1)]);
          if (r.exitCode !== 0) throw new Error(`variant ${i + 1} failed: ${r.stderr}`);
          return [child.id, Number((await child.files.read("/tmp/result")).toString())];
        }),
      );
      return Object.fromEntries(values);
    } finally {
      for (const child of children) await child.delete({ force: true });
    }
  } finally {
    await parent[Symbol.asyncDispose]();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  for (const [id, value] of Object.entries(await main(client))) console.log(id, value);
  client.close();
}
