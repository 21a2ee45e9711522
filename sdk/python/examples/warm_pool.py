"""A warm pool: keep sandboxes of a template started ahead (frozen, no
CPU), so that a create is a claim that takes milliseconds, not a
container start. Builds a template with its dependencies once, keeps
two of it warm, claims them, and empties the pool again.

    python3 warm_pool.py
"""
import time

import berth


def main(client: berth.Client, template: str = "example-warm", size: int = 2) -> dict:
    # The environment is built once; every sandbox of the template has it.
    client.templates.build(template, "base", ["mkdir -p /opt/tool && echo 'tool v1' > /opt/tool/VERSION"])
    try:
        client.templates.set_pool(template, size)
        deadline = time.monotonic() + 120
        while client.templates.get_pool(template).ready < size:
            if time.monotonic() > deadline:
                raise SystemExit("the pool did not fill in two minutes")
            time.sleep(0.1)
        took = {}
        for i in range(size):
            t0 = time.monotonic()
            # A create that fits the pool (its template, default resources,
            # ephemeral) is served by a ready member.
            with client.sandboxes.create(template, labels={"example": "warm"}) as sb:
                took["claim %d" % i] = time.monotonic() - t0
                assert sb.exec("cat /opt/tool/VERSION").text == "tool v1\n"
        return {"took": took, "pool": client.templates.get_pool(template)}
    finally:
        # Empty the pool, wait for its members to go, then drop the template.
        client.templates.set_pool(template, 0)
        deadline = time.monotonic() + 60
        while True:
            p = client.templates.get_pool(template)
            if p.ready + p.starting == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        client.templates.delete(template)


if __name__ == "__main__":
    with berth.Client() as c:
        r = main(c)
        for what, secs in r["took"].items():
            print("%s: %.0f ms" % (what, secs * 1000))
