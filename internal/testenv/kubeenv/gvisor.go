package kubeenv

// gVisor on the node (Options.GVisor): containerd gets a second runtime
// handler, runsc, served by gVisor's own shim (containerd-shim-runsc-v1)
// with the runsc binary beside it, both built by scripts/k8s-runsc-tools.sh;
// the cluster gets RuntimeClass GVisorRuntimeClass naming that handler.
// runsc's state for the node's pods lives under the node's dir
// (RunscRoot), so a node agent given that root acts on this cluster's
// pods only, and teardown removes it with the rest.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GVisorRuntimeClass is the RuntimeClass of pods that run under gVisor
// (handler GVisorHandler) on a cluster started with Options.GVisor.
const (
	GVisorRuntimeClass = "gvisor"
	GVisorHandler      = "runsc"
)

// RunscBinaries are what scripts/k8s-runsc-tools.sh built.
type RunscBinaries struct {
	Dir         string
	Runsc, Shim string
}

// FindRunscBinaries locates scripts/k8s-runsc-tools.sh's output: in
// $BERTH_K8S_RUNSC_BIN if set, else in the dir named by
// <cache>/CURRENT-RUNSC.
func FindRunscBinaries() (RunscBinaries, error) {
	dir := os.Getenv("BERTH_K8S_RUNSC_BIN")
	if dir == "" {
		root := os.Getenv("BERTH_K8S_CACHE")
		if root == "" {
			root = cacheRoot
		}
		b, err := os.ReadFile(filepath.Join(root, "CURRENT-RUNSC"))
		if err != nil {
			return RunscBinaries{}, fmt.Errorf("kubeenv: no gVisor for the node (%v): build it with scripts/k8s-runsc-tools.sh (make test-k8s runs it)", err)
		}
		dir = strings.TrimSpace(string(b))
	}
	bs := RunscBinaries{Dir: dir, Runsc: filepath.Join(dir, "runsc"), Shim: filepath.Join(dir, "containerd-shim-runsc-v1")}
	for _, p := range []string{bs.Runsc, bs.Shim} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return RunscBinaries{}, fmt.Errorf("kubeenv: %s is missing or not executable: rebuild with scripts/k8s-runsc-tools.sh", p)
		}
	}
	return bs, nil
}

// RunscRoot is the runsc root of the node's gVisor pods: the shim's root
// plus containerd's namespace, as the shim composes it ("" without
// Options.GVisor).
func (c *Cluster) RunscRoot() string {
	if c.node == nil || c.runsc.Dir == "" {
		return ""
	}
	return filepath.Join(c.node.dir, "runsc-root", "k8s.io")
}

// Runsc is the runsc binary the node's shim runs ("" without
// Options.GVisor).
func (c *Cluster) Runsc() string { return c.runsc.Runsc }

// NodeIP is the real node's address (kubelet's --node-ip: pods'
// status.hostIP), on a link of its own that pods have no route to.
func (c *Cluster) NodeIP() string {
	if c.node == nil {
		return ""
	}
	return c.node.nodeIP.String()
}

// runscRuntime is the containerd config of the runsc handler, and
// writes the shim's own config file beside containerd's.
func (n *node) runscRuntime(bins RunscBinaries) (string, error) {
	if bins.Dir == "" {
		return "", nil
	}
	root := filepath.Join(n.dir, "runsc-root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	q := strconv.Quote
	shimCfg := filepath.Join(n.dir, "containerd", "runsc.toml")
	// systrap: no hardware virtualisation needed (docs/gvisor.md).
	conf := `binary_name = ` + q(bins.Runsc) + `
root = ` + q(root) + `
[runsc_config]
  platform = "systrap"
`
	if err := os.WriteFile(shimCfg, []byte(conf), 0o644); err != nil {
		return "", err
	}
	return `    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + GVisorHandler + `]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + GVisorHandler + `.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = ` + q(shimCfg) + `
`, nil
}

// createRuntimeClass makes RuntimeClass GVisorRuntimeClass.
func (c *Cluster) createRuntimeClass(t testing.TB) {
	t.Helper()
	_, err := c.Client.NodeV1().RuntimeClasses().Create(context.Background(), &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: GVisorRuntimeClass}, Handler: GVisorHandler}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubeenv: RuntimeClass %s: %v", GVisorRuntimeClass, err)
	}
}
