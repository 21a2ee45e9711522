"""Egress with a secret placeholder: code in the sandbox calls an HTTPS
API with a key it never holds. The key is stored as a berth secret; the
sandbox, allowed to reach only the API's host, gets a placeholder in its
env, and berth's egress proxy puts the real key into the request headers
on the way out — to that host only. Whatever the sandbox's code prints,
logs or sends elsewhere, it can leak no more than the placeholder.

    API_KEY=sk-... python3 egress_secret.py api.example.com
"""
import os
import sys

import berth
from berth import models

# What runs in the sandbox: an ordinary API call naming the key from the env.
CALL = 'curl -sS -w "\\n%{http_code}\\n" -H "Authorization: Bearer $EXAMPLE_API_KEY" https://$API_HOST/v1/whoami'


def main(client: berth.Client, api_host: str, api_key: str, look=None) -> dict:
    client.secrets.set("EXAMPLE_API_KEY", api_key)
    try:
        with client.sandboxes.create(
            network="egress",
            allow=["tcp://%s:443" % api_host],  # nothing else is reachable
            secrets=[models.SecretRef(name="EXAMPLE_API_KEY", egress_host=api_host)],
        ) as sb:
            # The sandbox's env holds a placeholder, not the key.
            placeholder = sb.exec("printenv EXAMPLE_API_KEY").text.strip()
            r = sb.exec(CALL, env={"API_HOST": api_host})
            if r.exit_code != 0:
                raise SystemExit("the call failed: " + r.stderr.decode())
            body, status = r.text.rstrip("\n").rsplit("\n", 1)
            if look:
                look(sb)  # the tests look inside before the sandbox goes
            return {"placeholder": placeholder, "status": int(status), "body": body}
    finally:
        client.secrets.delete("EXAMPLE_API_KEY")


if __name__ == "__main__":
    with berth.Client() as c:
        print(main(c, sys.argv[1], os.environ["API_KEY"]))
