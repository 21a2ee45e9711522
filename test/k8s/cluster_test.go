// Package k8s holds the tests that run against a real Kubernetes cluster
// (internal/testenv/kubeenv): make test-k8s, not make test or make e2e.
package k8s

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// checkGone registers (before the cluster's own cleanup, so it runs
// after it) a check that nothing of the cluster is left on the host.
func checkGone(t *testing.T, c **kubeenv.Cluster) {
	t.Cleanup(func() {
		cl := *c
		if cl == nil {
			return
		}
		if _, err := os.Stat(cl.Dir); !os.IsNotExist(err) {
			t.Errorf("cluster dir %s left (%v)", cl.Dir, err)
		}
		for _, l := range []string{"bk" + cl.ID, "bkn" + cl.ID} {
			if _, err := netlink.LinkByName(l); err == nil {
				t.Errorf("link %s left", l)
			}
		}
		if dirs := testenv.CgroupDirs("/berth-k8s-" + cl.ID); len(dirs) > 0 {
			t.Errorf("cgroups left: %v", dirs)
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.Contains(string(b), cl.Dir) {
				t.Errorf("process %s left: %q", e.Name(), strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		if ms, _ := filepath.Glob("/var/lib/cni/results/berth-k8s-" + cl.ID + "-*"); len(ms) > 0 {
			t.Errorf("CNI cache files left: %v", ms)
		}
	})
}

// TestPodOnRealNode runs a pod from a locally imported image on the real
// node (containerd, runc, CNI bridge, kubelet) and checks what a backend
// relies on: it runs, its log comes back through the apiserver and
// kubelet, its IP is in the node's pod subnet and reachable from the host,
// and it has no route off this machine.
func TestPodOnRealNode(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	t.Logf("cluster with a node up in %v", time.Since(t0).Round(time.Millisecond))
	const ref = "berth.local/busybox:test"
	c.ImportImage(t, ref, kubeenv.BusyboxImage(t, ref))

	ctx := context.Background()
	t1 := time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      c.NodeName,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "web",
				Image:           ref,
				ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c",
					"echo hello-from-pod; echo routes:; ip route; echo end-routes; " +
						"mkdir -p /tmp/www && echo served-by-pod > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := c.PodIP(t, "default", "smoke", 60*time.Second)
	t.Logf("pod Running at %s in %v", ip, time.Since(t1).Round(time.Millisecond))
	addr, ok := netip.AddrFromSlice(ip.To4())
	if !ok || !c.PodSubnet().Contains(addr) {
		t.Fatalf("pod IP %s is not in the node's pod subnet %s", ip, c.PodSubnet())
	}

	// Its log, through the apiserver and kubelet's server.
	var logs string
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := c.Client.CoreV1().Pods("default").GetLogs("smoke", &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		if err == nil && strings.Contains(logs, "end-routes") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod log: %v: %q", err, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(logs, "hello-from-pod") {
		t.Fatalf("pod log lacks its output: %q", logs)
	}
	routes := logs[strings.Index(logs, "routes:"):strings.Index(logs, "end-routes")]
	if strings.Contains(routes, "default") || strings.Contains(routes, "via") {
		t.Fatalf("the pod has a route off its subnet: %q", routes)
	}
	if !strings.Contains(routes, c.PodSubnet().String()) {
		t.Fatalf("the pod lacks its subnet's route: %q", routes)
	}

	// The pod IP from the host, over the bridge.
	hc := &http.Client{Timeout: 3 * time.Second}
	var body []byte
	deadline = time.Now().Add(15 * time.Second)
	for {
		resp, err := hc.Get("http://" + net.JoinHostPort(ip.String(), "8080") + "/")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET the pod from the host: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if strings.TrimSpace(string(body)) != "served-by-pod" {
		t.Fatalf("the pod served %q", body)
	}
	t.Logf("smoke test body done in %v", time.Since(t0).Round(time.Millisecond))
}

// TestKwokNodesAndRBAC runs kwok's simulated nodes, binds pods to them
// through the scheduler, and checks that the apiserver's RBAC is real: a
// user with no binding is refused, and a ServiceAccount gets exactly what
// its Role grants.
func TestKwokNodesAndRBAC(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Scheduler: true})
	t.Logf("control plane up in %v", time.Since(t0).Round(time.Millisecond))
	const nodes, pods = 20, 100
	t1 := time.Now()
	names := kubeenv.StartKwok(t, c, nodes)
	if len(names) != nodes {
		t.Fatalf("StartKwok returned %d names", len(names))
	}
	t.Logf("%d kwok nodes Ready in %v", nodes, time.Since(t1).Round(time.Millisecond))

	ctx := context.Background()
	c.CreateNamespace(t, "scale")
	t2 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	for i := range pods {
		wg.Go(func() {
			_, err := c.Client.CoreV1().Pods("scale").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Labels: map[string]string{"app": "scale"}},
				Spec: corev1.PodSpec{
					Containers:   []corev1.Container{{Name: "c", Image: "berth.local/never-pulled:test"}},
					NodeSelector: map[string]string{"type": "kwok"},
					Tolerations:  []corev1.Toleration{{Key: kubeenv.KwokAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				},
			}, metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	spread := map[string]int{}
	waitAll(t, 60*time.Second, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		clear(spread)
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
				spread[p.Spec.NodeName]++
			}
		}
		return running == pods, fmt.Sprintf("%d of %d Running", running, pods)
	})
	t.Logf("%d pods scheduled onto kwok nodes and Running in %v, over %d nodes", pods, time.Since(t2).Round(time.Millisecond), len(spread))
	if len(spread) < 2 {
		t.Fatalf("the scheduler put every pod on one node: %v", spread)
	}
	if err := c.Client.CoreV1().Pods("scale").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAll(t, 60*time.Second, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items))
	})

	// RBAC: a user with no binding, and a ServiceAccount allowed to list
	// pods in its own namespace only.
	nobody := kubernetes.NewForConfigOrDie(c.UserConfig(t, "nobody"))
	if _, err := nobody.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("an unbound user listing pods: %v, want Forbidden", err)
	}
	_, err := c.Client.CoreV1().ServiceAccounts("scale").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grantPodReader(t, c, "scale", "reader")
	sa := kubernetes.NewForConfigOrDie(c.ServiceAccountConfig(t, "scale", "reader"))
	if _, err := sa.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the ServiceAccount listing pods where its Role allows: %v", err)
	}
	if _, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount listing pods in another namespace: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets("scale").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount listing secrets: %v, want Forbidden", err)
	}
}

func waitAll(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// grantPodReader binds a Role allowing get/list/watch of pods in ns to
// ServiceAccount ns/sa.
func grantPodReader(t *testing.T, c *kubeenv.Cluster, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
