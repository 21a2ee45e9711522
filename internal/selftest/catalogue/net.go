package catalogue

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// lonly is a python guard: true when the sandbox has no interface but lo
// (so a lookup cannot send a packet anywhere but its own loopback).
const lonly = `def ifaces():
    try: return sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
    except OSError: return []
`

// Network: mode none is loopback only; the host's loopback and abstract
// sockets stay out of reach. Egress-mode attacks need a network the test
// makes itself (see egress.go).
func netAttacks() []*attack.Attack {
	const g = "net"
	n := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "net." + id, Category: attack.CatNetwork, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	return []*attack.Attack{
		n("none-interfaces", "list network interfaces in mode none (/proc/net/dev)", "only lo",
			attack.Py(g, lonly+`i = ifaces()
report(("ok interfaces: %s" % i) if [x for x in i if x != "lo"] else "err only %s" % (i or "no interfaces"))`, "*")),
		n("none-routes", "routes in mode none (/proc/net/route, ipv6_route)", "no route but loopback",
			attack.Py(g, `rs = []
try: rs += [l.split()[0] + ":" + l.split()[1] for l in open("/proc/net/route").read().splitlines()[1:] if l.split() and l.split()[0] != "lo"]
except OSError: pass
try: rs += [l.split()[-1] + ":" + l.split()[0] for l in open("/proc/net/ipv6_route").read().splitlines() if l.split() and l.split()[-1] != "lo"]
except OSError: pass
report(("ok routes: %s" % rs[:5]) if rs else "err no route")`, "*")),
		n("host-loopback", "connect to a TCP port the harness listens on at the host's 127.0.0.1", "refused: the sandbox's 127.0.0.1 is its own",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return attack.Escaped("listen: %v", err)
				}
				defer l.Close()
				var hits atomic.Int32
				go acceptCount(l, &hits)
				port := l.Addr().(*net.TCPAddr).Port
				out, exit, err := e.Py(ctx, sb.ID, fmt.Sprintf(`s = socket.socket(); s.settimeout(3)
report(oserr(lambda: s.connect(("127.0.0.1", %d))))`, port))
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				o := attack.SysCheck(out, exit, "*")
				if hits.Load() > 0 {
					return attack.Escaped("the harness's host listener accepted %d connection(s)", hits.Load())
				}
				return o
			})),
		n("host-abstract-socket", "connect to an abstract unix socket the harness listens on in the host's network namespace", "ECONNREFUSED: abstract sockets are per network namespace",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				name := "berth-selftest-" + e.Tag
				l, err := net.Listen("unix", "@"+name)
				if err != nil {
					return attack.Escaped("listen: %v", err)
				}
				defer l.Close()
				var hits atomic.Int32
				go acceptCount(l, &hits)
				out, exit, err := e.Py(ctx, sb.ID, fmt.Sprintf(`s = socket.socket(socket.AF_UNIX); s.settimeout(3)
report(oserr(lambda: s.connect("\0%s")))`, name))
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				o := attack.SysCheck(out, exit, "*")
				if hits.Load() > 0 {
					return attack.Escaped("the host's abstract socket accepted %d connection(s)", hits.Load())
				}
				return o
			})),
		n("none-dns", "resolve a name in mode none (only tried when lo is the only interface)", "the lookup fails",
			attack.Py(g, lonly+`if [x for x in ifaces() if x != "lo"]:
    report("ok not attempted: the sandbox has a non-loopback interface %s" % ifaces()); sys.exit()
socket.setdefaulttimeout(5)
report(oserr(lambda: socket.getaddrinfo("berth-selftest-disallowed.example.com", 443)))`, "*")),
		n("egress-default-deny", "mode egress, no rule: connect to a test host in a harness-made network namespace", "refused, logged as a denied flow", egressDeny, attack.Runc),
		n("egress-dns-disallowed", "mode egress, no rule: resolve a name that is not allowed", "the lookup fails, logged as a denied query", egressDNS, attack.Runc),
		n("egress-secret-proxy", "mode egress with a secret injected at egress: look for the value (env, every environ, the secrets tmpfs) and the CA key, connect to the egress proxy's port on the gateway straight", "only the placeholder is held, no key; the proxy port is dropped", egressSecret, attack.Runc),
	}
}

func acceptCount(l net.Listener, hits *atomic.Int32) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		hits.Add(1)
		c.Close()
	}
}

