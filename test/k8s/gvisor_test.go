package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestGVisorPodOnRealNode: the test node runs runsc under containerd
// (gVisor's shim, handler runsc) and the cluster's RuntimeClass gvisor
// selects it. A pod of that RuntimeClass reads the kernel's ring buffer
// and version: gVisor's Sentry answers (its dmesg starts "Starting
// gVisor..."), not the host's kernel; a pod without it on the same node
// sees the host's kernel.
func TestGVisorPodOnRealNode(t *testing.T) {
	var c *kubeenv.Cluster
	checkGone(t, &c)
	c = kubeenv.Start(t, kubeenv.Options{GVisor: true})
	c.ImportImage(t, baseRef, kubeenv.BusyboxImage(t, baseRef))
	ctx := context.Background()
	rc := kubeenv.GVisorRuntimeClass
	run := func(name string, runtimeClass *string) string {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName: c.NodeName, RuntimeClassName: runtimeClass, RestartPolicy: corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "probe", Image: baseRef, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/bin/sh", "-c", "dmesg | head -3; cat /proc/version; echo probe-done; sleep 3600"}}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.PodIP(t, "default", name, 120*time.Second)
		var logs string
		waitFor(t, "pod "+name+"'s output", func() bool {
			b, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			logs = string(b)
			return err == nil && strings.Contains(logs, "probe-done")
		})
		return logs
	}
	g := run("under-gvisor", &rc)
	t.Logf("under RuntimeClass %s:\n%s", rc, g)
	if !strings.Contains(g, "Starting gVisor") {
		t.Errorf("the gvisor pod's dmesg is not gVisor's: %q", g)
	}
	h := run("under-runc", nil)
	if strings.Contains(h, "gVisor") {
		t.Errorf("the default pod runs under gVisor too: %q", h)
	}
}
