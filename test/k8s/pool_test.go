package k8s

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestWarmPoolOnRealNode runs berth's engine (internal/engine/enginetest: the
// daemon's assembly, over SQLite) on the Kubernetes backend against
// the real apiserver and node: a warm pool of 2 for a template makes two
// pods that are Running before any claim; a create without a name claims
// one of them — the same pod (UID and creation time from before the
// claim), no new one — and an exec in it sees the claimant's env, its
// secret and the member's hostname; a named create is made cold (a pod's
// hostname cannot become the name); the pool refills to 2; a restart (a
// new engine and backend over the same store) adopts the members as they
// run, the same pods, and the claimed sandbox keeps answering; sized 0 it
// removes its spare members with nothing labelled left, while the claimed
// and cold sandboxes stay until deleted. Claim and cold create times are
// logged, not asserted.
func TestWarmPoolOnRealNode(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)

	importImages(t, c)

	kcfg := kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 90 * time.Second}
	b, err := kube.New(ctx, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Small pods: four of them (two members, the claimed one's refill, a
	// cold one) fit the node's CPU beside everything else on it.
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Source: "test", CreatedAt: time.Now(),
		Layers: []string{"sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		Config: store.TemplateConfig{Env: []string{"PATH=/bin"},
			Resources: &sandbox.Resources{CPUs: 0.1, MemoryBytes: 128 << 20, Pids: 256, DiskBytes: 256 << 20}}}); err != nil {
		t.Fatal(err)
	}
	mcfg := engine.Config{Node: "k8s:" + ns + "/berth", ReconcileInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	m, err := enginetest.New(mcfg, st, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	// Before the sandboxes' own cleanups are registered, so it runs
	// after them: they delete through the engine (m as it is then: the
	// restart below replaces it).
	t.Cleanup(func() { m.Close() })
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	k, _ := secrets.NewKey()
	kr, _ := secrets.NewKeyring(k)
	v := vault.New(st, kr)
	m.SetSecrets(v)
	if _, _, err := v.Put(ctx, "t1", "TOKEN", []byte("tok-9d2e")); err != nil {
		t.Fatal(err)
	}

	// The pool's members: running sandboxes whose pods are Running.
	members := func(skip ...string) []*sandbox.Sandbox {
		t.Helper()
		sbs, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*sandbox.Sandbox
		for _, sb := range sbs {
			if sb.Spec.Pool == "base" && !slices.Contains(skip, sb.ID) {
				out = append(out, sb)
			}
		}
		return out
	}
	podOf := func(id string) *corev1.Pod {
		t.Helper()
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	readyMembers := func(what string, skip ...string) []*sandbox.Sandbox {
		t.Helper()
		var ms []*sandbox.Sandbox
		waitFor(t, what, func() bool {
			ms = members(skip...)
			if len(ms) != 2 {
				return false
			}
			for _, sb := range ms {
				if p := podOf(sb.ID); sb.State != sandbox.StateRunning || p == nil || p.Status.Phase != corev1.PodRunning {
					return false
				}
			}
			// None being made: its maker may still hold a running
			// member's lock, and a claim passes a locked member by.
			p, err := m.Pool(ctx, "base")
			return err == nil && p.Starting == 0
		})
		return ms
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

	t1 := time.Now()
	if _, err := m.SetPool(ctx, "base", 2); err != nil {
		t.Fatal(err)
	}
	ready := readyMembers("two members Running")
	t.Logf("pool of 2 ready (pods Running, agents answering) in %v", time.Since(t1).Round(time.Millisecond))
	if p, err := m.Pool(ctx, "base"); err != nil || p.Ready != 2 || p.Starting != 0 {
		t.Fatalf("pool %+v, %v: want 2 ready", p, err)
	}
	uids := map[string]types.UID{}
	for _, sb := range ready {
		uids[sb.ID] = podOf(sb.ID).UID
	}

	// The claim: the create takes a member's pod as it runs.
	t2 := time.Now()
	claimed, err := m.Create(ctx, &engine.CreateRequest{Template: "base", Env: map[string]string{"K": "v"},
		Secrets: []sandbox.SecretRef{{Name: "TOKEN", Env: "GH_TOKEN"}}}, engine.CreateOptions{Actor: "test", Tenant: "t1"})
	claimTook := time.Since(t2)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _, _ = m.Delete(context.Background(), claimed.ID, "test", sandbox.CauseUser, "test cleanup") })
	uid, wasMember := uids[claimed.ID]
	if !wasMember || claimed.State != sandbox.StateRunning || claimed.Spec.Pool != "" || claimed.Tenant != "t1" {
		t.Fatalf("create made %s (%s, pool %q, tenant %q); want a claimed member of %v", claimed.ID, claimed.State, claimed.Spec.Pool, claimed.Tenant, uids)
	}
	if p := podOf(claimed.ID); p == nil || p.UID != uid || !p.CreationTimestamp.Time.Before(t2) {
		t.Fatalf("the claimed sandbox's pod is not the member's pod made before the claim: %+v", p)
	}
	if got, want := exec(claimed.ID, `printf '%s/%s/%s' "$K" "$GH_TOKEN" "$(hostname)"`), "v/tok-9d2e/"+claimed.Hostname(); got != want {
		t.Fatalf("exec in the claimed sandbox = %q, want %q (claimant's env, its secret, the member's hostname)", got, want)
	}

	// A named create: cold, with the name as the hostname.
	t3 := time.Now()
	cold, err := m.Create(ctx, &engine.CreateRequest{Template: "base", Name: "cold"}, engine.CreateOptions{Actor: "test"})
	coldTook := time.Since(t3)
	if err != nil {
		t.Fatalf("cold create: %v", err)
	}
	t.Cleanup(func() { _, _ = m.Delete(context.Background(), cold.ID, "test", sandbox.CauseUser, "test cleanup") })
	if _, ok := uids[cold.ID]; ok {
		t.Fatalf("the named create claimed member %s, whose hostname cannot change", cold.ID)
	}
	if got := exec(cold.ID, "hostname"); got != "cold\n" {
		t.Fatalf("cold sandbox's hostname %q", got)
	}
	t.Logf("create to running: warm-pool claim %v, cold %v", claimTook.Round(time.Millisecond), coldTook.Round(time.Millisecond))

	// Refilled to 2 (the refill starts at the claim).
	refilled := readyMembers("the pool refilled to 2", claimed.ID)
	t.Logf("pool back to 2 ready members %v after the claim", time.Since(t2).Round(time.Millisecond))
	if p, err := m.Pool(ctx, "base"); err != nil || p.Hits != 1 {
		t.Fatalf("pool %+v, %v: want 1 hit", p, err)
	}
	refUIDs := map[string]types.UID{}
	for _, sb := range refilled {
		refUIDs[sb.ID] = podOf(sb.ID).UID
	}
	// A restart: a new engine and backend over the same store adopt the
	// members as they run (same pods), and the pool is still 2 ready.
	m.Close()
	if b, err = kube.New(ctx, kcfg); err != nil {
		t.Fatal(err)
	}
	if m, err = enginetest.New(mcfg, st, nil, b); err != nil {
		t.Fatal(err)
	}
	m.SetSecrets(v)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sb := range refilled {
		before := sb.ID
		if p := podOf(before); p == nil || p.UID != refUIDs[before] || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Fatalf("member %s's pod after the restart: %v", before, p)
		}
	}
	if again := readyMembers("the members adopted after the restart", claimed.ID); !sameIDs(again, refilled) {
		t.Fatalf("members after the restart %v, want the adopted %v", ids(again), ids(refilled))
	}
	if got := exec(claimed.ID, `printf %s "$K"`); got != "v" {
		t.Fatalf("the claimed sandbox after the restart: %q", got)
	}
	rep, err := m.Doctor(ctx, false)
	if err != nil || !rep.Healthy {
		t.Fatalf("doctor: %+v %v", rep, err)
	}

	// Size 0: the spare members go, with everything labelled with them.
	if _, err := m.SetPool(ctx, "base", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the members to go", func() bool { return len(members()) == 0 })
	spare := map[string]bool{}
	for _, sb := range append(ready, refilled...) {
		if sb.ID != claimed.ID {
			spare[sb.ID] = true
		}
	}
	for id := range spare {
		waitFor(t, "member "+id+"'s objects to go", func() bool { return len(labelled(t, c, ns, id)) == 0 })
	}
	for _, id := range []string{claimed.ID, cold.ID} {
		if p := podOf(id); p == nil || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("sandbox %s's pod after the pool went: %v", id, p)
		}
	}
	for _, id := range []string{claimed.ID, cold.ID} {
		if _, err := m.Delete(ctx, id, "test", sandbox.CauseUser, "done"); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if left := labelled(t, c, ns, id); len(left) > 0 {
			t.Errorf("after deleting %s: %v", id, left)
		}
	}
	all, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelManagedBy + "=" + kube.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) > 0 {
		t.Errorf("%d berth pods left, first %s", len(all.Items), all.Items[0].Name)
	}
	if n := b.AgentRefusals(); n != 0 {
		t.Errorf("%d refusals of the backend's own agents", n)
	}
}

// testWriter sends the engine's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func ids(sbs []*sandbox.Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	slices.Sort(out)
	return out
}

func sameIDs(a, b []*sandbox.Sandbox) bool { return slices.Equal(ids(a), ids(b)) }
