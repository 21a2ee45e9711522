"""A persistent workspace: /workspace survives stop and start (and a
daemon restart), so an agent can put its work down and pick it up later.

    python3 persistent_workspace.py
"""
import berth


def main(client: berth.Client) -> str:
    with client.sandboxes.create(persistent=True, labels={"example": "workspace"}) as sb:
        sb.exec("mkdir -p /workspace/project && echo 'step 1 done' > /workspace/project/log.txt")
        sb.stop()  # the sandbox's processes end; its workspace stays
        assert sb.refresh().state == "stopped"
        sb.start()
        sb.exec("echo 'step 2 done' >> /workspace/project/log.txt")
        return sb.files.read("/workspace/project/log.txt").decode()


if __name__ == "__main__":
    with berth.Client() as c:
        print(main(c), end="")
