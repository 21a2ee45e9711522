//go:build k8s

package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestScaleOnKwok: 1,000 sandboxes (BERTH_K8S_SCALE) made and removed
// through the backend's own code on 50 kwok nodes of a real API server
// and scheduler, 16 at a time: each gets its identity Secret, its
// NetworkPolicy and its pod, placed by the node selector and toleration
// on the kwok pool and Running with an address in the informer cache,
// then Remove deletes all of it and lists nothing left. kwok runs no
// container, so the agent's answer is the one part of Provision not
// here: these are the API-side latencies (make test-k8s runs it with
// -tags k8s). Reported: p50, p95 and max of each phase, and the rate.
func TestScaleOnKwok(t *testing.T) {
	n := 1000
	if v := os.Getenv("BERTH_K8S_SCALE"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("BERTH_K8S_SCALE=%q", v)
		}
	}
	const nodes, workers, ns = 50, 16, "berth-scale"
	c := kubeenv.Start(t, kubeenv.Options{Scheduler: true})
	kubeenv.StartKwok(t, c, nodes)
	c.CreateNamespace(t, ns)
	ctx := context.Background()
	b, err := New(ctx, Config{Client: c.Client, Namespace: ns, Instance: "scale",
		AgentImage: "berth.local/agent:never-pulled", Image: "berth.local/busybox:never-pulled", PullPolicy: corev1.PullNever,
		NodeSelector: map[string]string{"type": "kwok"},
		Tolerations:  []corev1.Toleration{{Key: kubeenv.KwokAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		ReadyTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(node.Hooks{})
	defer b.Close(false)

	sbs := make([]*sandbox.Sandbox, n)
	for i := range sbs {
		sbs[i] = &sandbox.Sandbox{ID: fmt.Sprintf("s%05d%04x", i, rand.Uint32()&0xffff), Name: "scale",
			Spec: sandbox.Spec{Template: "base", Resources: sandbox.Resources{CPUs: 0.1, MemoryBytes: 64 << 20, Pids: 64}}}
	}
	phase := func(name string, fn func(*sandbox.Sandbox) error) {
		t.Helper()
		lat := make([]time.Duration, n)
		errs := make([]error, n)
		next := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for i := range next {
					t0 := time.Now()
					errs[i] = fn(sbs[i])
					lat[i] = time.Since(t0)
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		total := time.Since(start)
		failed := 0
		for i, err := range errs {
			if err != nil {
				if failed < 5 {
					t.Errorf("%s %s: %v", name, sbs[i].ID, err)
				}
				failed++
			}
		}
		if failed > 0 {
			t.Fatalf("%s: %d of %d failed", name, failed, n)
		}
		slices.Sort(lat)
		t.Logf("%s: %d sandboxes in %v (%.0f/s, %d at a time): p50 %v, p95 %v, max %v", name, n,
			total.Round(time.Millisecond), float64(n)/total.Seconds(), workers,
			lat[n/2].Round(time.Millisecond), lat[n*95/100].Round(time.Millisecond), lat[n-1].Round(time.Millisecond))
	}

	phase("create (secret, policy, pod Running)", func(sb *sandbox.Sandbox) error { return b.provisionPod(ctx, sb) })
	// Every pod is where the selector and toleration put it.
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spread := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !strings.HasPrefix(p.Spec.NodeName, "kwok-") {
			t.Fatalf("pod %s is %s (ip %q) on %q; want Running on the kwok pool", p.Name, p.Status.Phase, p.Status.PodIP, p.Spec.NodeName)
		}
		spread[p.Spec.NodeName]++
	}
	if len(pods.Items) != n {
		t.Fatalf("%d pods; want %d", len(pods.Items), n)
	}
	t.Logf("pods on %d of the %d kwok nodes", len(spread), nodes)
	if st, err := b.Status(ctx, sbs[0]); err != nil || st != node.StatusRunning {
		t.Fatalf("status of %s = %s, %v", sbs[0].ID, st, err)
	}

	phase("remove (every object deleted and listed gone)", func(sb *sandbox.Sandbox) error { return b.Remove(ctx, sb) })
	sel := metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy, LabelInstance: "scale"}.String()}
	left := 0
	if l, err := c.Client.CoreV1().Pods(ns).List(ctx, sel); err == nil {
		left += len(l.Items)
	} else {
		t.Fatal(err)
	}
	if l, err := c.Client.CoreV1().Secrets(ns).List(ctx, sel); err == nil {
		left += len(l.Items)
	} else {
		t.Fatal(err)
	}
	if l, err := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel); err == nil {
		left += len(l.Items)
	} else {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d objects of the scale run left", left)
	}
}
