package catalogue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
	"github.com/berth-sh/berth/internal/testenv"
)

// The egress attacks never send a packet off this machine. They run a
// second private daemon inside a network namespace the selftest makes
// (nsenter --net), whose only link is a veth into a second selftest-made
// namespace, "the internet", holding a test host at a documentation
// address (198.51.100.2) with TCP listeners. Neither namespace has a
// route to the real network; both are deleted afterwards. The whole
// world exists only while /tmp/berth-net.lock is held (the lock every
// egress-mode test on this host takes).
const (
	egressHostAddr = "198.51.100.1/24"
	egressTestHost = "198.51.100.2"
	egressDenied   = 80   // no rule allows it
	egressAllowed  = 8081 // the positive control: allowed by a rule
	netLockPath    = "/tmp/berth-net.lock"
)

type egressWorld struct {
	host, inet, hostIf string
	made               []string
	dir                string
	d                  *testenv.Daemon
	denied, allowed    atomic.Int32
	lns                []net.Listener
	lock               *os.File
	lockWait           time.Duration // waiting for the lock and making the world
}

func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startEgress takes the network lock and makes the world.
func startEgress(ctx context.Context, bin, workDir string) (w *egressWorld, err error) {
	if bin == "" || workDir == "" {
		return nil, fmt.Errorf("needs the private daemon mode (berth selftest --private)")
	}
	for _, t := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("%s not found: %w", t, err)
		}
	}
	var rb [3]byte
	rand.Read(rb[:])
	tag := hex.EncodeToString(rb[:])
	w = &egressWorld{host: "berth-st-h-" + tag, inet: "berth-st-i-" + tag, hostIf: "bsh" + tag,
		dir: filepath.Join(workDir, "egress-"+tag)}
	lf, err := os.OpenFile(netLockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	w.lock = lf
	t0 := time.Now()
	defer func() { w.lockWait = time.Since(t0) }()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		lf.Close()
		return nil, fmt.Errorf("flock %s: %w", netLockPath, err)
	}
	defer func() {
		if err != nil {
			w.close(context.WithoutCancel(ctx))
			w = nil
		}
	}()
	for _, ns := range []string{w.host, w.inet} {
		if err := ipRun("netns", "add", ns); err != nil {
			return w, err
		}
		w.made = append(w.made, ns)
	}
	// The veth is made with its ends already in their namespaces: it never
	// exists in the host's.
	for _, s := range [][]string{
		{"link", "add", w.hostIf, "netns", w.host, "type", "veth", "peer", "name", "bsi" + tag, "netns", w.inet},
		{"-n", w.host, "addr", "add", egressHostAddr, "dev", w.hostIf},
		{"-n", w.inet, "addr", "add", egressTestHost + "/24", "dev", "bsi" + tag},
		{"-n", w.host, "link", "set", "lo", "up"},
		{"-n", w.inet, "link", "set", "lo", "up"},
		{"-n", w.host, "link", "set", w.hostIf, "up"},
		{"-n", w.inet, "link", "set", "bsi" + tag, "up"},
	} {
		if err := ipRun(s...); err != nil {
			return w, err
		}
	}
	for _, p := range []int{egressDenied, egressAllowed} {
		cnt := &w.denied
		if p == egressAllowed {
			cnt = &w.allowed
		}
		ln, err := listenIn(w.inet, fmt.Sprintf(":%d", p))
		if err != nil {
			return w, fmt.Errorf("test host listener in %s: %w", w.inet, err)
		}
		w.lns = append(w.lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				cnt.Add(1)
				c.Write([]byte("hello from the test host\n"))
				c.Close()
			}
		}()
	}
	if err := os.MkdirAll(w.dir, 0o711); err != nil {
		return w, err
	}
	if w.d, err = testenv.Start(ctx, testenv.Config{Binary: bin, DataDir: w.dir, Netns: w.host,
		LogFile: filepath.Join(w.dir, "daemon.log"), UserAgent: "berth-selftest"}); err != nil {
		return w, fmt.Errorf("egress daemon: %w", err)
	}
	return w, nil
}

