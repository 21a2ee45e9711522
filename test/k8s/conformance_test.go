package k8s

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/node/nodetest"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestConformanceOnRealNode runs the node backend's conformance suite
// (internal/node/nodetest, the one test/node runs on the local backend
// with runc and runsc) against the kubernetes backend on the real
// apiserver and node. What a pod cannot do is not skipped: the classes'
// Caps say it, and the suite then asserts the refusal (not supported or a
// conflict) and that the sandbox is unharmed by it.
func TestConformanceOnRealNode(t *testing.T) {
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true, ControllerManager: true})
	ctx := context.Background()
	const ns = "berth-conformance"
	c.CreateNamespace(t, ns)

	importImages(t, c)

	// One PersistentVolume per claim the suite makes, and a few spare.
	hostPathPVs(t, c, "berth-conformance-pv", 8)

	nodetest.Run(t, func(t *testing.T) nodetest.Harness {
		b, err := kube.New(ctx, kube.Config{Client: c.Client, Namespace: ns, Instance: "conformance",
			AgentImage: agentRef, Image: baseRef, PullPolicy: corev1.PullNever, NodeName: c.NodeName,
			ReadyTimeout: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// After the suite's own cleanup and the backend's Close: nothing
		// of the suite's is left in the namespace.
		t.Cleanup(func() {
			for _, kind := range []string{"pods", "secrets", "claims", "policies"} {
				if left := leftIn(t, c, ns, kind); len(left) > 0 {
					t.Errorf("left in %s after the suite: %s %v", ns, kind, left)
				}
			}
		})
		return nodetest.Harness{Backend: b, Layers: []string{"busybox"}}
	})
}

// leftIn lists berth's objects of one kind in ns that are not being
// deleted already.
func leftIn(t *testing.T, c *kubeenv.Cluster, ns, kind string) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kube.LabelManagedBy + "=" + kube.ManagedBy}
	var out []string
	add := func(m metav1.ObjectMeta) {
		if m.DeletionTimestamp == nil {
			out = append(out, m.Name)
		}
	}
	switch kind {
	case "pods":
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			add(o.ObjectMeta)
		}
	case "secrets":
		l, err := c.Client.CoreV1().Secrets(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			add(o.ObjectMeta)
		}
	case "claims":
		l, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			add(o.ObjectMeta)
		}
	case "policies":
		l, err := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			add(o.ObjectMeta)
		}
	}
	return out
}