// Cross-sandbox: sandbox A against B's processes, files, sockets, IPC.
func crossAttacks() []*attack.Attack {
	x := func(id, desc, expected, code string) *attack.Attack {
		return &attack.Attack{ID: "cross." + id, Category: attack.CatCross, Description: desc, Expected: expected,
			Run: func(ctx ctxT, e *attack.Env) attack.Outcome {
				a, b, err := crossPair(ctx, e)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				out, exit, err := e.Exec(ctx, a.ID, api.ExecRequest{Cmd: []string{"python3", "-c", attack.PyPrelude + code},
					Env: map[string]string{"ST_DATADIR": e.DataDir(), "ST_TAG": e.Tag, "ST_PEER": b.ID}})
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				return attack.SysCheck(out, exit, "*")
			}}
	}
	return []*attack.Attack{
		x("processes", "A looks for B's marked process in /proc", "not visible", `me = str(os.getpid()); mark = "st-xsb-" + "marker-" + TAG; seen = []
for d in os.listdir("/proc"):
    if not d.isdigit() or d == me: continue
    try:
        if mark.encode() in open("/proc/%s/cmdline" % d, "rb").read(): seen.append(d)
    except OSError: pass
report(("ok B's process visible as pid %s" % seen) if seen else "err not visible")`),
		x("proc-environ", "A scans /proc/*/environ for B's sandbox id", "not found", `peer = ("BERTH_SANDBOX_ID=" + os.environ["ST_PEER"]).encode(); hit = []
for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    try:
        if peer in open("/proc/%s/environ" % d, "rb").read(): hit.append(d)
    except OSError: pass
report(("ok pids %s" % hit) if hit else "err not found")`),
		x("files", "A looks for B's /tmp marker: own /tmp, /proc/*/root/tmp, B's host rootfs path", "not found", `name = "st-marker-" + TAG; ps = ["/tmp/" + name]
ps += ["/proc/%s/root/tmp/%s" % (d, name) for d in os.listdir("/proc") if d.isdigit()]
if DD: ps += [os.path.join(DD, "sandboxes", os.environ["ST_PEER"], "rootfs/tmp", name)]
hit = [p for p in ps if os.path.exists(p)]
report(("ok " + " ".join(hit)) if hit else "err not found in %d places" % len(ps))`),
		x("sockets", "A connects to B's abstract socket, TCP 127.0.0.1:17777 and reads /proc/net/unix", "all refused; B's sockets not listed", `got = []
s = socket.socket(socket.AF_UNIX); s.settimeout(2)
if oserr(lambda: s.connect("\0st-xsb-" + TAG)).startswith("ok"): got.append("abstract")
t = socket.socket(); t.settimeout(2)
if oserr(lambda: t.connect(("127.0.0.1", 17777))).startswith("ok"): got.append("tcp")
try:
    if ("st-xsb-" + TAG) in open("/proc/net/unix").read(): got.append("/proc/net/unix lists it")
except OSError: pass
report(("ok " + ", ".join(got)) if got else "err refused, not listed")`),
		x("ipc", "A opens B's SysV shared memory key and /dev/shm file", "ENOENT", `libc.shmget.restype = ctypes.c_int
r = libc.shmget(0x5e1f0000 | (int(TAG[-4:], 16) & 0xffff), 0, 0)
got = []
if r >= 0: got.append("shm id %d" % r)
if os.path.exists("/dev/shm/st-xsb-" + TAG): got.append("/dev/shm file")
report(("ok " + ", ".join(got)) if got else "err ENOENT")`),
	}
}

// crossHolder is B's side: a marked process holding sockets, IPC and files.
const crossHolder = `import socket, os, time, ctypes, sys
TAG = os.environ["ST_TAG"]
libc = ctypes.CDLL(None, use_errno=True)
s1 = socket.socket(socket.AF_UNIX); s1.bind("\0st-xsb-" + TAG); s1.listen(4)
s2 = socket.socket(); s2.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s2.bind(("127.0.0.1", 17777)); s2.listen(4)
libc.shmget(0x5e1f0000 | (int(TAG[-4:], 16) & 0xffff), 4096, 0o1600)
try: open("/dev/shm/st-xsb-" + TAG, "w").write("B")
except OSError: pass
open("/tmp/st-marker-" + TAG, "w").write("B")
open("/tmp/st-xsb.ready", "w").write("1")
time.sleep(900)
`

// crossPair returns the env's A and B sandboxes, B holding its markers.
func crossPair(ctx ctxT, e *attack.Env) (*api.Sandbox, *api.Sandbox, error) {
	b, ready := e.Shared("cross-b")
	if !ready {
		var err error
		if b, err = e.Group(ctx, "cross-b"); err != nil {
			return nil, nil, err
		}
		if err := writeFileIn(ctx, e, b.ID, "/tmp/st-xsb.py", crossHolder); err != nil {
			return nil, nil, err
		}
		out, exit, err := e.Sh(ctx, b.ID, `(setsid python3 /tmp/st-xsb.py st-xsb-marker-$ST_TAG >/tmp/st-xsb.log 2>&1 &); for i in $(seq 200); do test -e /tmp/st-xsb.ready && exit 0; sleep 0.05; done; cat /tmp/st-xsb.log; exit 1`)
		if err != nil || exit.Code != 0 {
			return nil, nil, fmt.Errorf("the holder in sandbox B did not start: %v %s", errText(err), strings.TrimSpace(out))
		}
	}
	a, err := e.Group(ctx, "cross-a")
	return a, b, err
}
