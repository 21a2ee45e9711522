"""Fork children from a prepared sandbox, let each try a different
variant, and collect the artefact each one made.

    python3 fork_artefacts.py
"""
import berth

# One variant of the work: weight the parent's data by k, write the result.
VARIANT = """
import sys
k = int(sys.argv[1])
total = sum(int(line) * k for line in open("/tmp/data.txt"))
open("/tmp/result", "w").write(str(total))
"""


def main(client: berth.Client, variants: int = 3) -> dict:
    with client.sandboxes.create() as parent:
        # Expensive setup happens once, in the parent.
        parent.files.write("/tmp/data.txt", "\n".join(str(i) for i in range(1, 101)))
        children = parent.fork(variants, labels={"example": "fork"})
        artefacts = {}
        try:
            for i, child in enumerate(children):
                # Each child sees the parent's files and works on its own copy.
                r = child.exec(["python3", "-c", VARIANT, str(i + 1)])
                if r.exit_code != 0:
                    raise SystemExit("variant %d failed: %s" % (i + 1, r.stderr.decode()))
                artefacts[child.id] = int(child.files.read("/tmp/result"))
        finally:
            for child in children:
                child.delete(force=True)
        return artefacts


if __name__ == "__main__":
    with berth.Client() as c:
        for sid, value in main(c).items():
            print(sid, value)
