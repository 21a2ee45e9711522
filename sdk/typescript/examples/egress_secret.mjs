// Egress with a secret placeholder: code in the sandbox calls an HTTPS API
// with a key it never holds. The key is stored as a berth secret; the
// sandbox, allowed to reach only the API's host, gets a placeholder in its
// env, and berth's egress proxy puts the real key into the request headers
// on the way out — to that host only. Whatever the sandbox's code prints,
// logs or sends elsewhere, it can leak no more than the placeholder.
//
//     API_KEY=sk-... node egress_secret.mjs api.example.com
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

// What runs in the sandbox: an ordinary API call naming the key from the env.
const CALL = 'curl -sS -w "\\n%{http_code}\\n" -H "Authorization: Bearer $EXAMPLE_API_KEY" https://$API_HOST/v1/whoami';

export async function main(client, apiHost, apiKey, look = undefined) {
  await client.secrets.set("EXAMPLE_API_KEY", apiKey);
  try {
    const sb = await client.sandboxes.create({
      network: "egress",
      allow: [`tcp://${apiHost}:443`], // nothing else is reachable
      secrets: [{ name: "EXAMPLE_API_KEY", egress_host: apiHost }],
    });
    try {
      // The sandbox's env holds a placeholder, not the key.
      const placeholder = (await sb.exec("printenv EXAMPLE_API_KEY")).text.trim();
      const r = await sb.exec(CALL, { env: { API_HOST: apiHost } });
      if (r.exitCode !== 0) throw new Error("the call failed: " + r.stderr.toString());
      const lines = r.text.trimEnd().split("\n");
      const status = Number(lines.pop());
      if (look) await look(sb); // the tests look inside before the sandbox goes
      return { placeholder, status, body: lines.join("\n") };
    } finally {
      await sb[Symbol.asyncDispose]();
    }
  } finally {
    await client.secrets.delete("EXAMPLE_API_KEY");
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  console.log(await main(client, process.argv[2], process.env.API_KEY));
  client.close();
}
