package catalogue

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// impostor moves the real agent socket aside, listens in its place and
// relays every connection to the real agent, recording what the daemon
// sends (exec requests with their env) in the sandbox and in the socket
// dir (which is a host directory).
const impostor = `import os, socket, threading, sys
P = "/.berth/run/agent.sock"; R = "/.berth/run/.st-real.sock"
os.rename(P, R)
srv = socket.socket(socket.AF_UNIX); srv.bind(P); srv.listen(64)
logs = [open("/tmp/st-captured", "ab", buffering=0), open("/.berth/run/st-captured", "ab", buffering=0)]
def pipe(a, b, rec):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            if rec:
                for l in logs: l.write(d)
            if b: b.sendall(d)
    except OSError: pass
    finally:
        try:
            if b: b.shutdown(socket.SHUT_WR)
        except OSError: pass
def handle(c):
    # Relay to the real agent when it can be reached; record what the
    # daemon sends either way (an impostor need not relay to learn).
    u = socket.socket(socket.AF_UNIX)
    try: u.connect(R)
    except OSError: u = None
    if u: threading.Thread(target=pipe, args=(u, c, False), daemon=True).start()
    c.settimeout(5)
    pipe(c, u, True)
open("/tmp/st-impostor.ready", "w").write("1")
while True:
    c, _ = srv.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// The agent channel and the agent process (PID 1).
func agentAttacks() []*attack.Attack {
	const g = "agent"
	a := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "agent." + id, Category: attack.CatAgent, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	// alive wraps an attack on pid 1: whatever it reports, the sandbox
	// must still answer afterwards.
	alive := func(run func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome) func(ctxT, *attack.Env) attack.Outcome {
		return attack.Fresh(api.CreateSandboxRequest{}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			o := run(ctx, e, sb)
			if ok, why := e.Alive(ctx, sb.ID); !ok {
				return attack.Escaped("%s; then the sandbox died: %s", o.Observed, why)
			}
			return o
		})
	}
	signal := func(sig string) *attack.Attack {
		return a("kill-"+strings.ToLower(sig)+"-pid1", "kill -"+sig+" 1 from inside, then exec", "the agent survives; the sandbox still answers (gVisor, SIGKILL: that sandbox alone ends)",
			attack.Fresh(api.CreateSandboxRequest{}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				before, _, err := e.Sh(ctx, sb.ID, `cut -d' ' -f22 /proc/1/stat`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				// The signal may reach the attacking shell too (the agent
				// forwards some): its own exit says little.
				out, exit, err := e.Sh(ctx, sb.ID, fmt.Sprintf(`kill -%s 1; echo "RESULT rc=$?"`, sig))
				if err != nil && sig == "KILL" && e.Class == attack.Runsc {
					if ok, _ := e.Alive(ctx, sb.ID); !ok {
						return endedAlone(ctx, e, "kill -KILL 1 ended the gVisor sandbox (its init is not protected from SIGKILL inside, unlike Linux's); nothing else was affected")
					}
				}
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r := orExit(firstResult(out), out, exit)
				time.Sleep(500 * time.Millisecond)
				ok, why := e.Alive(ctx, sb.ID)
				if !ok && sig == "KILL" && e.Class == attack.Runsc {
					// gVisor does not keep SIGKILL from its init as
					// Linux does: the sandbox ends with its init, and
					// nothing can take PID 1's place. Its own end only.
					return endedAlone(ctx, e, "kill -KILL 1 (%s) ended the gVisor sandbox (its init is not protected from SIGKILL inside, unlike Linux's); nothing else was affected", r)
				}
				if !ok {
					return attack.Escaped("kill (%s): the sandbox no longer answers: %s", r, why)
				}
				after, _, _ := e.Sh(ctx, sb.ID, `cut -d' ' -f22 /proc/1/stat`)
				if strings.TrimSpace(after) != strings.TrimSpace(before) {
					return attack.Escaped("kill (%s): pid 1 was replaced (start %s -> %s)", r, strings.TrimSpace(before), strings.TrimSpace(after))
				}
				return attack.Contained("kill (%s); the agent still answers", r)
			}))
	}
	return []*attack.Attack{
		a("socket-symlink-other", "replace /.berth/run/agent.sock with a symlink to another sandbox's socket; the harness then execs into this one", "the exec never runs in the other sandbox",
			func(ctx ctxT, e *attack.Env) attack.Outcome {
				if e.DataDir() == "" || !e.Local() {
					return attack.NotApplicable("needs the daemon's data dir on this host")
				}
				sa, err := e.Create(ctx, api.CreateSandboxRequest{})
				if err != nil {
					return attack.Escaped("create: %v", err)
				}
				defer e.Delete(context.WithoutCancel(ctx), sa.ID)
				sbB, err := e.Create(ctx, api.CreateSandboxRequest{})
				if err != nil {
					return attack.Escaped("create: %v", err)
				}
				defer e.Delete(context.WithoutCancel(ctx), sbB.ID)
				e.Sh(ctx, sa.ID, "echo A-"+e.Tag+" > /tmp/st-whoami")
				e.Sh(ctx, sbB.ID, "echo B-"+e.Tag+" > /tmp/st-whoami")
				target := filepath.Join(e.DataDir(), "sandboxes", sbB.ID, "run", "agent.sock")
				out, exit, err := e.Sh(ctx, sa.ID, "rm -f /.berth/run/agent.sock && ln -s "+target+" /.berth/run/agent.sock")
				if err != nil || exit.Code != 0 {
					return attack.Contained("could not replace the socket: %v %s", err, attack.DescribeExit(out, exit))
				}
				got, _, err := e.Exec(ctx, sa.ID, api.ExecRequest{Cmd: []string{"cat", "/tmp/st-whoami"}, TimeoutSeconds: 15})
				switch {
				case err != nil:
					return attack.Contained("the exec failed instead: %v", err)
				case strings.Contains(got, "B-"+e.Tag):
					return attack.Escaped("an exec sent to sandbox A ran in sandbox B (%s)", strings.TrimSpace(got))
				}
				return attack.Contained("the exec ran in A (%s)", strings.TrimSpace(got))
			}),
		a("socket-symlink-host", "replace /.berth/run/agent.sock with a symlink to a host socket (a decoy the harness listens on)", "the daemon never connects to the host socket",
			attack.Fresh(api.CreateSandboxRequest{}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				if !e.Local() {
					return attack.NotApplicable("needs the daemon on this host")
				}
				decoy := filepath.Join(e.HostDir, "decoy.sock")
				l, err := net.Listen("unix", decoy)
				if err != nil {
					return attack.Escaped("decoy: %v", err)
				}
				defer l.Close()
				os.Chmod(decoy, 0o777)
				var hits atomic.Int32
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						hits.Add(1)
						c.Close()
					}
				}()
				out, exit, err := e.Sh(ctx, sb.ID, "rm -f /.berth/run/agent.sock && ln -s "+decoy+" /.berth/run/agent.sock")
				if err != nil || exit.Code != 0 {
					return attack.Contained("could not replace the socket: %v %s", err, attack.DescribeExit(out, exit))
				}
				_, _, xerr := e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}, TimeoutSeconds: 10})
				time.Sleep(200 * time.Millisecond)
				if n := hits.Load(); n > 0 {
					return attack.Escaped("the daemon connected %d time(s) to the host socket %s (exec: %v)", n, decoy, xerr)
				}
				return attack.Contained("no connection to the host socket (exec: %v)", errText(xerr))
			})),
		a("impostor", "move the agent socket aside and listen in its place, relaying and recording; the harness then execs with a secret in env", "the daemon's requests never reach the impostor",
			attack.Fresh(api.CreateSandboxRequest{}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				if err := writeFileIn(ctx, e, sb.ID, "/tmp/st-impostor.py", impostor); err != nil {
					return attack.Escaped("could not stage the impostor: %v", err)
				}
				out, exit, err := e.Sh(ctx, sb.ID, `(setsid python3 /tmp/st-impostor.py >/tmp/st-impostor.log 2>&1 &); for i in $(seq 100); do test -e /tmp/st-impostor.ready && exit 0; sleep 0.05; done; cat /tmp/st-impostor.log; exit 1`)
				if err != nil || exit.Code != 0 {
					return attack.Contained("the impostor could not take the socket's place: %v %s", err, attack.DescribeExit(out, exit))
				}
				secret := "st-secret-" + e.Tag
				xctx, cancel := context.WithTimeout(ctx, 8*time.Second) // a hijacked channel may never answer
				defer cancel()
				_, xexit, xerr := e.Exec(xctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"ST_SECRET": secret}, TimeoutSeconds: 5})
				var captured string
				onHost := e.DataDir() != "" && e.Local()
				if onHost {
					b, _ := os.ReadFile(filepath.Join(e.DataDir(), "sandboxes", sb.ID, "run", "st-captured"))
					captured = string(b)
				}
				if !onHost {
					captured, _, _ = e.Sh(ctx, sb.ID, "cat /tmp/st-captured 2>/dev/null")
				}
				if strings.Contains(captured, secret) {
					return attack.Escaped("the impostor captured the exec request with its env (%d bytes; exec: %v exit %d)", len(captured), errText(xerr), xexit.Code)
				}
				return attack.Contained("nothing captured (exec: %v)", errText(xerr))
			})),
		a("ptrace-attach-pid1", "PTRACE_ATTACH to pid 1 (the agent) via ctypes", "EPERM",
			alive(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Py(ctx, sb.ID, `r = sc(101, 16, 1, 0, 0)