// listenIn listens on addr in network namespace ns, from a locked thread
// moved there that exits with its goroutine.
func listenIn(ns, addr string) (net.Listener, error) {
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// close deletes the sandboxes, stops the daemon, deletes the namespaces
// and releases the lock; it returns what went wrong.
func (w *egressWorld) close(ctx context.Context) []string {
	var errs []string
	if w.d != nil {
		c := w.d.Client()
		if sbs, err := c.ListSandboxes(ctx, false); err == nil {
			for _, sb := range sbs {
				if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					errs = append(errs, fmt.Sprintf("egress daemon: deleting %s: %v", sb.ID, err))
				}
			}
		}
		if rep, err := c.Doctor(ctx, false); err != nil {
			errs = append(errs, "egress daemon: doctor: "+err.Error())
		} else if !rep.Healthy {
			for _, f := range rep.Findings {
				errs = append(errs, fmt.Sprintf("egress daemon: doctor: %s %s: %s", f.Kind, f.ID, f.Detail))
			}
		}
		if err := w.d.Stop(); err != nil {
			errs = append(errs, "egress daemon: stop: "+err.Error())
		}
		// Its namespace still there to look in (veths, bridge, tables).
		leaks, err := testenv.Clean(w.d.Scope())
		for _, l := range leaks {
			errs = append(errs, "egress daemon: left: "+l.String())
		}
		if err != nil {
			errs = append(errs, "egress daemon: "+err.Error())
		}
	}
	for _, ln := range w.lns {
		ln.Close()
	}
	for _, ns := range w.made {
		if err := ipRun("netns", "del", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if w.lock != nil {
		w.lock.Close() // releases the flock
	}
	return errs
}

// withEgress runs f against a fresh egress sandbox (allowing only the
// control port) of a fresh egress world.
func withEgress(f func(ctx ctxT, e *attack.Env, w *egressWorld, sb *api.Sandbox) attack.Outcome) func(ctxT, *attack.Env) attack.Outcome {
	return func(ctx ctxT, e *attack.Env) (o attack.Outcome) {
		if e.Target.Binary == "" || e.Target.WorkDir == "" {
			return attack.NotApplicable("needs the private daemon mode (--private): egress runs against a selftest-made network namespace")
		}
		w, err := startEgress(ctx, e.Target.Binary, e.Target.WorkDir)
		if err != nil {
			return attack.Escaped("could not make the egress test network: %v", err)
		}
		defer func() {
			if errs := w.close(context.WithoutCancel(ctx)); len(errs) > 0 {
				o.Observed += "; cleanup: " + strings.Join(errs, "; ")
				o.Contained = false
			}
		}()
		sb, err := w.d.Client().CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: e.Class, Network: "egress",
			Allow: []string{fmt.Sprintf("tcp://%s:%d", egressTestHost, egressAllowed)}, TimeoutSeconds: 600})
		if err != nil {
			return attack.Escaped("egress create: %v", err)
		}
		o = f(ctx, e, w, sb)
		o.Observed += fmt.Sprintf(" (network made in %.1fs)", w.lockWait.Seconds())
		return o
	}
}

func egressExec(ctx ctxT, w *egressWorld, id, code string) (string, error) {
	var out attack.SyncBuffer
	_, err := w.d.Client().Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", attack.PyPrelude + code}, TimeoutSeconds: 30}, &out, &out)
	return out.String(), err
}

var egressDeny = withEgress(func(ctx ctxT, e *attack.Env, w *egressWorld, sb *api.Sandbox) attack.Outcome {
	code := fmt.Sprintf(`def conn(p):
    s = socket.socket(); s.settimeout(3)
    return oserr(lambda: s.connect((%q, p)))
print("CONTROL", conn(%d))
report(conn(%d))`, egressTestHost, egressAllowed, egressDenied)
	out, err := egressExec(ctx, w, sb.ID, code)
	if err != nil {
		return attack.Escaped("exec failed: %v", err)
	}
	r, _ := attack.Reported(out)
	control := "?"
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "CONTROL "); ok {
			control = v
		}
	}
	time.Sleep(300 * time.Millisecond)
	flows, _ := w.d.Client().Flows(ctx, sb.ID, 0)
	logged := false
	for _, f := range flows {
		if f.Decision == "deny" && strings.Contains(f.Dst, egressTestHost) && strings.Contains(f.Dst, fmt.Sprint(egressDenied)) {
			logged = true
		}
	}
	got := fmt.Sprintf("connect :%d %s, test host saw %d; denied flow logged %v; control :%d %s", egressDenied, r, w.denied.Load(), logged, egressAllowed, control)
	return attack.Judged(strings.HasPrefix(r, "err") && w.denied.Load() == 0 && logged, "%s", got)
})

