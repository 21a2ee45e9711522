package catalogue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// sudoClient is a raw client of berth's sudo socket (internal/agent/sudo)
// in python: it speaks the protocol wrongly on purpose.
const sudoClient = `import array, json
def sconn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(15); s.connect("\0berth-sudo"); return s
def shdr(n): return b"BSU1" + struct.pack(">I", n)
def sbody(argv, cwd="/", **kw):
    d = dict(argv=argv, env=[], cwd=cwd); d.update(kw); return json.dumps(d).encode()
def ssend(s, hdr, fds, body=b""):
    # A refusal may close the connection mid-send: the answer says why.
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    try:
        s.sendmsg([hdr], anc)
        if body: s.sendall(body)
    except OSError: pass
def sanswer(s):
    d = b""
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            d += c
            if len(d) >= 5 and len(d) >= 5 + struct.unpack(">I", d[1:5])[0]: break
    except OSError as ex:
        if not d: return "err " + ename(ex.errno)
    if not d: return "closed"
    return d[:1].decode(errors="replace") + ":" + d[5:5+100].decode(errors="replace")
def canary(n): return ["sh", "-c", "echo owned > /tmp/st-sudo-canary-%d" % n]
`

// sudoAttacks misuse berth's sudo: the one door from a sandbox's
// processes into its agent that a sandbox created with sudo has.
func sudoAttacks() []*attack.Attack {
	a := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome) *attack.Attack {
		return &attack.Attack{ID: "agent.sudo-" + id, Category: attack.CatAgent, Description: desc, Expected: expected, Run: run,
			Classes: []string{attack.Runc, attack.Runsc}}
	}
	// withSudo runs f in a fresh sandbox with sudo whose user is E2B's.
	withSudo := func(f func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome) func(ctxT, *attack.Env) attack.Outcome {
		return func(ctx ctxT, e *attack.Env) attack.Outcome {
			sb, err := e.Create(ctx, api.CreateSandboxRequest{Sudo: true, User: "user"})
			if err != nil {
				if strings.Contains(err.Error(), "offers no sudo") {
					return attack.NotApplicable("this runtime class offers no sudo")
				}
				return attack.Escaped("could not create the sandbox: %v", err)
			}
			defer e.Delete(context.WithoutCancel(ctx), sb.ID)
			return f(ctx, e, sb)
		}
	}
	py := func(ctx ctxT, e *attack.Env, id, user, code string) (string, api.ExecExit, error) {
		return e.Exec(ctx, id, api.ExecRequest{User: user, Cmd: []string{"python3", "-c", attack.PyPrelude + sudoClient + code}})
	}
	// sane checks what every sudo attack leaves: no canary ran, the agent
	// answers, and sudo still works for the sandbox's user.
	sane := func(ctx ctxT, e *attack.Env, sb *sandboxT, what string) attack.Outcome {
		out, _, err := e.Exec(ctx, sb.ID, api.ExecRequest{User: "root", Cmd: []string{"sh", "-c", "ls /tmp | grep -c st-sudo-canary || true"}})
		if err != nil {
			return attack.Escaped("%s; then exec failed: %v", what, err)
		}
		if n := strings.TrimSpace(out); n != "0" {
			return attack.Escaped("%s; %s refused request(s) ran their command", what, n)
		}
		if ok, why := e.Alive(ctx, sb.ID); !ok {
			return attack.Escaped("%s; then the sandbox died: %s", what, why)
		}
		// The helpers of a flood end as their connections close: give
		// them a moment before sudo must work again.
		var out2 string
		var exit api.ExecExit
		for i := 0; ; i++ {
			out2, exit, err = e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sudo", "id", "-u"}})
			if err == nil && exit.Code == 0 && strings.TrimSpace(out2) == "0" {
				break
			}
			if i == 20 {
				return attack.Escaped("%s; then sudo no longer works: %s %v", what, attack.DescribeExit(out2, exit), err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		return attack.Contained("%s; nothing ran, the agent answers, sudo still works", what)
	}
	return []*attack.Attack{
		a("malformed", "as the sandbox's user, send the sudo socket garbage, bad headers, 0/2/4/200 descriptors, descriptors after the header, a 2 GiB length, NUL bytes, unknown fields, a relative cwd, 5000 arguments, each carrying a command that writes a canary",
			"every one refused (an error frame or a close); no canary; the agent answers and sudo still works",
			withSudo(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := py(ctx, e, sb.ID, "", `
n = os.open("/dev/null", os.O_RDWR)
cases = [
  ("garbage", lambda s: ssend(s, b"GET / HTTP/1.1\r\n\r\n", [n, n, n])),
  ("no-fds", lambda s: ssend(s, shdr(len(sbody(canary(1)))), [], sbody(canary(1)))),
  ("2-fds", lambda s: ssend(s, shdr(len(sbody(canary(2)))), [n, n], sbody(canary(2)))),
  ("4-fds", lambda s: ssend(s, shdr(len(sbody(canary(3)))), [n, n, n, n], sbody(canary(3)))),
  ("200-fds", lambda s: ssend(s, shdr(len(sbody(canary(4)))), [n] * 200, sbody(canary(4)))),
  ("late-fds", lambda s: (s.sendall(shdr(len(sbody(canary(5))))), ssend(s, sbody(canary(5)), [n, n, n]))),
  ("2GiB", lambda s: ssend(s, shdr(1 << 31), [n, n, n], sbody(canary(6)))),
  ("NUL", lambda s: ssend(s, shdr(len(sbody(canary(7), env=["A=\0"]))), [n, n, n], sbody(canary(7), env=["A=\0"]))),
  ("unknown-field", lambda s: ssend(s, shdr(len(sbody(canary(8), uid=0))), [n, n, n], sbody(canary(8), uid=0))),
  ("relative-cwd", lambda s: ssend(s, shdr(len(sbody(canary(9), cwd="tmp"))), [n, n, n], sbody(canary(9), cwd="tmp"))),
  ("5000-args", lambda s: ssend(s, shdr(len(sbody(canary(10) + ["x"] * 5000))), [n, n, n], sbody(canary(10) + ["x"] * 5000))),
  ("short-body", lambda s: (ssend(s, shdr(1000), [n, n, n], sbody(canary(11))), s.shutdown(socket.SHUT_WR))),
]
res = []
for name, f in cases:
    try:
        s = sconn(); f(s); a = sanswer(s); s.close()
    except OSError as ex:
        a = "err " + ename(ex.errno)
    res.append(name + "=" + a.split(":")[0].replace(" ", "_"))
report(" ".join(res))
`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r, ok := attack.Reported(out)
				if !ok {
					return attack.Escaped("no result: %s", attack.DescribeExit(out, exit))
				}
				for _, f := range strings.Fields(r) {
					_, v, _ := strings.Cut(f, "=")
					if v != "E" && v != "closed" && !strings.HasPrefix(v, "err") {
						return attack.Escaped("a malformed request was answered %q: %s", v, r)
					}
				}
				return sane(ctx, e, sb, r)
			})),
		a("other-uid", "as nobody (uid 65534, not the sandbox's sudo user), run sudo, then send a well-formed request with 3 descriptors on the raw socket",
			"refused with its reason before anything is read; no canary",
			withSudo(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Exec(ctx, sb.ID, api.ExecRequest{User: "65534", Cmd: []string{"sudo", "sh", "-c", "echo owned > /tmp/st-sudo-canary-0"}})
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				if exit.Code == 0 || !strings.Contains(out, "may not use sudo") {
					return attack.Escaped("sudo as nobody: %s", attack.DescribeExit(out, exit))
				}
				out, exit, err = py(ctx, e, sb.ID, "65534", `
s = sconn(); ssend(s, shdr(len(sbody(canary(1)))), [0, 1, 2], sbody(canary(1)))
report(sanswer(s))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r, _ := attack.Reported(out)
				if !strings.HasPrefix(r, "E:") && r != "closed" && !strings.HasPrefix(r, "err") {
					return attack.Escaped("a raw request as nobody was answered %q (%s)", r, attack.DescribeExit(out, exit))
				}
				return sane(ctx, e, sb, "refused: "+attack.Clip(r, 80))
			})),
		a("squat", "as the sandbox's user, bind the sudo socket's name, replace or write /.berth/bin/sudo, plant a file beside it",
			"EADDRINUSE; EACCES/EROFS/EBUSY: the name is the agent's, the program read-only",
			withSudo(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := py(ctx, e, sb.ID, "", `
s = socket.socket(socket.AF_UNIX)
res = ["bind=" + oserr(lambda: s.bind("\0berth-sudo")),
       "write=" + oserr(lambda: os.close(os.open("/.berth/bin/sudo", os.O_WRONLY))),
       "rename=" + oserr(lambda: os.rename("/.berth/bin/sudo", "/tmp/st-sudo")),
       "unlink=" + oserr(lambda: os.unlink("/.berth/bin/sudo")),
       "plant=" + oserr(lambda: os.symlink("/tmp/x", "/.berth/bin/st-sudo-link"))]
report(" ".join(r.replace(" ", "_") for r in res))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r, ok := attack.Reported(out)
				if !ok {
					return attack.Escaped("no result: %s", attack.DescribeExit(out, exit))
				}
				if strings.Contains(r, "=ok") {
					return attack.Escaped("went through: %s", r)
				}
				return sane(ctx, e, sb, r)
			})),
		a("flood", "as the sandbox's user, open 300 connections to the sudo socket at once and hold them",
			"the agent caps the helpers it starts (64) and closes the rest; it answers throughout, and sudo works once they are closed",
			withSudo(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := py(ctx, e, sb.ID, "", `
held = []
for i in range(300):
    try: held.append(sconn())
    except OSError as ex: break
time.sleep(1)
closed = 0
for s in held:
    s.settimeout(0.05)
    try:
        if s.recv(1) == b"": closed += 1
    except socket.timeout: pass
    except OSError: closed += 1
report("held=%d closed=%d" % (len(held), closed))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r, ok := attack.Reported(out)
				if !ok {
					return attack.Escaped("no result: %s", attack.DescribeExit(out, exit))
				}
				return sane(ctx, e, sb, r)
			})),
		a("beyond-root", "compare what a command run through sudo holds (CapEff, CapBnd, NoNewPrivs, Seccomp) with an exec as root",
			"the same: sudo never gives more than exec --user root",
			withSudo(func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				const q = "grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"
				viaSudo, _, err1 := e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "sudo " + q}})
				asRoot, _, err2 := e.Exec(ctx, sb.ID, api.ExecRequest{User: "root", Cmd: []string{"sh", "-c", q}})
				if err1 != nil || err2 != nil {
					return attack.Escaped("exec failed: %v %v", err1, err2)
				}
				if strings.TrimSpace(viaSudo) == "" || strings.TrimSpace(viaSudo) != strings.TrimSpace(asRoot) {
					return attack.Escaped("through sudo %q, as root %q", attack.OneLine(viaSudo), attack.OneLine(asRoot))
				}
				return attack.Contained("the same as exec --user root: %s", attack.Clip(attack.OneLine(viaSudo), 120))
			})),
		a("absent", "in a sandbox created without sudo, look for the program and connect to the socket's name",
			"no program, ECONNREFUSED",
			attack.Fresh(api.CreateSandboxRequest{User: "user"}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := py(ctx, e, sb.ID, "", `
s = socket.socket(socket.AF_UNIX)
report("program=%s connect=%s" % (os.path.exists("/.berth/bin/sudo"), oserr(lambda: s.connect("\0berth-sudo")).replace(" ", "_")))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				r, _ := attack.Reported(out)
				if r != "program=False connect=err_ECONNREFUSED" {
					return attack.Escaped("%s", fmt.Sprint(r, " ", attack.DescribeExit(out, exit)))
				}
				return attack.Contained("%s", r)
			})),
	}
}
