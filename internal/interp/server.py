"""berth's code interpreter: E2B's code-interpreter wire on port 49999.

One Jupyter kernel (ipykernel, driven with jupyter_client) per context.
Runs inside the sandbox; only the standard library and jupyter_client.
See docs/code-interpreter.md for the wire shape.
"""

import glob
import json
import os
import queue
import re
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("BERTH_INTERP_PORT", "49999"))
DEFAULT_TIMEOUT = float(os.environ.get("BERTH_INTERP_TIMEOUT", "300"))


def _home():
    """The home of the user the server runs as ("" when unknown)."""
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return ""


# A server run as an unprivileged user (E2B's "user", in a sandbox made
# through berth's E2B door) works in that user's home, as E2B's does;
# as root in /workspace, berth's own default.
HOME = _home() if os.getuid() != 0 else ""
if HOME and os.path.isdir(HOME):
    os.environ["HOME"] = HOME

from jupyter_client.manager import KernelManager  # noqa: E402 (after HOME)

DEFAULT_CWD = os.environ.get("BERTH_INTERP_CWD") or (HOME if HOME and os.path.isdir(HOME) else "/workspace")
MAX_BODY = 16 << 20
DEBUG = bool(os.environ.get("BERTH_INTERP_DEBUG"))
MAX_CONTEXTS = 32
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# The languages E2B's SDK names, as E2B normalizes them ("js" is
# javascript, "ts" typescript), and the kernel each runs in: Deno's own
# Jupyter kernel (npm's deno) for both JavaScript and TypeScript, IRkernel
# (Debian's r-cran-irkernel) for R, berth's bash_kernel.py beside this
# file for Bash. The kernelspecs of deno and berth-bash are in
# kernels/ beside this file (JUPYTER_PATH); python3 and ir are Debian's.
ALIASES = {"": "python", "python3": "python", "js": "javascript", "ts": "typescript"}
KERNELS = {"python": "python3", "javascript": "deno", "typescript": "deno", "r": "ir", "bash": "berth-bash"}
# What each kernel needs from the host's /usr: without it the language is
# refused, naming what is missing.
NEEDS = {
    "deno": ["/usr/bin/deno"],
    "ir": ["/usr/bin/R", "/usr/lib/R/site-library/IRkernel"],
}
HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["JUPYTER_PATH"] = HERE + (":" + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")


def normalize(language):
    """E2B's name of language, and its kernel; BadRequest if not offered."""
    lang = (language or "").strip().lower()
    lang = ALIASES.get(lang, lang)
    kernel = KERNELS.get(lang)
    if kernel is None:
        raise BadRequest("language %r is not available: berth offers %s" % (language, ", ".join(sorted(KERNELS))))
    missing = [p for p in NEEDS.get(kernel, []) if not os.path.exists(p)]
    if missing:
        raise BadRequest("language %r is not available here: the host lacks %s (scripts/install-deps.sh installs it)"
                         % (language, ", ".join(missing)))
    return lang, kernel


def quote_for(language, value):
    """value as a string literal of language."""
    if language == "python":
        return repr(value)
    if language == "bash":
        return "'" + value.replace("'", "'\\''") + "'"
    # JavaScript, TypeScript, R: a JSON string is a string literal of each
    # (R reads \\uXXXX too; non-ASCII stays as it is).
    return json.dumps(value, ensure_ascii=False)


def set_env_code(language, env):
    """Code that sets env (name to value, None to unset) in a kernel."""
    lines = []
    for k, v in env.items():
        q, kq = quote_for(language, v) if v is not None else None, quote_for(language, k)
        if language == "python":
            lines.append("__import__('os').environ[%s] = %s" % (kq, q) if v is not None else
                         "__import__('os').environ.pop(%s, None)" % kq)
        elif language in ("javascript", "typescript"):
            lines.append("process.env[%s] = %s;" % (kq, q) if v is not None else "delete process.env[%s];" % kq)
        elif language == "r":
            lines.append("do.call(Sys.setenv, setNames(list(%s), %s))" % (q, kq) if v is not None else
                         "invisible(Sys.unsetenv(%s))" % kq)
        elif language == "bash":
            lines.append("export %s=%s" % (k, q) if v is not None else "unset %s" % k)
    return "\n".join(lines)

MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "application/vnd.e2b.chart": "chart",
    "e2b/chart": "chart",
    "application/vnd.e2b.data": "data",
    "e2b/data": "data",
}

