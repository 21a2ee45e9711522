package kubeenv

// A CSI storage stack with snapshots on the test cluster (Options.CSI):
// berth's own CSI driver (package csidriver, in this process, registered
// with the kubelet through its plugins_registry), the external-provisioner
// and the external-snapshotter's csi-snapshotter sidecars and its
// snapshot-controller as host processes with the admin kubeconfig, the
// snapshot.storage.k8s.io CRDs, a CSIDriver object (no attach), the
// StorageClass CSIStorageClass and the default VolumeSnapshotClass
// CSISnapshotClass. The sidecars are built by scripts/k8s-csi-tools.sh.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/testenv/kubeenv/csidriver"
)

// Names of the CSI stack's objects.
const (
	CSIDriverName    = "csi.berth.test"
	CSIStorageClass  = "berth-csi"
	CSISnapshotClass = "berth-csi"
)

// CSIBinaries are what scripts/k8s-csi-tools.sh built.
type CSIBinaries struct {
	Dir                                          string
	Provisioner, Snapshotter, SnapshotController string
	// CRDs are the snapshot.storage.k8s.io CRD files.
	CRDs []string
}

// FindCSIBinaries locates scripts/k8s-csi-tools.sh's output: in
// $BERTH_K8S_CSI_BIN if set, else in the dir named by <cache>/CURRENT-CSI.
func FindCSIBinaries() (CSIBinaries, error) {
	dir := os.Getenv("BERTH_K8S_CSI_BIN")
	if dir == "" {
		root := os.Getenv("BERTH_K8S_CACHE")
		if root == "" {
			root = cacheRoot
		}
		b, err := os.ReadFile(filepath.Join(root, "CURRENT-CSI"))
		if err != nil {
			return CSIBinaries{}, fmt.Errorf("kubeenv: no CSI sidecars (%v): build them with scripts/k8s-csi-tools.sh (make test-k8s runs it)", err)
		}
		dir = strings.TrimSpace(string(b))
	}
	bs := CSIBinaries{Dir: dir, Provisioner: filepath.Join(dir, "csi-provisioner"),
		Snapshotter: filepath.Join(dir, "csi-snapshotter"), SnapshotController: filepath.Join(dir, "snapshot-controller")}
	for _, p := range []string{bs.Provisioner, bs.Snapshotter, bs.SnapshotController} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return CSIBinaries{}, fmt.Errorf("kubeenv: %s is missing or not executable: rebuild with scripts/k8s-csi-tools.sh", p)
		}
	}
	for _, n := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		p := filepath.Join(dir, "crd", "snapshot.storage.k8s.io_"+n+".yaml")
		if _, err := os.Stat(p); err != nil {
			return CSIBinaries{}, fmt.Errorf("kubeenv: CRD %s missing: rebuild with scripts/k8s-csi-tools.sh", p)
		}
		bs.CRDs = append(bs.CRDs, p)
	}
	return bs, nil
}

// csiStack is what startCSI runs beside the cluster's processes.
type csiStack struct {
	driver *csidriver.Driver
}

// stop ends the driver, after the kubelet (which unpublishes through it)
// and the sidecars are gone.
func (s *csiStack) stop() {
	if s != nil && s.driver != nil {
		s.driver.Stop()
	}
}

// InstallSnapshotCRDs creates the snapshot.storage.k8s.io CRDs and waits
// until the API serves them (without a snapshot controller or driver:
// what a cluster with the API but nothing behind it looks like).
func (c *Cluster) InstallSnapshotCRDs(t testing.TB, bins CSIBinaries) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, p := range bins.CRDs {
		b, err := os.ReadFile(p)
		must(t, err)
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatalf("kubeenv: %s: %v", p, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("kubeenv: creating CRD %s: %v", u.GetName(), err)
		}
	}
	if err := waitFor(60*time.Second, "the snapshot.storage.k8s.io/v1 API", func() (bool, error) {
		rl, err := c.Client.Discovery().ServerResourcesForGroupVersion("snapshot.storage.k8s.io/v1")
		if err != nil {
			return false, err
		}
		n := 0
		for _, r := range rl.APIResources {
			switch r.Name {
			case "volumesnapshots", "volumesnapshotcontents", "volumesnapshotclasses":
				n++
			}
		}
		return n == 3, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// startCSI starts the CSI stack on the node (after it is Ready).
func (c *Cluster) startCSI(t testing.TB) {
	t.Helper()
	bins, err := FindCSIBinaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kubeletDir := filepath.Join(c.node.dir, "kubelet")
	d, err := csidriver.Start(csidriver.Config{
		Name: CSIDriverName, NodeID: c.NodeName, Root: filepath.Join(c.Dir, "csi"),
		Socket:          filepath.Join(kubeletDir, "plugins", CSIDriverName, "csi.sock"),
		RegistrationDir: filepath.Join(kubeletDir, "plugins_registry"),
	})
	if err != nil {
		t.Fatalf("kubeenv: CSI driver: %v", err)
	}
	c.csi = &csiStack{driver: d}
	no := false
	_, err = c.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &no, PodInfoOnMount: &no,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
	}, metav1.CreateOptions{})
	must(t, err)
	if err := d.WaitRegistered(60 * time.Second); err != nil {
		fatalf(t, []*proc{c.node.kubelet}, "kubeenv: %v", err)
	}
	c.InstallSnapshotCRDs(t, bins)
	del := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	_, err = c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: CSIStorageClass},
		Provisioner: CSIDriverName, ReclaimPolicy: &del, VolumeBindingMode: &immediate,
	}, metav1.CreateOptions{})
	must(t, err)
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": CSISnapshotClass,
			"annotations": map[string]any{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
		"driver": CSIDriverName, "deletionPolicy": "Delete",
	}}
	_, err = dyn.Resource(schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}).
		Create(ctx, vsc, metav1.CreateOptions{})
	must(t, err)
	logs := filepath.Join(c.Dir, "logs")
	sock := filepath.Join(kubeletDir, "plugins", CSIDriverName, "csi.sock")
	for _, p := range []struct {
		name, bin string
		args      []string
	}{
		// Group snapshots need CRDs of their own, which the stack does not
		// install: off, so neither waits for them at start.
		{"snapshot-controller", bins.SnapshotController, []string{"--kubeconfig=" + c.Kubeconfig, "--leader-election=false",
			"--feature-gates=CSIVolumeGroupSnapshot=false", "--v=2"}},
		{"csi-provisioner", bins.Provisioner, []string{"--kubeconfig=" + c.Kubeconfig, "--csi-address=" + sock,
			"--leader-election=false", "--timeout=30s", "--v=2"}},
		{"csi-snapshotter", bins.Snapshotter, []string{"--kubeconfig=" + c.Kubeconfig, "--csi-address=" + sock,
			"--leader-election=false", "--timeout=30s", "--feature-gates=CSIVolumeGroupSnapshot=false", "--v=2"}},
	} {
		pr, err := start(logs, p.name, p.bin, p.args...)
		must(t, err)
		c.procs = append(c.procs, pr)
	}
}
