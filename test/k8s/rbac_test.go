package k8s

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// manifests reads deploy/kubernetes/berth.yaml (the chart's default
// render, scripts/check-chart.sh) as objects.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "berth.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("deploy/kubernetes/berth.yaml: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	if len(out) < 6 {
		t.Fatalf("deploy/kubernetes/berth.yaml has %d objects, want at least 6", len(out))
	}
	return out
}

// TestManifestsAndRBAC applies berth's own manifests to a real API server
// and checks them: every object passes a server-side dry-run create
// (schema, defaults, admission), and berth's ServiceAccount, with a real
// bound token, may do exactly what the Kubernetes backend does in the
// sandbox namespace and nothing around it.
func TestManifestsAndRBAC(t *testing.T) {
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{})
	for _, ns := range []string{"berth", "berth-sandboxes", "elsewhere"} {
		c.CreateNamespace(t, ns)
	}
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)

	kinds := map[string]bool{}
	for _, obj := range manifests(t) {
		gvk := obj.GroupVersionKind()
		kinds[gvk.Kind] = true
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
		}
		res := dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("dry-run create of %s %s/%s refused: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
			continue
		}
		// The identity and its grants are made for real, for the reviews.
		switch gvk.Kind {
		case "ServiceAccount", "Role", "RoleBinding":
			if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s %s: %v", gvk.Kind, obj.GetName(), err)
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"} {
		if !kinds[k] {
			t.Errorf("the manifests have no %s", k)
		}
	}

	sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, "berth", "berth"))
	if err != nil {
		t.Fatal(err)
	}
	type access struct {
		ns, group, resource, sub, verb string
	}
	check := func(a access, want bool) {
		t.Helper()
		r, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: a.ns, Group: a.group, Resource: a.resource, Subresource: a.sub, Verb: a.verb}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("access review %+v: %v", a, err)
		}
		if r.Status.Allowed != want {
			t.Errorf("berth's ServiceAccount %s %s %s/%s in %q: allowed %v, want %v (%s)",
				a.verb, a.group, a.resource, a.sub, a.ns, r.Status.Allowed, want, r.Status.Reason)
		}
	}
	const sbx = "berth-sandboxes"
	// What internal/node/kube calls (informers list and watch).
	for _, v := range []string{"get", "list", "watch", "create", "delete"} {
		check(access{sbx, "", "pods", "", v}, true)
		check(access{sbx, "", "persistentvolumeclaims", "", v}, true)
	}
	check(access{sbx, "", "pods", "log", "get"}, true)
	for _, v := range []string{"get", "list", "watch", "create", "deletecollection"} {
		check(access{sbx, "", "secrets", "", v}, true)
	}
	for _, v := range []string{"get", "list", "watch", "create", "update", "deletecollection"} {
		check(access{sbx, "networking.k8s.io", "networkpolicies", "", v}, true)
	}
	for _, v := range []string{"get", "list", "watch", "create", "delete"} {
		check(access{sbx, "snapshot.storage.k8s.io", "volumesnapshots", "", v}, true)
	}
	// And nothing more.
	for _, a := range []access{
		{sbx, "", "pods", "exec", "create"},
		{sbx, "", "pods", "attach", "create"},
		{sbx, "", "pods", "portforward", "create"},
		{sbx, "", "pods", "", "update"},
		{sbx, "", "pods", "", "patch"},
		{sbx, "", "secrets", "", "update"},
		{sbx, "", "services", "", "create"},
		{sbx, "", "serviceaccounts", "", "create"},
		{sbx, "", "configmaps", "", "get"},
		{sbx, "networking.k8s.io", "networkpolicies", "", "patch"},
		{sbx, "networking.k8s.io", "networkpolicies", "", "delete"},
		{"elsewhere", "networking.k8s.io", "networkpolicies", "", "update"},
		{sbx, "snapshot.storage.k8s.io", "volumesnapshots", "", "update"},
		{sbx, "snapshot.storage.k8s.io", "volumesnapshotcontents", "", "create"},
		{"", "snapshot.storage.k8s.io", "volumesnapshotcontents", "", "delete"},
		{"", "snapshot.storage.k8s.io", "volumesnapshotclasses", "", "create"},
		{"elsewhere", "snapshot.storage.k8s.io", "volumesnapshots", "", "create"},
		{sbx, "rbac.authorization.k8s.io", "roles", "", "create"},
		{sbx, "rbac.authorization.k8s.io", "rolebindings", "", "create"},
		{sbx, "rbac.authorization.k8s.io", "roles", "", "escalate"},
		{sbx, "apps", "deployments", "", "create"},
		{"elsewhere", "", "pods", "", "create"},
		{"elsewhere", "", "secrets", "", "get"},
		{"berth", "", "secrets", "", "get"}, // its own namespace's: the store URL is in its env, not read
		{"berth", "", "pods", "", "list"},
		{"", "", "secrets", "", "list"}, // cluster-wide
		{"", "", "pods", "", "list"},
		{"", "", "nodes", "", "list"},
		{"", "", "namespaces", "", "create"},
		{"", "node.k8s.io", "runtimeclasses", "", "create"},
		{"", "rbac.authorization.k8s.io", "clusterroles", "", "create"},
		{"", "rbac.authorization.k8s.io", "clusterrolebindings", "", "create"},
		{"", "storage.k8s.io", "storageclasses", "", "create"},
	} {
		check(a, false)
	}
	// The reviews are the API server's answer; a real call agrees.
	if _, err := sa.CoreV1().Pods(sbx).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing pods in %s as berth: %v", sbx, err)
	}
	if _, err := sa.CoreV1().Secrets("elsewhere").List(ctx, metav1.ListOptions{}); err == nil ||
		!strings.Contains(err.Error(), "forbidden") {
		t.Errorf("listing secrets in another namespace as berth: %v, want forbidden", err)
	}
}