# Run in every new kernel, silently: what E2B's template sets up in its
# kernels. A pandas DataFrame result also carries its columns as "data"
# (E2B's e2b/data); PIL's Image.show() and Image.save(path) display the
# image (a PNG result) instead of opening a viewer.
KERNEL_SETUP = r"""
def __berth_setup():
    import sys
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import Unicode, ObjectName

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            out = obj.to_dict(orient="list")
            for k, v in out.items():
                out[k] = [x.isoformat() if isinstance(x, pandas.Timestamp) else x for x in v]
            return out

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

        def __call__(self, obj):
            if "matplotlib" not in sys.modules:
                return super().__call__(obj)
            from matplotlib.figure import Figure
            if not isinstance(obj, Figure):
                return super().__call__(obj)
            try:
                return charts.chart(obj)
            except Exception:
                return None  # a figure the extraction does not read: its PNG alone

    import importlib.util
    spec = importlib.util.spec_from_file_location("berth_charts", @CHARTS@)
    charts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(charts)

    ip = get_ipython()
    ip.display_formatter.formatters["e2b/data"] = DataFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters["e2b/chart"] = ChartFormatter(parent=ip.display_formatter)
    try:
        from IPython.display import display
        from PIL.Image import Image
        from PIL.ImageShow import UnixViewer
    except ImportError:
        return
    UnixViewer.show_file = lambda self, path, **options: 0
    save = Image.save

    def saved(image, fp, format=None, **options):
        if isinstance(fp, str):
            display(image)
        return save(image, fp, format, **options)

    Image.save = saved


__berth_setup()
del __berth_setup
"""


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


def result_of(data, is_main):
    out = {"type": "result", "is_main_result": is_main}
    extra = {}
    for mime, value in data.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            if isinstance(value, list) and field != "data":
                value = "".join(value)
            if field == "text" and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"`":
                # A string's repr (Deno's quotes one holding both kinds of
                # quote with backticks): E2B answers the string itself.
                value = value[1:-1]
            out[field] = value
    if extra:
        out["extra"] = extra
    return out


