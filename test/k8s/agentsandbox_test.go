package k8s

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/agentsandbox"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestAgentSandboxDoor runs berth's engine (internal/engine/enginetest over
// SQLite) on the Kubernetes backend with the agent-sandbox door
// (internal/agentsandbox) against the real apiserver and node. The door
// installs the pinned CRDs; agent-sandbox's own example manifests
// (testdata/agentsandbox, from the pinned commit, images set to the test
// image) are applied as kubectl applies them — server-side apply through
// client-go's dynamic client, field manager "kubectl" (the cached tools
// build no kubectl binary) — in a namespace whose Secret holds a member
// key of tenant t1:
//
//   - the hello-world Sandbox reaches Ready (reason DependenciesReady,
//     podIPs, the pod-name annotation naming berth's pod), and an exec
//     through berth's engine into its berth sandbox answers, as t1;
//   - a SandboxTemplate and a SandboxWarmPool of 1: the pool's member
//     runs before the claim; the example SandboxClaim adopts that very
//     member (the same berth sandbox, the same pod UID), its status names
//     it and Ready, and the pool makes a replacement;
//   - a malformed Sandbox (an image berth does not serve, two
//     containers) gets Ready False, reason InvalidSpec, with the reason;
//   - a namespace holding a viewer key: its Sandbox is Forbidden and
//     nothing is made; a namespace without a key: Unauthenticated;
//   - a claim written with tenant t1's sandbox id in its annotation, in a
//     namespace of tenant t2 that has a pool of its own: gets nothing of
//     it, and t1's sandbox survives that claim's deletion;
//   - the audit log holds the door's creates, by the key's actor;
//   - deleting the objects deletes their berth sandboxes (the finalizer
//     holds each until then): the pool first, its spare member with it
//     and the claimed one kept, then the claim with its sandbox; nothing
//     of berth's is left.
func TestAgentSandboxDoor(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	importImages(t, c)

	b, err := kube.New(ctx, kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Source: "test", CreatedAt: time.Now(),
		Layers: []string{"sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		Config: store.TemplateConfig{Env: []string{"PATH=/bin"},
			Resources: &sandbox.Resources{CPUs: 0.1, MemoryBytes: 128 << 20, Pids: 256, DiskBytes: 256 << 20}}}); err != nil {
		t.Fatal(err)
	}
	m, err := enginetest.New(engine.Config{Node: "k8s:" + ns + "/berth", ReconcileInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}, st, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	auditLog := audit.New(st, bytes.Repeat([]byte{7}, 32), slog.Default())

	key := func(tenant string, role auth.Role) string {
		id, secret := auth.NewKey()
		scopes, _ := auth.RoleScopes(role)
		var ss []string
		for _, s := range scopes {
			ss = append(ss, string(s))
		}
		if err := st.CreateAPIKey(ctx, &store.APIKey{ID: id, Tenant: tenant, Hash: auth.Hash(secret), Role: string(role),
			Scopes: ss, CreatedAt: time.Now(), Prefix: auth.PrefixOf(id)}); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	team := func(name, k string) {
		c.CreateNamespace(t, name)
		if k == "" {
			return
		}
		if _, err := c.Client.CoreV1().Secrets(name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: agentsandbox.KeySecret},
			Data: map[string][]byte{agentsandbox.KeySecretData: []byte(k)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	team("team-a", key("t1", auth.RoleMember))
	team("team-v", key("t1", auth.RoleViewer))
	team("team-none", "")
	team("team-b", key("t2", auth.RoleMember))

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := agentsandbox.InstallCRDs(ctx, dyn); err != nil {
		t.Fatal(err)
	}
	door := agentsandbox.New(agentsandbox.Config{Engine: m, Auth: auth.New(st, nil), Audit: auditLog, Dynamic: dyn,
		Client: c.Client, SandboxNamespace: ns, Templates: map[string]string{baseRef: "base"}, Resync: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	done := make(chan error, 1)
	go func() { done <- door.Run(ctx) }()
	defer func() { cancel(); <-done }()

	apply := func(namespace, file string) *unstructured.Unstructured {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", "agentsandbox", file))
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			t.Fatal(err)
		}
		gvr := gvrOf(obj)
		js, _ := obj.MarshalJSON()
		force := true
		u, err := dyn.Resource(gvr).Namespace(namespace).Patch(ctx, obj.GetName(), types.ApplyPatchType, js,
			metav1.PatchOptions{FieldManager: "kubectl", Force: &force})
		if err != nil {
			t.Fatalf("apply %s: %v", file, err)
		}
		return u
	}
	get := func(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
		t.Helper()
		u, err := dyn.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ready := func(u *unstructured.Unstructured) (status, reason, msg string) {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Ready" {
				return cm["status"].(string), cm["reason"].(string), cm["message"].(string)
			}
		}
		return "", "", ""
	}
	waitReady := func(gvr schema.GroupVersionResource, namespace, name, wantStatus, wantReason string) *unstructured.Unstructured {
		t.Helper()
		var u *unstructured.Unstructured
		deadline := time.Now().Add(90 * time.Second)
		for {
			u = get(gvr, namespace, name)
			if s, r, _ := ready(u); s == wantStatus && r == wantReason {
				return u
			}
			if time.Now().After(deadline) {
				js, _ := u.MarshalJSON()
				t.Fatalf("timed out waiting for %s/%s Ready=%s %s: %s", namespace, name, wantStatus, wantReason, js)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t1ctx := identity.With(ctx, identity.Caller{Tenant: "t1", Actor: "test"})
	exec := func(id, script string) string {
		t.Helper()
		var out bytes.Buffer
		ex, err := m.Exec(t1ctx, id, &engine.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second},
			engine.ExecIO{Stdout: &out, Stderr: &out}, "test")
		if err != nil || ex.Code != 0 {
			t.Fatalf("exec %q in %s: %v, exit %d, output %q", script, id, err, ex.Code, out.String())
		}
		return out.String()
	}

	// The hello-world example: Ready, with its pod's address.
	t1 := time.Now()
	apply("team-a", "hello-world.yaml")
	hw := waitReady(agentsandbox.SandboxGVR, "team-a", "hello-world", "True", "DependenciesReady")
	t.Logf("hello-world Ready in %v", time.Since(t1).Round(time.Millisecond))
	hwID := hw.GetAnnotations()["berth.sh/sandbox"]
	waitFor(t, "hello-world's podIPs and pod-name", func() bool {
		hw = get(agentsandbox.SandboxGVR, "team-a", "hello-world")
		ips, _, _ := unstructured.NestedStringSlice(hw.Object, "status", "podIPs")
		return len(ips) == 1 && hw.GetAnnotations()["agents.x-k8s.io/pod-name"] == "berth-"+hwID
	})
	sb, err := m.Get(t1ctx, hwID)
	if err != nil || sb.Tenant != "t1" || sb.State != sandbox.StateRunning {
		t.Fatalf("hello-world's berth sandbox %s: %+v, %v; want t1's, running", hwID, sb, err)
	}
	if got := exec(hwID, "echo hello from $(hostname)"); !strings.HasPrefix(got, "hello from ") {
		t.Fatalf("exec = %q", got)
	}

	// Template, warm pool of 1, then the claim adopts the member.
	apply("team-a", "python-sandbox-template.yaml")
	apply("team-a", "python-sandbox-warmpool.yaml")
	var member string
	waitFor(t, "the pool's member running", func() bool {
		p := get(agentsandbox.PoolGVR, "team-a", "python-sandbox-warmpool")
		n, _, _ := unstructured.NestedInt64(p.Object, "status", "readyReplicas")
		if n != 1 {
			return false
		}
		sbs, _, err := m.ListFiltered(t1ctx, store.SandboxFilter{Labels: map[string]string{"agents.x-k8s.io/kind": "pool-member"}}, store.Page{})
		if err != nil || len(sbs) != 1 {
			return false
		}
		member = sbs[0].ID
		return sbs[0].Spec.Resources.CPUs == 0.1 && sbs[0].Spec.Resources.MemoryBytes == 128<<20
	})
	memberPod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+member, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	apply("team-a", "claim.yaml")
	cl := waitReady(agentsandbox.ClaimGVR, "team-a", "user-session-aider", "True", "DependenciesReady")
	t.Logf("claim Ready in %v", time.Since(t2).Round(time.Millisecond))
	if got, _, _ := unstructured.NestedString(cl.Object, "status", "sandbox", "name"); got != member {
		t.Fatalf("the claim got %q, want the pool's member %s", got, member)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "berth-"+member, metav1.GetOptions{}); err != nil || p.UID != memberPod.UID {
		t.Fatalf("the claimed sandbox's pod is not the member's: %v", err)
	}
	exec(member, "true")
	waitFor(t, "the pool refilled", func() bool {
		sbs, _, err := m.ListFiltered(t1ctx, store.SandboxFilter{Labels: map[string]string{"agents.x-k8s.io/kind": "pool-member"},
			States: []sandbox.State{sandbox.StateRunning}}, store.Page{})
		return err == nil && len(sbs) == 2 // the adopted one and its replacement
	})

	// Malformed; no rights; no key.
	bad := apply("team-a", "malformed.yaml")
	_ = bad
	u := waitReady(agentsandbox.SandboxGVR, "team-a", "malformed", "False", "InvalidSpec")
	if _, _, msg := ready(u); !strings.Contains(msg, "one container") {
		t.Fatalf("malformed's message %q", msg)
	}
	apply("team-v", "hello-world.yaml")
	u = waitReady(agentsandbox.SandboxGVR, "team-v", "hello-world", "False", "Forbidden")
	if _, _, msg := ready(u); !strings.Contains(msg, "sandboxes:write") {
		t.Fatalf("viewer's message %q", msg)
	}
	apply("team-none", "hello-world.yaml")
	waitReady(agentsandbox.SandboxGVR, "team-none", "hello-world", "False", "Unauthenticated")

	// A claim of tenant t2 naming t1's sandbox in its adoption note.
	apply("team-b", "python-sandbox-template.yaml")
	apply("team-b", "python-sandbox-warmpool.yaml")
	forged := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "forged", "annotations": map[string]any{"agents.x-k8s.io/sandbox-name": hwID}},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": "python-sandbox-warmpool"}}}}
	if _, err := dyn.Resource(agentsandbox.ClaimGVR).Namespace("team-b").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(agentsandbox.ClaimGVR, "team-b", "forged", "False", "SandboxDeleted")
	if err := dyn.Resource(agentsandbox.ClaimGVR).Namespace("team-b").Delete(ctx, "forged", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGoneObj(t, dyn, agentsandbox.ClaimGVR, "team-b", "forged")
	if sb, err := m.Get(t1ctx, hwID); err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("t1's sandbox after t2's forged claim went: %+v, %v", sb, err)
	}

	// Audited as the key.
	entries, _, err := auditLog.List(ctx, store.AuditFilter{Owner: store.OwnedBy("t1"), Action: "POST /v1/sandboxes"}, store.Page{})
	if err != nil || len(entries) < 3 || !strings.HasPrefix(entries[0].Actor, "key:") {
		t.Fatalf("audit: %d entries, %v", len(entries), err)
	}

	// Deletion cleans up.
	for _, o := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{{agentsandbox.PoolGVR, "team-a", "python-sandbox-warmpool"}, {agentsandbox.SandboxGVR, "team-a", "hello-world"},
		{agentsandbox.SandboxGVR, "team-a", "malformed"}, {agentsandbox.ClaimGVR, "team-a", "user-session-aider"},
		{agentsandbox.PoolGVR, "team-b", "python-sandbox-warmpool"}} {
		if o.gvr == agentsandbox.ClaimGVR {
			// The pool went first: its spare member with it, the
			// claimed one kept for its claim.
			if sb, err := m.Get(t1ctx, member); err != nil || sb.State != sandbox.StateRunning {
				t.Fatalf("the claimed member after its pool's deletion: %+v, %v", sb, err)
			}
		}
		if err := dyn.Resource(o.gvr).Namespace(o.ns).Delete(ctx, o.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGoneObj(t, dyn, o.gvr, o.ns, o.name)
	}
	sbs, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || len(sbs) != 0 {
		t.Fatalf("live sandboxes after the objects went: %d, %v", len(sbs), err)
	}
	waitFor(t, "no berth pod left", func() bool {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=berth"})
		return err == nil && len(pods.Items) == 0
	})
	// The refused namespaces' objects hold their finalizer: remove it so
	// the cluster's teardown is not held.
	for _, n := range []string{"team-v", "team-none"} {
		u := get(agentsandbox.SandboxGVR, n, "hello-world")
		u.SetFinalizers(nil)
		if _, err := dyn.Resource(agentsandbox.SandboxGVR).Namespace(n).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func gvrOf(u *unstructured.Unstructured) schema.GroupVersionResource {
	switch u.GetKind() {
	case "Sandbox":
		return agentsandbox.SandboxGVR
	case "SandboxTemplate":
		return agentsandbox.TemplateGVR
	case "SandboxClaim":
		return agentsandbox.ClaimGVR
	}
	return agentsandbox.PoolGVR
}

func waitGoneObj(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	waitFor(t, ns+"/"+name+" gone", func() bool {
		_, err := dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestAgentSandboxThroughServe: the real `berth serve --backend kubernetes
// --agent-sandbox` (the binary, SQLite), as berth's ServiceAccount with
// the chart's Role and deploy/kubernetes/agent-sandbox-rbac.yaml and
// nothing else, installs the CRDs itself; a
// tenant and a member key made through its API, the key put in a
// namespace's Secret, agent-sandbox's hello-world Sandbox applied there
// (server-side apply, field manager "kubectl") reaches Ready; an exec
// through berth's HTTP API with the tenant's key answers in the sandbox
// the status names; the key revoked, a second Sandbox is Unauthenticated;
// the first deleted while its key is revoked keeps its finalizer (nothing
// berth made is left unaccounted), and goes with its berth sandbox once a
// new key is in the Secret.
func TestAgentSandboxThroughServe(t *testing.T) {
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	importImages(t, c)
	b := serveOnCluster(t, c, ns, "door", "--agent-sandbox", "--kubeconfig", berthServiceAccount(t, c))

	if _, err := b.c.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	mkKey := func() *api.CreatedAPIKey {
		k, err := b.c.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: "acme", Role: "member"})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := mkKey()
	c.CreateNamespace(t, "acme")
	setKey := func(key string) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: agentsandbox.KeySecret},
			Data: map[string][]byte{agentsandbox.KeySecretData: []byte(key)}}
		if _, err := c.Client.CoreV1().Secrets("acme").Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.Client.CoreV1().Secrets("acme").Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	setKey(k.Key)

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	applyAs := func(name string) {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join("testdata", "agentsandbox", "hello-world.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetName(name)
		js, _ := obj.MarshalJSON()
		force := true
		var perr error
		// The daemon installs the CRDs as it starts; the apply retries
		// until the apiserver serves them.
		waitFor(t, "the Sandbox CRD served", func() bool {
			_, perr = dyn.Resource(agentsandbox.SandboxGVR).Namespace("acme").Patch(ctx, name, types.ApplyPatchType, js,
				metav1.PatchOptions{FieldManager: "kubectl", Force: &force})
			return perr == nil
		})
	}
	condOf := func(name string) (string, string, *unstructured.Unstructured) {
		u, err := dyn.Resource(agentsandbox.SandboxGVR).Namespace("acme").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if cm, _ := c.(map[string]any); cm["type"] == "Ready" {
				return cm["status"].(string), cm["reason"].(string), u
			}
		}
		return "", "", u
	}
	waitCond := func(name, status, reason string) *unstructured.Unstructured {
		t.Helper()
		var u *unstructured.Unstructured
		deadline := time.Now().Add(90 * time.Second)
		for {
			var s, r string
			s, r, u = condOf(name)
			if s == status && r == reason {
				return u
			}
			if time.Now().After(deadline) {
				js, _ := u.MarshalJSON()
				t.Fatalf("%s: want Ready=%s %s: %s", name, status, reason, js)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	applyAs("hello-world")
	u := waitCond("hello-world", "True", "DependenciesReady")
	id := u.GetAnnotations()["berth.sh/sandbox"]
	kc, err := client.New("http://"+b.addr, k.Key)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ex, err := kc.Exec(ctx, id, api.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo from-$(hostname)"}, Env: map[string]string{"PATH": "/bin"}}, &out, &out)
	if err != nil || ex.Code != 0 || !strings.HasPrefix(out.String(), "from-") {
		t.Fatalf("exec through the API with the tenant's key: %v, %+v, %q", err, ex, out.String())
	}
	sb, err := kc.GetSandbox(ctx, id)
	if err != nil || sb.State != "running" {
		t.Fatalf("the tenant reads its sandbox: %+v, %v", sb, err)
	}

	// Revoked: nothing more is made, nothing is let go.
	if _, err := b.c.RevokeAPIKey(ctx, k.Prefix); err != nil {
		t.Fatal(err)
	}
	applyAs("second")
	waitCond("second", "False", "Unauthenticated")
	if err := dyn.Resource(agentsandbox.SandboxGVR).Namespace("acme").Delete(ctx, "hello-world", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCond("hello-world", "False", "Unauthenticated")
	if sb, err := b.c.GetSandbox(ctx, id); err != nil || sb.State != "running" {
		t.Fatalf("with the key revoked, the sandbox of a deleted object: %+v, %v; want it running, the object held", sb, err)
	}
	setKey(mkKey().Key)
	for _, n := range []string{"hello-world", "second"} {
		if n == "second" {
			if err := dyn.Resource(agentsandbox.SandboxGVR).Namespace("acme").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitGoneObj(t, dyn, agentsandbox.SandboxGVR, "acme", n)
	}
	if sb, err := b.c.GetSandbox(ctx, id); !client.IsNotFound(err) && (err != nil || sb.State != "deleted") {
		t.Fatalf("the deleted object's sandbox: %+v, %v", sb, err)
	}
	waitFor(t, "no berth pod left", func() bool {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=berth"})
		return err == nil && len(pods.Items) == 0
	})
}

// berthServiceAccount makes berth's ServiceAccount with the chart's Role
// (deploy/kubernetes/berth.yaml) and the door's ClusterRole
// (deploy/kubernetes/agent-sandbox-rbac.yaml), and returns a kubeconfig
// file of a bound token of it.
func berthServiceAccount(t *testing.T, c *kubeenv.Cluster) string {
	t.Helper()
	ctx := context.Background()
	c.CreateNamespace(t, "berth")
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "agent-sandbox-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t)
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	for _, obj := range objs {
		var gvr schema.GroupVersionResource
		switch obj.GetKind() {
		case "ServiceAccount":
			gvr = corev1.SchemeGroupVersion.WithResource("serviceaccounts")
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			gvr = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1",
				Resource: strings.ToLower(obj.GetKind()) + "s"}
		default:
			continue
		}
		var res dynamic.ResourceInterface = dyn.Resource(gvr)
		if obj.GetNamespace() != "" {
			res = dyn.Resource(gvr).Namespace(obj.GetNamespace())
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	sa := c.ServiceAccountConfig(t, "berth", "berth")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: sa.Host, CertificateAuthorityData: sa.CAData, CertificateAuthority: sa.CAFile}
	kc.AuthInfos["berth"] = &clientcmdapi.AuthInfo{Token: sa.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "berth"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "berth-sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
