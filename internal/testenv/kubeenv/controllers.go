package kubeenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// componentKubeconfig writes a kubeconfig for a control-plane component
// authenticating as user (RBAC's bootstrap roles name them).
func (c *Cluster) componentKubeconfig(t testing.TB, name, user string, groups ...string) string {
	t.Helper()
	kp, err := c.ca.issue(user, groups, false)
	must(t, err)
	p := filepath.Join(c.Dir, name+".kubeconfig")
	must(t, kubeconfig(p, c.Server, c.ca.pem, user, kp))
	return p
}

// startScheduler runs kube-scheduler as system:kube-scheduler (its RBAC
// bootstrap role), no leader election, no serving port.
func (c *Cluster) startScheduler(t testing.TB) {
	t.Helper()
	kc := c.componentKubeconfig(t, "scheduler", "system:kube-scheduler")
	p, err := start(filepath.Join(c.Dir, "logs"), "kube-scheduler", c.Bins.Scheduler,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--secure-port=0", "--v=1")
	must(t, err)
	c.procs = append(c.procs, p)
}

// startControllerManager runs kube-controller-manager with one admin
// identity (no per-controller service accounts), no leader election, no
// serving port; it signs service-account tokens with the apiserver's key.
func (c *Cluster) startControllerManager(t testing.TB, saKey string) {
	t.Helper()
	kc := c.componentKubeconfig(t, "controller-manager", "system:kube-controller-manager", "system:masters")
	p, err := start(filepath.Join(c.Dir, "logs"), "kube-controller-manager", c.Bins.ControllerManager,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+filepath.Join(c.Dir, "pki", "ca.crt"),
		"--v=1")
	must(t, err)
	c.procs = append(c.procs, p)
}

// KwokAnnotation marks the nodes kwok simulates (and only those: the real
// node is kubelet's).
const KwokAnnotation = "kwok.x-k8s.io/node"

// StartKwok runs kwok against the cluster and creates nodes simulated
// nodes kwok-<i> (annotated KwokAnnotation=fake, tainted
// kwok.x-k8s.io/node=fake:NoSchedule so only pods that tolerate it land
// there), waiting until every one is Ready. Pods bound to them become
// Running without running anything. kwok is stopped in t.Cleanup (before
// the cluster, which registered its cleanup first).
func StartKwok(t testing.TB, c *Cluster, nodes int) []string {
	t.Helper()
	stages := filepath.Join(c.Bins.Dir, "kwok-stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		t.Fatalf("kubeenv: kwok's stages (%v): rebuild with scripts/k8s-tools.sh", err)
	}
	p, err := start(filepath.Join(c.Dir, "logs"), "kwok", c.Bins.Kwok,
		"--kubeconfig="+c.Kubeconfig,
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokAnnotation+"=fake",
		"--cidr=10.255.0.0/16", // simulated pod IPs: nothing is at them
		"--node-ip=127.0.0.1")
	must(t, err)
	t.Cleanup(func() { p.stop(10 * time.Second) })
	ctx := context.Background()
	var names []string
	for i := range nodes {
		name := fmt.Sprintf("kwok-%d", i)
		names = append(names, name)
		_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{KwokAnnotation: "fake"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name},
			},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		}, metav1.CreateOptions{})
		if err != nil {
			fatalf(t, []*proc{p}, "kubeenv: create kwok node %s: %v", name, err)
		}
	}
	if err := waitFor(time.Duration(30+nodes/10)*time.Second, fmt.Sprintf("%d kwok nodes Ready", nodes), func() (bool, error) {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= nodes, fmt.Errorf("%d of %d Ready", ready, nodes)
	}, p); err != nil {
		fatalf(t, []*proc{p}, "kubeenv: %v", err)
	}
	return names
}
