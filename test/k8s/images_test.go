package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// The refs of the two images every sandbox pod of these tests is made
// of, in each cluster's own containerd.
const (
	agentRef = "berth.local/agent:test"   // the agent binary at /berth-agent
	baseRef  = "berth.local/busybox:test" // the sandbox's root
)

// berth and its agent are built once for the whole package run (every
// test's agent image holds the same agent, the replicas' daemons are the
// same berth) into a directory TestMain removes; the agent alone also in
// its subdirectory agent/, the agent image's contents.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// berthBinary returns the path of berth built from this tree.
func berthBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			built.err = err
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "berth-k8s-bin-"); built.err != nil {
			return
		}
		if built.err = testenv.Build(context.Background(), root, filepath.Join(built.dir, "berth"), false); built.err != nil {
			return
		}
		built.err = testenv.BuildAgent(context.Background(), root, filepath.Join(built.dir, "agent", testenv.AgentName))
	})
	if built.err != nil {
		t.Fatalf("building berth: %v", built.err)
	}
	return filepath.Join(built.dir, "berth")
}

// importImages imports the agent image (berth-agent at /berth-agent, nothing else)
// and the busybox base into c's node, as agentRef and baseRef.
func importImages(t *testing.T, c *kubeenv.Cluster) {
	t.Helper()
	c.ImportImage(t, agentRef, kubeenv.BuildImage(t, filepath.Join(filepath.Dir(berthBinary(t)), "agent"), agentRef, kubeenv.ImageConfig{}))
	c.ImportImage(t, baseRef, kubeenv.BusyboxImage(t, baseRef))
}

// removeBuilt removes the package's berth build (TestMain, after the run).
func removeBuilt() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// hostPathPVs makes n hostPath PersistentVolumes of 1 GiB (directories
// under the cluster's dir) for claims to bind to: the controller-manager
// binds them, there is no provisioner. A released one (Retain) is not
// bound again, so a test makes one per claim it will make.
func hostPathPVs(t *testing.T, c *kubeenv.Cluster, prefix string, n int) {
	t.Helper()
	hpType := corev1.HostPathDirectoryOrCreate
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		_, err := c.Client.CoreV1().PersistentVolumes().Create(context.Background(), &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: filepath.Join(c.Dir, name), Type: &hpType}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
}
