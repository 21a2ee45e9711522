package k8s

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestAgentImpostorRefused: something on the pod network that takes a
// sandbox's place is refused by the daemon's pinned mutual TLS and
// counted. The sandbox's pod is deleted out from under berth and a pod of
// the same name and labels put in its place (so berth's informer sees it
// as the sandbox's, at its new address): first a real berth agent with an
// identity of its own making, then a plain TCP listener that writes to
// its log whatever reaches it. Each time the next exec through the
// backend fails, AgentRefusals grows, a security event says refused, and
// the listener's log shows the daemon's connection arrived but no command
// with it.
func TestAgentImpostorRefused(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true})
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	importImages(t, c)

	b, err := kube.New(ctx, kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []*sandbox.Event
	b.Start(node.Hooks{Event: func(ev *sandbox.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }})
	defer b.Close(false)
	sb := &sandbox.Sandbox{ID: randID(), Name: "victim", Spec: sandbox.Spec{Template: "base",
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 128 << 20, Pids: 256}}}
	t.Cleanup(func() { _ = b.Remove(context.Background(), sb) })
	if err := b.Provision(ctx, sb); err != nil {
		t.Fatalf("provision: %v", err)
	}
	exec := func(argv ...string) (string, error) {
		var out bytes.Buffer
		ectx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		ex, err := b.Agent(sb).Exec(ectx, agent.ExecRequest{Argv: argv, Env: []string{"PATH=/bin"}}, agent.ExecIO{Stdout: &out, Stderr: &out})
		if err == nil && ex.Code != 0 {
			t.Logf("exec %v exited %d", argv, ex.Code)
		}
		return out.String(), err
	}
	if out, err := exec("/bin/echo", "genuine"); err != nil || out != "genuine\n" {
		t.Fatalf("exec in the genuine sandbox: %q %v", out, err)
	}
	if n := b.AgentRefusals(); n != 0 {
		t.Fatalf("AgentRefusals = %d before any impostor", n)
	}
	pods := c.Client.CoreV1().Pods(ns)
	genuine, err := pods.Get(ctx, "berth-"+sb.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// replace deletes the sandbox's pod and puts pod in its place, with
	// its name and labels, and waits until it runs at a new address.
	replace := func(what string, spec corev1.PodSpec) *corev1.Pod {
		t.Helper()
		zero := int64(0)
		if err := pods.Delete(ctx, genuine.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := pods.Get(ctx, genuine.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s did not go", genuine.Name)
			}
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: genuine.Name, Namespace: ns, Labels: genuine.Labels}, Spec: spec}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the %s: %v", what, err)
		}
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, err := pods.Get(ctx, genuine.Name, metav1.GetOptions{})
			if err == nil && got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
				if st, _ := b.Status(ctx, sb); st == node.StatusRunning {
					t.Logf("%s running at %s", what, got.Status.PodIP)
					time.Sleep(time.Second) // for berth's informer to see it too
					return got
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s did not run: %+v", what, got.Status)
			}
		}
	}
	// refusedExec: an exec fails, and is counted as a refusal. A
	// connection kept from the genuine pod, now gone, may fail the first
	// try without a handshake: up to three tries, every one failing.
	refusedExec := func(what string, argv ...string) {
		t.Helper()
		before := b.AgentRefusals()
		for try := 1; ; try++ {
			out, err := exec(argv...)
			if err == nil {
				t.Fatalf("exec reached the %s: %q", what, out)
			}
			t.Logf("exec against the %s (try %d): %v", what, try, err)
			if b.AgentRefusals() > before {
				return
			}
			if try == 3 {
				t.Fatalf("AgentRefusals stayed %d after %d failed execs: the %s was not counted", before, try, what)
			}
		}
	}
	refusedEvents := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ev := range events {
			if ev.SandboxID == sb.ID && ev.Type == "security" && ev.Outcome == "refused" {
				n++
			}
		}
		return n
	}

	// 1. A real berth agent with an identity of its own: a Secret it made
	// (agent pair and a daemon certificate that is not berth's).
	own, err := agenttls.NewIdentity("impostor")
	if err != nil {
		t.Fatal(err)
	}
	fake := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "impostor-tls", Namespace: ns}, Data: own}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, fake, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Secrets(ns).Delete(context.Background(), fake.Name, metav1.DeleteOptions{})
	})
	spec := *genuine.Spec.DeepCopy()
	for i := range spec.Volumes {
		if s := spec.Volumes[i].Secret; s != nil {
			s.SecretName = fake.Name
		}
	}
	replace("impostor agent", spec)
	refusedExec("impostor agent", "/bin/sh", "-c", "echo reached-the-impostor")
	if n := refusedEvents(); n < 1 {
		t.Errorf("%d security events of a refused agent, want one", n)
	}

	// 2. A plain listener on the agent's port that logs what it gets.
	listener := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, NodeName: genuine.Spec.NodeName,
		AutomountServiceAccountToken: genuine.Spec.AutomountServiceAccountToken,
		Containers: []corev1.Container{{Name: "sandbox", Image: baseRef, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", "while true; do echo NOT-AN-AGENT | nc -l -p 7070; echo; echo CONNECTION-ENDED; done"}}},
	}
	replace("plain listener", listener)
	const marker = "impostor-marker-7f3a"
	refusedExec("plain listener", "/bin/echo", marker)
	var log string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rc, err := pods.GetLogs(genuine.Name, &corev1.PodLogOptions{Container: "sandbox"}).Stream(ctx)
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
			rc.Close()
			log = string(data)
		}
		if strings.Contains(log, "CONNECTION-ENDED") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(log, "CONNECTION-ENDED") {
		t.Fatalf("the listener saw no connection from the daemon (log %q): the test did not exercise it", log)
	}
	if strings.Contains(log, marker) {
		t.Errorf("the command reached the plain listener: %q", log)
	}
	t.Logf("the listener received %d bytes, no command; refusals counted: %d", len(log), b.AgentRefusals())

	if err := b.Remove(ctx, sb); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if left := labelled(t, c, ns, sb.ID); len(left) > 0 {
		t.Errorf("left after remove: %v", left)
	}
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}
