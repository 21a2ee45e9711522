package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestBackendOnRealNode drives internal/node/kube against the real
// apiserver and node: a persistent sandbox's pod runs the berth agent
// (copied in by the init container from an image holding the binary),
// exec returns output and exit code over mutual TLS, a file written in the
// workspace claim survives stop (pod gone, claim kept) and start (a new
// pod on it), remove leaves nothing labelled, and a pod planted with
// berth's labels but no record is removed by Recover.
func TestBackendOnRealNode(t *testing.T) {
	t0 := time.Now()
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{Node: true, ControllerManager: true})
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)

	// The agent image: the berth binary at /berth, nothing else.
	importImages(t, c)

	// One hostPath PersistentVolume for the workspace claim to bind to.
	hostPathPVs(t, c, "berth-test-pv", 1)

	b, err := kube.New(ctx, kube.Config{Client: c.Client, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, ReadyTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var events []*sandbox.Event
	b.Start(node.Hooks{Event: func(ev *sandbox.Event) { events = append(events, ev) }})
	defer b.Close(false)

	volID := "vol" + randID()
	sb := &sandbox.Sandbox{ID: randID(), Name: "k8s-test", Spec: sandbox.Spec{Template: "base", Persistent: true,
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 128 << 20, Pids: 256},
		Volumes:   []sandbox.VolumeMount{{VolumeID: volID, Name: "workspace", Path: "/workspace", Owned: true}}}}
	t.Cleanup(func() {
		_ = b.Remove(context.Background(), sb)
		_ = b.DeleteVolume(volID)
	})
	if err := b.CreateVolume(volID, 64<<20, 0); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := b.Provision(ctx, sb); err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Logf("provisioned (pod running, agent answering) in %v", time.Since(t1).Round(time.Millisecond))
	if st, err := b.Status(ctx, sb); err != nil || st != node.StatusRunning {
		t.Fatalf("status = %s, %v", st, err)
	}

	exec := func(script string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		ex, err := b.Agent(sb).Exec(ctx, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}},
			agent.ExecIO{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out.String(), ex.Code
	}
	if out, code := exec("echo hello from $(hostname); exit 7"); code != 7 || out != "hello from k8s-test\n" {
		t.Fatalf("exec = %q, %d; want the hostname and exit 7", out, code)
	}
	// CPU time never waits on the agent: the first call has no sample
	// yet (or the last one), later calls the sampled figure.
	for deadline := time.Now().Add(20 * time.Second); ; {
		t0 := time.Now()
		cpu, err := b.CPUUsage(sb)
		if took := time.Since(t0); took > 100*time.Millisecond {
			t.Fatalf("CPUUsage waited %v", took)
		}
		if err == nil && cpu > 0 {
			t.Logf("CPU time sampled through the agent: %v", cpu)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU sample: %v, %v", cpu, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if mem, err := b.MemoryUsage(sb); err != nil || mem <= 0 || mem > 128<<20 {
		t.Errorf("MemoryUsage = %d, %v; want within the 128 MiB limit", mem, err)
	}
	if _, err := b.Agent(sb).WriteFile(ctx, "/workspace/kept.txt", 0o644, strings.NewReader("kept across stop\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	// File secrets land on the pod's secrets tmpfs (a memory emptyDir),
	// which the agent checks is a tmpfs before it writes.
	if err := b.Agent(sb).SecretFiles(ctx, "", []wire.SecretFile{{Path: wire.SecretDir + "/tok", Data: []byte("s3cret")}}); err != nil {
		t.Fatalf("secret files: %v", err)
	}
	if out, code := exec("cat /run/secrets/tok; stat -f -c %T /run/secrets"); code != 0 || out != "s3crettmpfs\n" {
		t.Errorf("the secret file and its filesystem: %q (exit %d)", out, code)
	}
	var got bytes.Buffer
	if _, err := b.Agent(sb).ReadFile(ctx, "/workspace/kept.txt", &got); err != nil || got.String() != "kept across stop\n" {
		t.Fatalf("read = %q, %v", got.String(), err)
	}

	// Stop: the pod goes, the claim and the identity stay.
	if err := b.Stop(ctx, sb); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st, _ := b.Status(ctx, sb); st != node.StatusGone {
		t.Errorf("status after stop = %s", st)
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "berth-vol-"+volID, metav1.GetOptions{}); err != nil {
		t.Fatalf("the claim went with the pod: %v", err)
	}
	t2 := time.Now()
	if err := b.Provision(ctx, sb); err != nil {
		t.Fatalf("start again: %v", err)
	}
	t.Logf("started again in %v", time.Since(t2).Round(time.Millisecond))
	if out, code := exec("cat /workspace/kept.txt"); code != 0 || out != "kept across stop\n" {
		t.Fatalf("after stop/start the workspace holds %q (exit %d)", out, code)
	}

	// An orphan: a pod with berth's labels and no record.
	orphan := randID()
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-" + orphan, Labels: map[string]string{
			kube.LabelManagedBy: kube.ManagedBy, kube.LabelInstance: "berth", kube.LabelSandbox: orphan}},
		Spec: corev1.PodSpec{NodeName: c.NodeName, Containers: []corev1.Container{{Name: "x", Image: baseRef,
			ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphan in the cache", func() bool { return len(labelled(t, c, ns, orphan)) > 0 })
	if err := b.Recover(ctx, []*sandbox.Sandbox{sb}); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if left := labelled(t, c, ns, orphan); len(left) > 0 {
		t.Errorf("recover left the orphan: %v", left)
	}
	if out, code := exec("echo still here"); code != 0 || out != "still here\n" {
		t.Errorf("recover touched the live sandbox: %q %d", out, code)
	}

	// Remove and the engine's delete of the owned volume: nothing labelled.
	if err := b.Remove(ctx, sb); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if err := b.DeleteVolume(volID); err != nil {
		t.Fatal(err)
	}
	if left := labelled(t, c, ns, sb.ID); len(left) > 0 {
		t.Errorf("after remove: %v", left)
	}
	waitFor(t, "the claim to go", func() bool {
		_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "berth-vol-"+volID, metav1.GetOptions{})
		return err != nil
	})
	if n := b.AgentRefusals(); n != 0 {
		t.Errorf("%d refusals of the backend's own agents", n)
	}
}

// labelled lists (from the API) the pods, secrets and network policies
// of sandbox id.
func labelled(t *testing.T, c *kubeenv.Cluster, ns, id string) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kube.LabelSandbox + "=" + id}
	var out []string
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod "+p.Name)
	}
	secs, err := c.Client.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs.Items {
		out = append(out, "secret "+s.Name)
	}
	pols, err := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pols.Items {
		out = append(out, "networkpolicy "+p.Name)
	}
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randID() string {
	b := make([]byte, 8)
	f, _ := os.Open("/dev/urandom")
	defer f.Close()
	f.Read(b)
	return fmt.Sprintf("%x", b)
}
