package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
	"github.com/berth-sh/berth/internal/testenv/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop() // the private PostgreSQL cluster, if a test started it
	removeBuilt()
	os.Exit(code)
}

// replicaLeaseTTL is the replicas' --lease-ttl: short, so a takeover is
// quick (bound: TTL + TTL/3).
const replicaLeaseTTL = 3 * time.Second

// noWorkspace is the sandboxes' workdir: the builtin template's
// /workspace is a volume on the local backend, and the busybox image of
// these pods has none (an ephemeral sandbox on Kubernetes gets no claim).
const noWorkspace = "/tmp"

// small is each sandbox's size: the test node has two CPUs, and a pod's
// requests equal its limits.
var small = api.Resources{CPUs: 0.2, MemoryBytes: 64 << 20}

// berthReplica is one `berth serve --backend kubernetes` process.
type berthReplica struct {
	name string
	d    *testenv.Daemon
	c    *client.Client // the unix socket: the host admin
	addr string         // its plain HTTP listener on loopback
}

// freePort is a loopback port no one listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// nodeLease is the replica's view of the node lease, from doctor.
func (r *berthReplica) nodeLease(t *testing.T) (api.DoctorLease, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := r.c.Doctor(ctx, false)
	if err != nil {
		t.Logf("doctor on %s: %v", r.name, err)
		return api.DoctorLease{}, false
	}
	for _, l := range rep.Leases {
		if strings.HasPrefix(l.Name, "node:") {
			return l, true
		}
	}
	t.Fatalf("doctor on %s lists no node lease: %+v", r.name, rep.Leases)
	return api.DoctorLease{}, false
}

// leaderMetric is the replica's berth_reconcile_leader{lease="node"}
// from GET /metrics on its unix socket.
func (r *berthReplica) leaderMetric(t *testing.T) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", r.d.Socket())
		}}}
	resp, err := hc.Get("http://berth/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", r.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `berth_reconcile_leader{lease="node"} `); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("metrics of %s: no berth_reconcile_leader{lease=\"node\"} (status %s)", r.name, resp.Status)
	return ""
}

// waitOneHolder waits until exactly one of rs says it holds the node
// lease (and no other does) and returns it.
func waitOneHolder(t *testing.T, within time.Duration, rs ...*berthReplica) *berthReplica {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var holders []*berthReplica
		for _, r := range rs {
			if l, ok := r.nodeLease(t); ok && l.Held {
				holders = append(holders, r)
			}
		}
		if len(holders) == 1 {
			return holders[0]
		}
		if len(holders) > 1 {
			t.Fatalf("%s and %s both hold the node lease", holders[0].name, holders[1].name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica holds the node lease after %s", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateCounts counts sandbox id's state events into deleting and deleted.
func stateCounts(t *testing.T, c *client.Client, id string) (deleting, deleted int, evs []api.Event) {
	t.Helper()
	evs, err := c.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == "state" && ev.To == "deleting" {
			deleting++
		}
		if ev.Type == "state" && ev.To == "deleted" {
			deleted++
		}
	}
	return deleting, deleted, evs
}

// waitSandbox waits until sandbox id is in one of states, through c.
func waitSandbox(t *testing.T, c *client.Client, id string, within time.Duration, states ...string) *api.Sandbox {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		sb, err := c.GetSandbox(context.Background(), id)
		if err == nil {
			for _, s := range states {
				if string(sb.State) == s {
					return sb
				}
			}
		}
		if time.Now().After(deadline) {
			var st string
			if sb != nil {
				st = string(sb.State) + " (" + sb.Reason + ")"
			}
			t.Fatalf("sandbox %s is %s %v after %s; want %v", id, st, err, within, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// labelled lists what in ns carries berth's managed-by label.
func labelledAll(t *testing.T, c *kubeenv.Cluster, ns string) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: labels.Set{kube.LabelManagedBy: kube.ManagedBy}.String()}
	var left []string
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod/"+p.Name)
	}
	secrets, err := c.Client.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		left = append(left, "secret/"+s.Name)
	}
	pols, err := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pols.Items {
		left = append(left, "networkpolicy/"+p.Name)
	}
	return left
}

// replicaArgs are the flags of replicas of one installation: the store
// pgURL, the short replicaLeaseTTL and the keys every replica shares
// (written 0600, as keyfile wants them).
func replicaArgs(t *testing.T, pgURL string) []string {
	t.Helper()
	keys := t.TempDir()
	writeKey := func(name string, data []byte) string {
		p := filepath.Join(keys, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	random := func(n int) []byte { b := make([]byte, n); _, _ = rand.Read(b); return b }
	return []string{"--store", pgURL, "--lease-ttl", replicaLeaseTTL.String(),
		"--token-key-file", writeKey("token.key", random(32)),
		"--audit-key-file", writeKey("audit.key", random(32)),
		"--secrets-key-file", writeKey("secrets.key", []byte(base64.StdEncoding.EncodeToString(random(32))+"\n"))}
}

// serveOnCluster starts `berth serve --backend kubernetes` (the binary
// of this tree) on c's namespace ns and node, with a plain HTTP listener
// on loopback and the images importImages made; extra are more flags.
// It is stopped at the end of the test, its log tail shown if it failed.
func serveOnCluster(t *testing.T, c *kubeenv.Cluster, ns, name string, extra ...string) *berthReplica {
	t.Helper()
	return serveOnClusterEnv(t, c, ns, name, nil, extra...)
}

// serveOnClusterEnv is serveOnCluster with env added to the daemon's
// environment (failpoints).
func serveOnClusterEnv(t *testing.T, c *kubeenv.Cluster, ns, name string, env []string, extra ...string) *berthReplica {
	t.Helper()
	dir := t.TempDir()
	addr := freePort(t)
	d, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBinary(t), DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "berth.sock"),
		LogFile: filepath.Join(dir, "log"), ReadyTimeout: 90 * time.Second, StopTimeout: 20 * time.Second, Env: env,
		Args: append([]string{"--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--namespace", ns,
			"--agent-image", agentRef, "--image", baseRef, "--image-pull-policy", "Never", "--kube-node", c.NodeName,
			"--insecure-listen", addr}, extra...),
	})
	if err != nil {
		t.Fatalf("starting berth %s: %v", name, err)
	}
	r := &berthReplica{name: name, d: d, c: d.Client(), addr: addr}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("berth %s log tail:\n%s", name, d.LogTail(6000))
		}
	})
	return r
}

