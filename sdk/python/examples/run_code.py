"""Run code in a sandbox: write a script, run it, stream its output, read
the file it made. The sandbox is deleted when the `with` block ends.

    BERTH_HOST=unix:///run/berth/berth.sock python3 run_code.py
"""
import sys

import berth

SCRIPT = """
import json, math
primes = [n for n in range(2, 60) if all(n % d for d in range(2, int(math.sqrt(n)) + 1))]
print("found", len(primes), "primes")
json.dump(primes, open("/tmp/primes.json", "w"))
"""


def main(client: berth.Client) -> list:
    with client.sandboxes.create() as sb:
        sb.files.write("/tmp/primes.py", SCRIPT)
        result = sb.exec(["python3", "/tmp/primes.py"], on_stdout=lambda b: sys.stdout.write(b.decode()))
        if result.exit_code != 0:
            raise SystemExit("the script failed: " + result.stderr.decode())
        import json

        return json.loads(sb.files.read("/tmp/primes.json"))


if __name__ == "__main__":
    with berth.Client() as c:
        print(main(c))