class Context:
    def __init__(self, language, kernel, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.kernel = kernel
        self.cwd = cwd
        self.lock = threading.Lock()
        self.km = None
        self.kc = None
        self.start()

    def start(self):
        env = dict(os.environ)
        if HOME and os.path.isdir(HOME):
            # The template's HOME is root's; a user's kernel has its own.
            env["HOME"] = HOME
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env.setdefault("MPLCONFIGDIR", "/tmp/berth-interp-mpl")
        # Debian's matplotlibrc is in /etc, which is not the host's here.
        rc = "/usr/share/matplotlib/mpl-data/matplotlibrc"
        if "MATPLOTLIBRC" not in env and os.path.isfile(rc) and not os.path.isfile("/etc/matplotlibrc"):
            env["MATPLOTLIBRC"] = rc
        # The sandbox's /etc is berth's own, without the host's
        # /etc/alternatives, so the BLAS/LAPACK links of /usr (numpy's)
        # dangle: the libraries' own directories go on the search path.
        libdirs = sorted(glob.glob("/usr/lib/*-linux-gnu/openblas*") + glob.glob("/usr/lib/*-linux-gnu/blas") +
                         glob.glob("/usr/lib/*-linux-gnu/lapack") + glob.glob("/usr/lib/*-linux-gnu/atlas"))
        if env.get("LD_LIBRARY_PATH"):
            libdirs.append(env["LD_LIBRARY_PATH"])
        if libdirs:
            env["LD_LIBRARY_PATH"] = ":".join(libdirs)
        if self.kernel == "deno":
            # Results as plain text (Deno colours them otherwise), no
            # look-up of a newer Deno (there is no network to ask).
            env["NO_COLOR"] = "1"
            env["DENO_NO_UPDATE_CHECK"] = "1"
        km = KernelManager(kernel_name=self.kernel)
        km.start_kernel(cwd=self.cwd, env=env)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
        except BaseException:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            raise
        self.km, self.kc = km, kc
        if self.kernel == "python3":
            self._silent(KERNEL_SETUP.replace("@CHARTS@", repr(os.path.join(HERE, "berth_charts.py"))))

    def stop(self):
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            self.km.shutdown_kernel(now=True)
        self.km = self.kc = None

    def restart(self):
        with self.lock:
            self.stop()
            self.start()

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def _drain(self, msg_id, deadline, emit, hung_up=None):
        """Reads iopub until msg_id's kernel goes idle; False on deadline
        or once hung_up() says the caller went away.

        Deno's kernel may publish a cell's result after the cell's idle
        status; its iopub is one ordered stream, so once idle a
        kernel_info request follows, and what the cell published comes
        before that request's own idle."""
        probe = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return probe is not None  # the cell itself had ended
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 0.5))
            except queue.Empty:
                if hung_up is not None and hung_up():
                    return False
                if not self.km.is_alive():
                    if emit is not None:
                        emit({"type": "unexpected_end_of_execution"})
                    return True
                continue
            if DEBUG:
                print("iopub", msg_id, msg.get("parent_header", {}).get("msg_id"), msg["msg_type"], msg["content"],
                      file=sys.stderr)
            parent = msg.get("parent_header", {}).get("msg_id")
            kind = msg["msg_type"]
            c = msg["content"]
            idle = kind == "status" and c.get("execution_state") == "idle"
            if probe is not None and parent == probe and idle:
                return True
            if parent != msg_id:
                continue
            if idle:
                if self.kernel != "deno":
                    return True
                probe = self.kc.kernel_info()
                deadline = min(deadline, time.monotonic() + 5)
                continue
            if emit is None:
                continue
            if kind == "stream":
                emit({"type": "stderr" if c.get("name") == "stderr" else "stdout",
                      "text": c.get("text", ""), "timestamp": time.time_ns()})
            elif kind == "execute_result":
                emit(result_of(c.get("data", {}), True))
            elif kind == "display_data":
                emit(result_of(c.get("data", {}), False))
            elif kind == "error":
                emit({"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                      "traceback": "\n".join(c.get("traceback", []))})
            elif kind == "execute_input":
                emit({"type": "number_of_executions", "execution_count": c.get("execution_count", 0)})

    def _silent(self, code, timeout=30):
        msg_id = self.kc.execute(code, silent=True, store_history=False, stop_on_error=False)
        self._drain(msg_id, time.monotonic() + timeout, None)

    def execute(self, code, env_vars, timeout, emit, hung_up=None):
        with self.lock:
            if self.kc is None:
                self.start()
            if env_vars:
                self._silent(set_env_code(self.language, env_vars))
            # Cells of a context never queue (its lock), so an error has
            # no later cell to abort; with stop_on_error ipykernel aborts
            # a cell that arrives just after a failed one, unrun.
            msg_id = self.kc.execute(code, stop_on_error=False)
            done = self._drain(msg_id, time.monotonic() + timeout, emit, hung_up)
            if not done:
                self.km.interrupt_kernel()
                emit({"type": "error", "name": "TimeoutError",
                      "value": "execution timed out after %g seconds" % timeout, "traceback": ""})
                if not self._drain(msg_id, time.monotonic() + 10, None):
                    # The interrupt did not end the cell: a new kernel keeps
                    # the context usable.
                    self.stop()
                    self.start()
            if env_vars and self.kc is not None:
                # Back to the sandbox's own (the server's environment,
                # which the kernel started with), as E2B does.
                self._silent(set_env_code(self.language, {k: os.environ.get(k) for k in env_vars}))
            emit({"type": "end_of_execution"})


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.default = {}

    def create(self, language, cwd):
        lang, kernel = normalize(language)
        with self.lock:
            if len(self.by_id) >= MAX_CONTEXTS:
                raise BadRequest("at most %d contexts" % MAX_CONTEXTS)
        ctx = Context(lang, kernel, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def default_for(self, language):
        lang, kernel = normalize(language)
        with self.lock:
            ctx = self.default.get(lang)
        if ctx is not None:
            return ctx
        ctx = Context(lang, kernel, DEFAULT_CWD)
        with self.lock:
            if lang in self.default:
                other = ctx
                ctx = self.default[lang]
                other.stop()
            else:
                self.default[lang] = ctx
                self.by_id[ctx.id] = ctx
        return ctx

    def get(self, cid):
        with self.lock:
            ctx = self.by_id.get(cid)
        if ctx is None:
            raise NotFound("context %r not found" % cid)
        return ctx

    def delete(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
            for k, v in list(self.default.items()):
                if v is ctx:
                    del self.default[k]
        if ctx is None:
            raise NotFound("context %r not found" % cid)
        with ctx.lock:
            ctx.stop()

    def list(self):
        with self.lock:
            return [c.info() for c in self.by_id.values()]


CONTEXTS = Contexts()
DEFAULTS = threading.Event()
# The languages whose default context starts with the server: E2B's two,
# unless the sandbox's env names others (BERTH_INTERP_DEFAULTS=python
# saves the Deno kernel's memory, some 200 MB resident, where no
# JavaScript runs; its context then starts at its first cell).
DEFAULT_LANGUAGES = [x.strip() for x in os.environ.get("BERTH_INTERP_DEFAULTS", "python,javascript").split(",") if x.strip()]
# How long a request waits for the default contexts before going on
# without them (their kernels start in seconds; a host under load is
# slower).
DEFAULTS_WAIT = 120


def str_field(body, name, default=None):
    v = body.get(name, default)
    if v is not None and not isinstance(v, str):
        raise BadRequest("%s must be a string" % name)
    return v


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 for /execute's chunked answer: a stream cut short (the
    # sandbox killed mid-cell) is then an error to every hop and to the
    # client, where a close-delimited HTTP/1.0 body would end as if
    # complete. Every other answer has its Content-Length.
    protocol_version = "HTTP/1.1"
    server_version = "berth-interp"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj):
        b = (json.dumps(obj) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def body(self):
        try:
            n = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            raise BadRequest("bad Content-Length")
        if n < 0 or n > MAX_BODY:
            raise BadRequest("body larger than %d bytes" % MAX_BODY)
        raw = self.rfile.read(n) if n else b"{}"
        try:
            v = json.loads(raw)
        except ValueError:
            raise BadRequest("body is not JSON")
        if not isinstance(v, dict):
            raise BadRequest("body must be a JSON object")
        return v

    def handle_errors(self, fn):
        try:
            fn()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # the server stays up for the next request
            # The request's body may be unread: the connection ends.
            self.close_connection = True
            if isinstance(e, BadRequest):
                status, msg = 400, str(e)
            elif isinstance(e, NotFound):
                status, msg = 404, str(e)
            else:
                status, msg = 500, "%s: %s" % (type(e).__name__, e)
            try:
                self.reply(status, {"error": msg})
            except OSError:
                pass

    def path_parts(self):
        return [p for p in self.path.split("?", 1)[0].split("/") if p]

    def do_GET(self):
        def run():
            parts = self.path_parts()
            if parts == ["health"]:
                self.reply(200, "OK")
            elif parts == ["contexts"]:
                DEFAULTS.wait(DEFAULTS_WAIT)
                self.reply(200, CONTEXTS.list())
            else:
                raise NotFound("no route %s" % self.path)
        self.handle_errors(run)

    def do_DELETE(self):
        def run():
            parts = self.path_parts()
            if len(parts) == 2 and parts[0] == "contexts":
                DEFAULTS.wait(DEFAULTS_WAIT)
                CONTEXTS.delete(parts[1])
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                raise NotFound("no route %s" % self.path)
        self.handle_errors(run)

    def do_POST(self):
        def run():
            parts = self.path_parts()
            if parts == ["execute"]:
                self.execute()
            elif parts == ["contexts"]:
                b = self.body()
                cwd = str_field(b, "cwd") or DEFAULT_CWD
                if not cwd.startswith("/"):
                    raise BadRequest("cwd must be an absolute path")
                DEFAULTS.wait(DEFAULTS_WAIT)
                ctx = CONTEXTS.create(str_field(b, "language") or "python", cwd)
                self.reply(200, ctx.info())
            elif len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                DEFAULTS.wait(DEFAULTS_WAIT)
                CONTEXTS.get(parts[1]).restart()
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                raise NotFound("no route %s" % self.path)
        self.handle_errors(run)

    def execute(self):
        b = self.body()
        code = str_field(b, "code")
        if code is None:
            raise BadRequest("code is required")
        cid = str_field(b, "context_id")
        language = str_field(b, "language")
        if cid and language:
            raise BadRequest("give context_id or language, not both")
        env_vars = b.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()):
            raise BadRequest("env_vars must map strings to strings")
        timeout = b.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise BadRequest("timeout must be a positive number of seconds")
        ctx = CONTEXTS.get(cid) if cid else None
        lang = ctx.language if ctx is not None else normalize(language or "python")[0]
        if lang == "bash":
            bad = [k for k in env_vars if not ENV_NAME.match(k)]
            if bad:
                raise BadRequest("env_vars: %r is not a name bash can export" % bad[0])
        # The answer's head goes out before anything that can wait (a
        # default context's kernel starting, another cell of the same
        # context): a caller (E2B's SDK) tells a request in progress from
        # one never answered by it.
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        gone = []

        def hung_up():
            # The caller closed its connection (the SDK's own timeout aborts
            # the request): the cell is interrupted as on a timeout, so the
            # context is idle for the next request at once.
            if gone:
                return True
            try:
                r, _, _ = select.select([self.connection], [], [], 0)
                if r and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    gone.append(True)
            except OSError:
                gone.append(True)
            return bool(gone)

        def emit(obj):
            if gone:
                return
            line = (json.dumps(obj) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                gone.append(True)

        if ctx is None:
            DEFAULTS.wait(DEFAULTS_WAIT)
            try:
                ctx = CONTEXTS.default_for(lang)
            except Exception as e:
                emit({"type": "error", "name": type(e).__name__, "value": "the %s context did not start: %s" % (lang, e),
                      "traceback": ""})
                emit({"type": "end_of_execution"})
                self.end_chunks(gone)
                return
        ctx.execute(code, env_vars, float(timeout), emit, hung_up)
        self.end_chunks(gone)

    def end_chunks(self, gone):
        if not gone:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def main():
    srv = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    srv.daemon_threads = True
    threading.Thread(target=start_defaults, daemon=True).start()
    srv.serve_forever()


def start_defaults():
    """Starts the default contexts, python's and javascript's as E2B's,
    then opens DEFAULTS: requests about contexts wait for it, so the
    defaults lead the contexts list and the first cell finds its kernel
    running. A language the host lacks has none."""
    try:
        for language in DEFAULT_LANGUAGES:
            try:
                CONTEXTS.default_for(language)
            except Exception as e:
                print("default %s context: %s" % (language, e), file=sys.stderr)
    finally:
        DEFAULTS.set()


if __name__ == "__main__":
    sys.exit(main())
