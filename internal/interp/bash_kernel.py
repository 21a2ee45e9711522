"""berth's Bash kernel for the code interpreter: one bash per kernel.

A Jupyter wrapper kernel (ipykernel's Kernel base): each cell is written
to a file and sourced by a long-lived bash, so variables, exports, cd and
functions carry over between cells, as in E2B's bash kernel. Neither
Debian nor npm packages a Bash kernel (E2B installs bash_kernel from
PyPI, which this project cannot reach), hence this one; it needs only
ipykernel and the standard library.

stdout and stderr stay apart (two pipes); each ends a cell with a marker
line that carries a random token, so a cell's own output cannot end it
early. A cell's exit status other than 0 is an error whose value is the
status, as bash_kernel reports it. The cell reads /dev/null as stdin: a
program that reads its input ends at once instead of hanging the kernel.
An interrupt is SIGINT to bash's process group: the running command
ends, the shell (which traps INT) goes on to the marker.
"""

import os
import select
import signal
import subprocess
import sys
import tempfile
import uuid

from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel

# bash runs with SIGINT handled (not ignored: an ignored signal stays
# ignored in the programs it starts); the marker prints the cell's status.
PRELUDE = "trap ':' INT\nPS1= PS2=\nunset PROMPT_COMMAND\n"


class BashKernel(Kernel):
    implementation = "berth-bash"
    implementation_version = "1"
    language = "bash"
    language_version = "5"
    language_info = {"name": "bash", "mimetype": "text/x-sh", "file_extension": ".sh", "codemirror_mode": "shell"}
    banner = "berth bash kernel"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dir = tempfile.mkdtemp(prefix="berth-bash-")
        self.bash = None
        self.start_bash()

    def start_bash(self):
        # ipykernel ignores SIGINT outside a handler, and an ignored signal
        # stays ignored in what it starts (bash could not even trap it):
        # bash starts with the default.
        saved = signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            self.bash = subprocess.Popen(
                ["/bin/bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, bufsize=0)
        finally:
            signal.signal(signal.SIGINT, saved)
        self.bash.stdin.write(PRELUDE.encode())
        self.bash.stdin.flush()

    def send(self, name, text):
        if text:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def run(self, code):
        """Runs code in bash; the cell's exit status (None if bash ended)."""
        token = uuid.uuid4().hex
        path = os.path.join(self.dir, "cell.sh")
        with open(path, "w") as f:
            f.write(code + "\n")
        marker = "__berth_%s" % token
        cmd = ". %s </dev/null\nprintf '\\n%s %%d\\n' $?\nprintf '\\n%s\\n' >&2\n" % (path, marker, marker)
        try:
            self.bash.stdin.write(cmd.encode())
            self.bash.stdin.flush()
        except OSError:
            return None
        out = self.bash.stdout.fileno()
        err = self.bash.stderr.fileno()
        bufs = {out: b"", err: b""}
        open_fds = {out, err}
        status = None
        end = ("\n" + marker).encode()
        while open_fds:
            try:
                ready, _, _ = select.select(list(open_fds), [], [])
            except KeyboardInterrupt:
                self.interrupt_bash()
                continue
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                bufs[fd] += chunk
                i = bufs[fd].find(end)
                name = "stdout" if fd == out else "stderr"
                if i < 0:
                    # Hold back what may be the start of the marker.
                    keep = len(end)
                    text, bufs[fd] = bufs[fd][:-keep], bufs[fd][-keep:]
                    self.send(name, text.decode(errors="replace"))
                    continue
                nl = bufs[fd].find(b"\n", i + len(end))
                if nl < 0:
                    continue
                self.send(name, bufs[fd][:i].decode(errors="replace"))
                if fd == out:
                    try:
                        status = int(bufs[fd][i + len(end):nl].strip() or b"0")
                    except ValueError:
                        status = 1
                bufs[fd] = b""
                open_fds.discard(fd)
        for fd, rest in bufs.items():
            self.send("stdout" if fd == out else "stderr", rest.decode(errors="replace"))
        return status

    def interrupt_bash(self):
        try:
            os.killpg(self.bash.pid, signal.SIGINT)
        except OSError:
            pass

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False):
        if not code.strip():
            return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}
        status = self.run(code)
        if status is None:
            # bash ended (the cell ran exit): a new one for the next cell.
            status = self.bash.wait() or 1
            self.start_bash()
        if status == 0:
            return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}
        content = {"ename": "", "evalue": str(status), "traceback": []}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def do_shutdown(self, restart):
        if self.bash is not None and self.bash.poll() is None:
            try:
                os.killpg(self.bash.pid, signal.SIGKILL)
            except OSError:
                pass
            self.bash.wait()
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    sys.exit(IPKernelApp.launch_instance(kernel_class=BashKernel))
