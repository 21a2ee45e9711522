package k8s

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/node/kube/nodeagent"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestGVisorFreezeOnRealNode runs berth's engine on the Kubernetes backend
// with two classes, runc (the default) and runsc (RuntimeClass gvisor),
// and berth's node agent (`berth kube-node-agent`, started on the host as
// a DaemonSet would run it on the node, with the identity the backend made
// in its Secret):
//   - a runsc sandbox runs under gVisor (its dmesg is gVisor's) and its
//     class says freeze;
//   - pause records paused and the node agent reports the pod's sandbox
//     paused, and a restart (new backend and engine, same store) adopts
//     it paused; resume brings the same counter process back, its count
//     continuing from where it was (memory kept), not from 1;
//   - quarantine freezes it and cuts its network: the egress policy keeps
//     its rules in its annotations but allows nothing; release restores
//     them and the counter goes on;
//   - a runc sandbox is refused as before (pause of an ephemeral one,
//     quarantine) and is unharmed;
//   - the node agent serves no one else: a caller with another identity is
//     refused at the handshake, a listener with another identity is refused
//     by the daemon (counted), a namespace it does not serve is 403, a runc
//     pod is 404;
//   - after the deletes nothing labelled is left (and checkGone: nothing
//     on the host).
func TestGVisorFreezeOnRealNode(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{GVisor: true})
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	importImages(t, c)

	port := freeNodePort(t, c.NodeIP())
	kcfg := kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 120 * time.Second,
		Classes: []kube.ClassMap{{Name: "runc"}, {Name: kube.GVisorClass, RuntimeClass: kubeenv.GVisorRuntimeClass}},
		// Mode egress needs a resolver address; none is served (the
		// test reads the policies, the pods resolve nothing).
		Resolver:  kube.ResolverConfig{Address: netip.MustParseAddr("10.96.0.53")},
		NodeAgent: kube.NodeAgentConfig{Port: port}}
	b, err := kube.New(ctx, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range b.Classes() {
		if want := cl.Name == kube.GVisorClass; cl.Caps.Freeze != want {
			t.Fatalf("class %s: freeze %v, want %v", cl.Name, cl.Caps.Freeze, want)
		}
	}
	if err := node.CheckCaps(b); err != nil {
		t.Fatal(err)
	}

	// The node agent, with the node-agent parts of the Secret the backend
	// made (as the DaemonSet mounts them).
	sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "berth-node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node agents' identity: %v", err)
	}
	tlsDir := filepath.Join(t.TempDir(), "node-agent")
	writeAgentFiles(t, tlsDir, sec.Data)
	c.StartProcess(t, "node-agent", berthBinary(t), "kube-node-agent",
		"--listen", net.JoinHostPort(c.NodeIP(), strconv.Itoa(port)), "--tls-dir", tlsDir,
		"--namespace", ns, "--root", c.RunscRoot(), "--runsc", c.Runsc())
	waitFor(t, "the node agent to listen", func() bool {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.NodeIP(), strconv.Itoa(port)), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Source: "test", CreatedAt: time.Now(),
		Layers: []string{"sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		Config: store.TemplateConfig{Env: []string{"PATH=/bin"},
			Resources: &sandbox.Resources{CPUs: 0.2, MemoryBytes: 256 << 20, Pids: 256, DiskBytes: 256 << 20}}}); err != nil {
		t.Fatal(err)
	}
	mcfg := engine.Config{Node: "k8s:" + ns + "/berth", ReconcileInterval: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	m, err := enginetest.New(mcfg, st, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	exec := func(id, script string) string {
		t.Helper()
		var out bytes.Buffer
		ex, err := m.Exec(ctx, id, &engine.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second},
			engine.ExecIO{Stdout: &out, Stderr: &out}, "test")
		if err != nil || ex.Code != 0 {
			t.Fatalf("exec %q in %s: %v, exit %d, output %q", script, id, err, ex.Code, out.String())
		}
		return out.String()
	}
	create := func(req *engine.CreateRequest) *sandbox.Sandbox {
		t.Helper()
		t1 := time.Now()
		sb, err := m.Create(ctx, req, engine.CreateOptions{Actor: "test"})
		if err != nil {
			t.Fatalf("create %s: %v", req.Runtime, err)
		}
		t.Logf("%s sandbox %s running in %v", req.Runtime, sb.ID, time.Since(t1).Round(time.Millisecond))
		t.Cleanup(func() { _, _ = m.Delete(context.Background(), sb.ID, "test", sandbox.CauseUser, "test cleanup") })
		return sb
	}
	state := func(id string) sandbox.State {
		t.Helper()
		sb, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}

	g := create(&engine.CreateRequest{Template: "base", Runtime: kube.GVisorClass, Network: "egress",
		Allow: []string{"tcp://192.0.2.0/24:443"}})
	if out := exec(g.ID, "dmesg | head -1"); !strings.Contains(out, "gVisor") {
		t.Fatalf("the runsc sandbox's dmesg is not gVisor's: %q", out)
	}
	// A counter: its count lives in the shell's memory, written out each
	// tick with its pid.
	exec(g.ID, `setsid /bin/sh -c 'i=0; while true; do i=$((i+1)); echo "$$ $i" > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	count := func() (pid string, n int) {
		t.Helper()
		f := strings.Fields(exec(g.ID, "cat /tmp/count"))
		if len(f) != 2 {
			t.Fatalf("count file: %q", f)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatal(err)
		}
		return f[0], n
	}
	var pid0 string
	var n0 int
	waitFor(t, "the counter to count", func() bool {
		var out bytes.Buffer
		ex, err := m.Exec(ctx, g.ID, &engine.ExecRequest{Cmd: []string{"/bin/cat", "/tmp/count"}, Timeout: 30 * time.Second},
			engine.ExecIO{Stdout: &out}, "test")
		if err != nil || ex.Code != 0 {
			return false
		}
		pid0, n0 = count()
		return n0 >= 3
	})
	sbStatus := func() node.Status {
		t.Helper()
		sb, err := m.Get(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Status(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Pause: frozen on the node, paused in the record.
	if _, err := m.Pause(ctx, g.ID, "test"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if s := state(g.ID); s != sandbox.StatePaused {
		t.Fatalf("after pause the record says %s", s)
	}
	if s := sbStatus(); s != node.StatusPaused {
		t.Fatalf("after pause the node says %s", s)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+g.ID, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the paused sandbox's pod: %v (a pause must not stop it)", err)
	}
	// A restart while paused: a new backend and engine over the same
	// store find it paused on the node and adopt it as it is.
	m.Close()
	b.Close(false)
	if b, err = kube.New(ctx, kcfg); err != nil {
		t.Fatal(err)
	}
	if m, err = enginetest.New(mcfg, st, nil, b); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if s, n := state(g.ID), sbStatus(); s != sandbox.StatePaused || n != node.StatusPaused {
		t.Fatalf("after a restart: record %s, node %s; want both paused", s, n)
	}
	if _, err := m.Resume(ctx, g.ID, "test"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if s := sbStatus(); s != node.StatusRunning {
		t.Fatalf("after resume the node says %s", s)
	}
	pid1, n1 := count()
	if pid1 != pid0 || n1 < n0 {
		t.Fatalf("after resume the counter is pid %s at %d; before the pause pid %s at %d (the process and its memory must be kept)", pid1, n1, pid0, n0)
	}
	waitFor(t, "the counter to go on after resume", func() bool { p, n := count(); return p == pid0 && n > n1 })
	t.Logf("counter pid %s: %d before the pause, %d just after the resume", pid0, n0, n1)

	// Quarantine: frozen, and the network cut.
	policy := func() (cut bool, egressRules int) {
		t.Helper()
		p, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, "berth-"+g.ID+"-net", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.Annotations[kube.AnnotationAllow], "192.0.2.0/24") {
			t.Fatalf("the policy lost its rules: %v", p.Annotations)
		}
		return p.Annotations[kube.AnnotationCut] == "true", len(p.Spec.Egress)
	}
	if cut, n := policy(); cut || n < 2 {
		t.Fatalf("before the quarantine: cut %v, %d egress rules (want the resolver's and the rule's)", cut, n)
	}
	if _, err := m.Quarantine(ctx, g.ID, "test"); err != nil {
		t.Fatalf("quarantine: %v", err)
	}
	if s := state(g.ID); s != sandbox.StateQuarantined {
		t.Fatalf("after quarantine the record says %s", s)
	}
	if s := sbStatus(); s != node.StatusPaused {
		t.Fatalf("quarantined, the node says %s", s)
	}
	if cut, n := policy(); !cut || n != 0 {
		t.Fatalf("quarantined: cut %v, %d egress rules (want cut, none)", cut, n)
	}
	if _, err := m.Release(ctx, g.ID, "test"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if s := state(g.ID); s != sandbox.StateRunning {
		t.Fatalf("after release the record says %s", s)
	}
	if cut, n := policy(); cut || n < 2 {
		t.Fatalf("released: cut %v, %d egress rules", cut, n)
	}
	_, n2 := count()
	waitFor(t, "the counter to go on after release", func() bool { p, n := count(); return p == pid0 && n > n2 })

	// A runc sandbox: refused as before, unharmed.
	r := create(&engine.CreateRequest{Template: "base", Runtime: "runc"})
	if _, err := m.Pause(ctx, r.ID, "test"); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("pause of an ephemeral runc sandbox: %v, want not supported", err)
	}
	if _, err := m.Quarantine(ctx, r.ID, "test"); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("quarantine of a runc sandbox: %v, want not supported", err)
	}
	if s := state(r.ID); s != sandbox.StateRunning {
		t.Fatalf("the refused runc sandbox is %s", s)
	}
	if out := exec(r.ID, "echo unharmed"); out != "unharmed\n" {
		t.Fatalf("runc sandbox after the refusals: %q", out)
	}

	// The node agent's door.
	ident := agenttls.Identity(sec.Data)
	genuine, err := nodeagent.NewClient(ident, port)
	if err != nil {
		t.Fatal(err)
	}
	defer genuine.Close()
	gpod := "berth-" + g.ID
	if s, err := genuine.Do(ctx, c.NodeIP(), ns, gpod, ""); err != nil || s != nodeagent.StatusRunning {
		t.Fatalf("the genuine client: %q, %v", s, err)
	}
	if _, err := genuine.Do(ctx, c.NodeIP(), "default", gpod, "pause"); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("a namespace the node agent does not serve: %v, want permission denied", err)
	}
	if _, err := genuine.Do(ctx, c.NodeIP(), ns, "kube-proxy", "pause"); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("a pod that is not berth's: %v, want permission denied", err)
	}
	if _, err := genuine.Do(ctx, c.NodeIP(), ns, "berth-"+r.ID, "pause"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a runc pod: %v, want not found", err)
	}
	// A caller with a key pair of its own (and the node agent's
	// certificate, which is no secret): the node agent refuses it at the
	// handshake.
	other, err := agenttls.NewIdentity("impostor")
	if err != nil {
		t.Fatal(err)
	}
	caller := agenttls.Identity{agenttls.AgentCert: ident[agenttls.AgentCert],
		agenttls.DaemonCert: other[agenttls.DaemonCert], agenttls.DaemonKey: other[agenttls.DaemonKey]}
	impostorClient, err := nodeagent.NewClient(caller, port)
	if err != nil {
		t.Fatal(err)
	}
	defer impostorClient.Close()
	if s, err := impostorClient.Do(ctx, c.NodeIP(), ns, gpod, "pause"); err == nil {
		t.Fatalf("a caller without the daemon's key paused the pod: %q", s)
	} else if errors.Is(err, nodeagent.ErrRefused) {
		t.Fatalf("the impostor caller refused the genuine node agent (%v): the test did not reach the node agent's check", err)
	} else {
		t.Logf("the impostor caller: %v", err)
	}
	if s := sbStatus(); s != node.StatusRunning {
		t.Fatalf("after the impostor caller the node says %s", s)
	}
	// A listener with an identity of its own where the daemon expects
	// the node agent: the daemon refuses it and counts it.
	impDir := filepath.Join(t.TempDir(), "impostor")
	writeAgentFiles(t, impDir, other)
	impPort := freeNodePort(t, c.NodeIP())
	c.StartProcess(t, "impostor-node-agent", berthBinary(t), "kube-node-agent",
		"--listen", net.JoinHostPort(c.NodeIP(), strconv.Itoa(impPort)), "--tls-dir", impDir,
		"--namespace", ns, "--root", c.RunscRoot(), "--runsc", c.Runsc())
	toImpostor, err := nodeagent.NewClient(ident, impPort)
	if err != nil {
		t.Fatal(err)
	}
	defer toImpostor.Close()
	waitFor(t, "the impostor to listen", func() bool {
		_, err := toImpostor.Do(ctx, c.NodeIP(), ns, gpod, "")
		return errors.Is(err, nodeagent.ErrRefused)
	})
	// A backend whose node agent port is the impostor's: its freeze is
	// refused, counted and reported as a security event.
	kcfg2 := kcfg
	kcfg2.NodeAgent.Port = impPort
	b2, err := kube.New(ctx, kcfg2)
	if err != nil {
		t.Fatal(err)
	}
	var secEvents int
	b2.Start(node.Hooks{Event: func(ev *sandbox.Event) {
		if ev.SandboxID == g.ID && ev.Type == "security" && ev.Outcome == "refused" {
			secEvents++
		}
	}})
	gsb, err := m.Get(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Freeze(ctx, gsb); !errors.Is(err, nodeagent.ErrRefused) {
		t.Fatalf("freeze through the impostor node agent: %v, want refused", err)
	}
	b2.Close(false)
	if n := b2.AgentRefusals(); n != 1 || secEvents != 1 {
		t.Errorf("the impostor node agent: %d refusals counted, %d security events; want 1 and 1", n, secEvents)
	}
	if s := sbStatus(); s != node.StatusRunning {
		t.Fatalf("the impostor listener changed the pod: %s", s)
	}
	if n := b.AgentRefusals(); n != 0 {
		t.Errorf("%d refusals by the genuine backend", n)
	}
	if log := c.ProcessLog("node-agent", 200); !strings.Contains(log, "node agent refused") {
		t.Errorf("the node agent's log records no refusal:\n%s", log)
	}

	// Deletes: nothing labelled is left of either.
	for _, id := range []string{g.ID, r.ID} {
		if _, err := m.Delete(ctx, id, "test", sandbox.CauseUser, "done"); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if left := labelled(t, c, ns, id); len(left) > 0 {
			t.Errorf("left of %s: %v", id, left)
		}
	}
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}

// writeAgentFiles writes the node agent's parts of an identity into dir,
// as the DaemonSet's Secret volume holds them (never the daemon's key).
func writeAgentFiles(t *testing.T, dir string, data map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range agenttls.AgentFiles {
		if err := os.WriteFile(filepath.Join(dir, f), data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// freeNodePort is a TCP port free on addr now.
func freeNodePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