if r.startswith("ok"):
    os.waitpid(1, 0x40000000); sc(101, 17, 1, 0, 0)
report(r)`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				return attack.SysCheck(out, exit)
			})),
		a("ptrace-seize-pid1", "PTRACE_SEIZE of pid 1, then PEEKDATA", "EPERM",
			alive(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Py(ctx, sb.ID, `r = sc(101, 0x4206, 1, 0, 0)
report(r)`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				return attack.SysCheck(out, exit)
			})),
		a("proc1-mem", "read /proc/1/mem at a mapped address of the agent", "EACCES/EPERM",
			attack.Py(g, `def rd():
    l = [x for x in open("/proc/1/maps") if x.split()[1].startswith("r")][0]
    addr = int(l.split("-")[0], 16)
    fd = os.open("/proc/1/mem", os.O_RDONLY)
    try:
        os.lseek(fd, addr, 0); return "%d bytes at %x" % (len(os.read(fd, 16)), addr)
    finally: os.close(fd)
report(oserr(rd))`, "*")),
		a("proc1-environ", "read /proc/1/environ (the agent's environment)", "EACCES",
			attack.Py(g, `def rd():
    d = open("/proc/1/environ", "rb").read()
    if not d: raise OSError(errno.ENODATA, "empty")
    return "%d bytes: %s" % (len(d), b" ".join(v.split(b"=")[0] for v in d.split(b"\0") if v).decode())