// TestReplicasOnRealCluster: two `berth serve --backend kubernetes`
// processes (the real binary, each with its own data dir, socket and
// port) on one real PostgreSQL and one real kube-apiserver and node,
// sharing the token, audit and secrets keys. A sandbox made through one
// is listed, exec'd and read through the other, and a lease token minted
// by one is accepted by the other; exactly one holds the node lease; an
// expiring sandbox is deleted exactly once; SIGKILL of the holder in the
// middle of a create hands the lease to the other within TTL + TTL/3,
// whose reconciler then deletes an expired sandbox once and finishes (or
// fails and tears down) the interrupted create — never left creating;
// nothing labelled is left at the end.
func TestReplicasOnRealCluster(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	pgURL := pgtest.Database(t)

	importImages(t, c)

	shared := replicaArgs(t, pgURL)
	start := func(name string) *berthReplica {
		t.Helper()
		return serveOnCluster(t, c, ns, name, shared...)
	}
	a, b := start("a"), start("b")
	t.Logf("two replicas up at %v", time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()

	holder := waitOneHolder(t, 3*replicaLeaseTTL, a, b)
	other := a
	if holder == a {
		other = b
	}
	// The other's view: held by another (once its keeper has read the row).
	for deadline := time.Now().Add(2 * replicaLeaseTTL); ; time.Sleep(100 * time.Millisecond) {
		l, _ := other.nodeLease(t)
		if l.Held {
			t.Fatalf("%s holds the node lease beside %s", other.name, holder.name)
		}
		if l.Holder != "" && l.Holder != l.Self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other replica's view of the node lease: %+v, want held by another", l)
		}
	}
	t.Logf("node lease held by %s", holder.name)
	if h, o := holder.leaderMetric(t), other.leaderMetric(t); h != "1" || o != "0" {
		t.Errorf("berth_reconcile_leader{lease=\"node\"}: holder %s, other %s; want 1 and 0", h, o)
	}

	// A sandbox made through a is listed, exec'd and read through b.
	sb, err := a.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "across", Workdir: noWorkspace, Resources: small})
	if err != nil {
		t.Fatalf("create through a: %v", err)
	}
	t.Logf("sandbox made through a at %v", time.Since(t0).Round(time.Millisecond))
	lst, err := b.c.ListSandboxes(ctx, false)
	if err != nil || len(lst) != 1 || lst[0].ID != sb.ID {
		t.Fatalf("list through b: %v %v, want a's sandbox", lst, err)
	}
	var out bytes.Buffer
	ex, err := b.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo via-b $(hostname); exit 3"},
		Env: map[string]string{"PATH": "/bin"}}, &out, &out)
	if err != nil || ex.Code != 3 || out.String() != "via-b across\n" {
		t.Fatalf("exec through b: %q %+v %v", out.String(), ex, err)
	}
	if _, err := a.c.WriteFile(ctx, sb.ID, "/tmp/from-a", 0o644, strings.NewReader("written through a\n")); err != nil {
		t.Fatalf("write through a: %v", err)
	}
	out.Reset()
	if _, _, err := b.c.ReadFile(ctx, sb.ID, "/tmp/from-a", &out); err != nil || out.String() != "written through a\n" {
		t.Fatalf("read through b: %q %v", out.String(), err)
	}
	// A lease token minted by a is accepted by b (the shared token key).
	lease, err := a.c.CreateLease(ctx, sb.ID, api.CreateLeaseRequest{Scopes: []string{"exec", "files"}, TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	lc, err := client.New("http://"+b.addr, lease.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	out.Reset()
	if ex, err := lc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"/bin/echo", "lease-of-a"}}, &out, io.Discard); err != nil || ex.Code != 0 || out.String() != "lease-of-a\n" {
		t.Fatalf("exec through b with a's lease token: %q %v", out.String(), err)
	}
	// ... and only for its own sandbox, and not forged.
	bad, _ := client.New("http://"+b.addr, lease.Token[:len(lease.Token)-4]+"AAAA")
	defer bad.Close()
	if _, err := bad.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"/bin/true"}}, io.Discard, io.Discard); !client.IsUnauthorized(err) {
		t.Errorf("forged lease token on b: %v, want unauthorized", err)
	}

	// An expiring sandbox, made through the replica not holding the
	// lease, is deleted once, by the holder.
	exp, err := other.c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutSeconds: 2, Workdir: noWorkspace, Resources: small})
	if err != nil {
		t.Fatal(err)
	}
	waitSandbox(t, a.c, exp.ID, 30*time.Second, "deleted")
	time.Sleep(2 * time.Second) // more passes of both reconcilers
	if dg, dd, evs := stateCounts(t, a.c, exp.ID); dg != 1 || dd != 1 {
		t.Errorf("expired sandbox: %d deleting and %d deleted events, want one each: %+v", dg, dd, evs)
	}

	// The holder is killed in the middle of a create.
	created := make(chan error, 1)
	go func() {
		_, err := holder.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "interrupted", Workdir: noWorkspace, Resources: small})
		created <- err
	}()
	var orphan *api.Sandbox
	for deadline := time.Now().Add(30 * time.Second); orphan == nil; time.Sleep(20 * time.Millisecond) {
		if s, err := other.c.GetSandbox(ctx, "interrupted"); err == nil && s.State == "creating" {
			orphan = s
		}
		if time.Now().After(deadline) {
			t.Fatal("the create through the holder never showed as creating")
		}
	}
	time.Sleep(300 * time.Millisecond) // its pod on its way
	killed := time.Now()
	holder.d.Kill()
	if err := <-created; err == nil {
		t.Log("the interrupted create answered before the kill")
	}
	for {
		if l, ok := other.nodeLease(t); ok && l.Held {
			break
		}
		if time.Since(killed) > 3*replicaLeaseTTL {
			t.Fatalf("%s did not take the node lease within %s of the holder's death", other.name, 3*replicaLeaseTTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("node lease taken over by %s %v after SIGKILL of %s (TTL %s)", other.name, took.Round(time.Millisecond), holder.name, replicaLeaseTTL)
	if bound := replicaLeaseTTL + replicaLeaseTTL/3 + time.Second; took > bound {
		t.Errorf("takeover took %v, want at most %v (TTL + TTL/3, and the doctor poll)", took, bound)
	}
	// An expiring sandbox that only the survivor, holding the lease now,
	// can delete.
	exp2, err := other.c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutSeconds: 1, Workdir: noWorkspace, Resources: small})
	if err != nil {
		t.Fatal(err)
	}
	// The interrupted create ends running or deleted, never creating.
	end := waitSandbox(t, other.c, orphan.ID, 60*time.Second, "running", "deleted")
	t.Logf("interrupted create ended %s %v after the kill: %s", end.State, time.Since(killed).Round(time.Millisecond), end.Reason)
	if end.State == "running" {
		out.Reset()
		if _, err := other.c.Exec(ctx, orphan.ID, api.ExecRequest{Cmd: []string{"/bin/echo", "finished"}}, &out, io.Discard); err != nil || out.String() != "finished\n" {
			t.Errorf("exec in the finished create: %q %v", out.String(), err)
		}
	}
	waitSandbox(t, other.c, exp2.ID, 30*time.Second, "deleted")
	time.Sleep(time.Second)
	if dg, dd, evs := stateCounts(t, other.c, exp2.ID); dg != 1 || dd != 1 {
		t.Errorf("sandbox expired after the takeover: %d deleting and %d deleted events, want one each: %+v", dg, dd, evs)
	}

	// The survivor removes the rest; nothing labelled is left.
	for _, id := range []string{sb.ID, orphan.ID} {
		if _, err := other.c.DeleteSandbox(ctx, id, true); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := labelledAll(t, c, ns)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in %s: %v", ns, left)
		}
	}
	rep, err := other.c.Doctor(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Kind != "template" { // the host's Python packages: not this test's
			t.Errorf("doctor on the survivor: %+v", f)
		}
	}
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}
