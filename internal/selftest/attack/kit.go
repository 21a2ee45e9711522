package attack

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-sh/berth/api"
)

// PyPrelude is prepended to every python attack: raw system calls through
// ctypes, errno names, and the run's host paths (from the environment).
const PyPrelude = `import ctypes, os, sys, errno, socket, struct, time, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def _a(x):
    if isinstance(x, int): return ctypes.c_long(x)
    if isinstance(x, bytes): return ctypes.c_char_p(x)
    return x
def ename(e): return errno.errorcode.get(e, str(e))
def sc(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_a(x) for x in a])
    if r < 0: return "err " + ename(ctypes.get_errno())
    return "ok %d" % r
def oserr(f):
    try:
        r = f()
        return "ok" + ("" if r is None else " " + str(r)[:120])
    except OSError as ex:
        return "err " + ename(ex.errno)
def report(s):
    print("RESULT " + s); sys.stdout.flush()
def int80(nr, a1=0, a2=0, a3=0):
    p = lambda v: struct.pack("<I", v & 0xffffffff)
    code = b"\x53\xb8" + p(nr) + b"\xbb" + p(a1) + b"\xb9" + p(a2) + b"\xba" + p(a3) + b"\xcd\x80\x5b\xc3"
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    r = f()
    return ("err " + ename(-r)) if -4096 < r < 0 else ("ok %d" % r)
DD = os.environ.get("ST_DATADIR", ""); HD = os.environ.get("ST_HOSTDIR", ""); TAG = os.environ.get("ST_TAG", "")
`

// deniedErrnos are the answers of a refused privileged operation; any
// other error (EINVAL, EFAULT, ...) means the call got past the
// permission checks to argument validation.
// ENODEV and EOPNOTSUPP/ENOTSUP say the facility does not exist here
// (gVisor has no perf events nor file handles).
var deniedErrnos = []string{"EPERM", "EACCES", "ENOSYS", "ENODEV", "EOPNOTSUPP", "ENOTSUP"}

// Reported extracts the value of the last "RESULT ..." line.
func Reported(out string) (string, bool) {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "RESULT "); ok {
			return v, true
		}
	}
	return "", false
}

// DescribeExit is a short account of output and exit status.
func DescribeExit(out string, exit api.ExecExit) string {
	s := Clip(OneLine(out), 80)
	if exit.Signal != "" {
		return fmt.Sprintf("killed by %s %s", exit.Signal, s)
	}
	return fmt.Sprintf("exit %d %s", exit.Code, s)
}

// InGroup runs f against the shared sandbox of group.
func InGroup(group string, f func(ctx context.Context, e *Env, sb *api.Sandbox) Outcome) func(context.Context, *Env) Outcome {
	return func(ctx context.Context, e *Env) Outcome {
		sb, err := e.Group(ctx, group)
		if err != nil {
			return Escaped("could not create the sandbox: %v", err)
		}
		return f(ctx, e, sb)
	}
}

// Fresh runs f against a sandbox of its own made with req, deleted after.
func Fresh(req api.CreateSandboxRequest, f func(ctx context.Context, e *Env, sb *api.Sandbox) Outcome) func(context.Context, *Env) Outcome {
	return func(ctx context.Context, e *Env) Outcome {
		sb, err := e.Create(ctx, req)
		if err != nil {
			return Escaped("could not create the sandbox: %v", err)
		}
		defer e.Delete(context.WithoutCancel(ctx), sb.ID)
		return f(ctx, e, sb)
	}
}

// SysCheck judges a python attack whose RESULT is "err ERRNO" when refused
// and "ok ..." when the operation went through. accept lists the errnos
// that count as refused (nil: deniedErrnos; "*": any error). A process
// killed by a signal before reporting (SIGSYS) did not succeed either.
func SysCheck(out string, exit api.ExecExit, accept ...string) Outcome {
	if accept == nil {
		accept = deniedErrnos
	}
	r, ok := Reported(out)
	if !ok {
		if exit.Signal != "" {
			return Contained("killed by %s before the call returned", exit.Signal)
		}
		return Escaped("no result: %s", DescribeExit(out, exit))
	}
	if v, isErr := strings.CutPrefix(r, "err "); isErr {
		name, _, _ := strings.Cut(v, " ")
		if slices.Contains(accept, "*") || slices.Contains(accept, name) {
			return Contained("refused: %s", v)
		}
		return Escaped("%s: got past the permission check", v)
	}
	return Escaped("succeeded: %s", r)
}

// Py is an attack of the shared sandbox of group that runs a python
// program and judges its RESULT with SysCheck.
func Py(group, code string, accept ...string) func(context.Context, *Env) Outcome {
	return InGroup(group, func(ctx context.Context, e *Env, sb *api.Sandbox) Outcome {
		out, exit, err := e.Py(ctx, sb.ID, code)
		if err != nil {
			return Escaped("exec failed: %v", err)
		}
		return SysCheck(out, exit, accept...)
	})
}

// ShFails is an attack whose shell command must fail (exit non-zero).
func ShFails(group, script string) func(context.Context, *Env) Outcome {
	return InGroup(group, func(ctx context.Context, e *Env, sb *api.Sandbox) Outcome {
		out, exit, err := e.Sh(ctx, sb.ID, script)
		if err != nil {
			return Escaped("exec failed: %v", err)
		}
		if exit.Code == 0 {
			return Escaped("succeeded: %s", Clip(OneLine(out), 80))
		}
		return Contained("refused: %s", DescribeExit(out, exit))
	})
}