report(oserr(rd))`, "*")),
		a("proc1-fd", "list and readlink /proc/1/fd (the agent's descriptors)", "EACCES",
			attack.Py(g, `def ls():
    return " ".join("%s->%s" % (f, os.readlink("/proc/1/fd/" + f)) for f in sorted(os.listdir("/proc/1/fd")))
report(oserr(ls))`, "*")),
		signal("TERM"), signal("INT"), signal("HUP"), signal("KILL"),
		a("overwrite-binary", "open /.berth/berth (the agent binary, a host file) for writing; rename it", "EROFS/EBUSY/ETXTBSY",
			attack.Py(g, `res = [oserr(lambda: os.close(os.open("/.berth/berth", os.O_WRONLY | os.O_APPEND))),
       oserr(lambda: os.rename("/.berth/berth", "/.berth/st-b"))]
if res[1].startswith("ok"): os.rename("/.berth/st-b", "/.berth/berth")
report(("ok " + ", ".join(res)) if any(r.startswith("ok") for r in res) else "err " + ", ".join(res))`, "*")),
		a("proc1-exe-write", "open /proc/1/exe (the agent binary) for writing", "refused",
			attack.Py(g, `report(oserr(lambda: os.close(os.open("/proc/1/exe", os.O_WRONLY))))`, "*")),
		a("seccomp-fd", "look for the seccomp program's memfd in pid 1's and own fds and open it for writing", "closed, or sealed: not writable",
			attack.Py(g, `found = []; writable = []
for pid in ("1", "self"):
    try: fds = os.listdir("/proc/%s/fd" % pid)
    except OSError: continue
    for fd in fds:
        p = "/proc/%s/fd/%s" % (pid, fd)
        try: l = os.readlink(p)
        except OSError: continue
        if "memfd" in l:
            found.append(p + "=" + l)
            try:
                fd2 = os.open(p, os.O_RDWR); os.write(fd2, b""); os.close(fd2); writable.append(p)
            except OSError: pass
report(("ok writable: %s" % writable) if writable else ("err reachable but sealed: %s" % found) if found else "err no memfd reachable")`, "*")),
		a("listen-fd-leak", "look for the agent's listening socket among an exec'd process's fds (accept() would hijack the channel)", "none inherited",
			attack.Py(g, `got = []
for fd in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN): got.append(fd)
        s.detach()
    except OSError: pass
report(("ok listening sockets inherited: fds %s" % got) if got else "err none")`, "*")),
	}
}

// writeFileIn writes a file inside a sandbox through the file API.
func writeFileIn(ctx ctxT, e *attack.Env, id, path, content string) error {
	_, err := e.C.WriteFile(ctx, id, path, 0o755, strings.NewReader(content))
	return err
}

func firstResult(out string) string {
	r, _ := attack.Reported(out)
	return r
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return attack.Clip(err.Error(), 60)
}