var egressDNS = withEgress(func(ctx ctxT, e *attack.Env, w *egressWorld, sb *api.Sandbox) attack.Outcome {
	name := "berth-selftest-disallowed.example.com"
	out, err := egressExec(ctx, w, sb.ID, fmt.Sprintf(`socket.setdefaulttimeout(5)
report(oserr(lambda: socket.getaddrinfo(%q, 443)))`, name))
	if err != nil {
		return attack.Escaped("exec failed: %v", err)
	}
	r, _ := attack.Reported(out)
	time.Sleep(300 * time.Millisecond)
	flows, _ := w.d.Client().Flows(ctx, sb.ID, 0)
	logged := false
	for _, f := range flows {
		if f.Kind == "dns" && f.Decision == "deny" && strings.Contains(f.Name, "berth-selftest-disallowed") {
			logged = true
		}
	}
	return attack.Judged(!strings.HasPrefix(r, "ok") && logged, "lookup %s; denied query logged %v", attack.Clip(r, 60), logged)
})

// egressSecretHost is the host of the selftest's egress secret: no DNS
// answers it (the world has no resolver upstream), so nothing is dialled;
// what is tested is what the sandbox itself holds and can reach.
const egressSecretHost = "api.berth-selftest.invalid"

// egressSecret: a sandbox with a secret injected at egress holds only
// the placeholder (env, every process's environ, the secrets tmpfs),
// finds no CA key in its CA bundle, and cannot connect to the egress
// proxy's port on the gateway without the redirect.
var egressSecret = withEgress(func(ctx ctxT, e *attack.Env, w *egressWorld, _ *api.Sandbox) attack.Outcome {
	c := w.d.Client()
	value := "berth-selftest-value-" + e.Tag
	if _, err := c.SetSecret(ctx, "ST_TOKEN", value); err != nil {
		return attack.Escaped("secret set: %v", err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: e.Class, Network: "egress", TimeoutSeconds: 600,
		Allow:   []string{"tcp://" + egressSecretHost + ":443"},
		Secrets: []api.SecretRef{{Name: "ST_TOKEN", EgressHost: egressSecretHost}}})
	if err != nil {
		return attack.Escaped("create with an egress secret: %v", err)
	}
	out, err := egressExec(ctx, w, sb.ID, fmt.Sprintf(`v = %q
held = []
if os.environ.get("ST_TOKEN", "") == v: held.append("env")
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if v.encode() in open("/proc/%%s/environ" %% p, "rb").read(): held.append("environ " + p)
        except OSError: pass
for root, dirs, files in os.walk("/run/secrets"):
    for f in files:
        b = open(os.path.join(root, f), "rb").read()
        if v.encode() in b: held.append("file " + f)
        if b"PRIVATE KEY" in b: held.append("key in " + f)
gw = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(); s.settimeout(3)
r = oserr(lambda: s.connect((gw, 15443)))
print("PLACEHOLDER", os.environ.get("ST_TOKEN", "")[:25])
if held: report("ok holds " + ",".join(held))
else: report(r)`, value))
	if err != nil {
		return attack.Escaped("exec failed: %v", err)
	}
	r, _ := attack.Reported(out)
	ph := strings.Contains(out, "PLACEHOLDER berth-secret-placeholder-")
	return attack.Judged(strings.HasPrefix(r, "err") && ph, "proxy port straight: %s; env holds the placeholder %v", attack.Clip(r, 80), ph)
})
