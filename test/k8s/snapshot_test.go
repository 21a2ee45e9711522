package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/kube"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/testenv/kubeenv"
)

// TestSnapshotsRefusedWithoutCSI: on a cluster that serves no
// snapshot.storage.k8s.io API the backend's classes say Capture false and
// capture, materialize and revert answer ErrNotSupported naming the API;
// once the API is served but no VolumeSnapshotClass is for the claims'
// driver, the reason names the driver.
func TestSnapshotsRefusedWithoutCSI(t *testing.T) {
	var c *kubeenv.Cluster
	checkGone(t, &c)
	csiBins, err := kubeenv.FindCSIBinaries()
	if err != nil {
		t.Fatal(err)
	}
	c = kubeenv.Start(t, kubeenv.Options{})
	ctx := context.Background()
	const ns = "berth-sandboxes"
	c.CreateNamespace(t, ns)
	snaps := snapclient.NewForConfigOrDie(c.Config)
	open := func(sc string) *kube.Backend {
		t.Helper()
		b, err := kube.New(ctx, kube.Config{Client: c.Client, Snapshots: snaps, Namespace: ns, AgentImage: "a", Image: "i",
			StorageClass: sc, ReadyTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(false) })
		return b
	}
	sb := &sandbox.Sandbox{ID: randID(), Spec: sandbox.Spec{Persistent: true,
		Volumes: []sandbox.VolumeMount{{VolumeID: "v" + randID(), Path: "/workspace", Owned: true}}}}
	refused := func(b *kube.Backend, want string) {
		t.Helper()
		if caps, _ := node.ClassCaps(b, ""); caps.Capture {
			t.Errorf("caps say Capture on a cluster that cannot (%+v)", caps)
		}
		_, release, err := b.Capture(ctx, sb, "snap"+randID())
		release()
		for what, err := range map[string]error{"capture": err,
			"materialize": b.Materialize(ctx, sb, "x"), "revert": b.Revert(ctx, sb, "x")} {
			if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %v; want ErrNotSupported saying %q", what, err, want)
			}
		}
		if err := b.DropCapture("x"); err != nil {
			t.Errorf("drop of a capture that cannot exist = %v", err)
		}
	}
	refused(open(""), "the cluster serves no snapshot.storage.k8s.io/v1 API")

	c.InstallSnapshotCRDs(t, csiBins)
	_, err = c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "other.csi.example"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused(open("other"), "no VolumeSnapshotClass for driver other.csi.example")
	refused(open("missing"), "StorageClass missing (--storage-class) does not exist")
}

// TestSnapshotsOnRealNode: fork, snapshot, restore and a sandbox from a
// snapshot through CSI VolumeSnapshots on the real node, with berth's test
// CSI driver, the external-provisioner, csi-snapshotter and
// snapshot-controller. A child sees the parent's file and neither sees
// the other's later writes; a restore brings the workspace back as at the
// snapshot; a sandbox made from the snapshot has it; after the deletes no
// VolumeSnapshot, claim, PV or driver copy is left.
func TestSnapshotsOnRealNode(t *testing.T) {
	t0 := time.Now()
	c, snaps := startCSICluster(t)
	ctx := context.Background()
	const ns = sandboxNS
	b, err := kube.New(ctx, kube.Config{Client: c.Client, Snapshots: snaps, Namespace: ns, AgentImage: agentRef, Image: baseRef,
		PullPolicy: corev1.PullNever, NodeName: c.NodeName, StorageClass: kubeenv.CSIStorageClass, ReadyTimeout: 90 * time.Second,
		CaptureGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(node.Hooks{})
	defer b.Close(false)
	if caps, _ := node.ClassCaps(b, ""); !caps.Capture || caps.Freeze {
		t.Fatalf("caps = %+v; want Capture and no Freeze", caps)
	}

	var made []*sandbox.Sandbox
	newSandbox := func(name string) *sandbox.Sandbox {
		sb := &sandbox.Sandbox{ID: randID(), Name: name, Spec: sandbox.Spec{Template: "base", Persistent: true, VolumeSize: 64 << 20,
			Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 128 << 20, Pids: 256},
			Volumes:   []sandbox.VolumeMount{{VolumeID: "vol" + randID(), Name: "workspace", Path: "/workspace", Owned: true}}}}
		made = append(made, sb)
		return sb
	}
	t.Cleanup(func() {
		for _, sb := range made {
			_ = b.Remove(context.Background(), sb)
			_ = b.DeleteVolume(sb.Spec.Volumes[0].VolumeID)
		}
	})
	provision := func(sb *sandbox.Sandbox) {
		t.Helper()
		t1 := time.Now()
		if err := b.CreateVolume(sb.Spec.Volumes[0].VolumeID, sb.Spec.VolumeSize, 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Provision(ctx, sb); err != nil {
			t.Fatalf("provision %s: %v", sb.Name, err)
		}
		t.Logf("%s provisioned in %v", sb.Name, time.Since(t1).Round(time.Millisecond))
	}
	sh := func(sb *sandbox.Sandbox, script string) string {
		t.Helper()
		var out bytes.Buffer
		ex, err := b.Agent(sb).Exec(ctx, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}},
			agent.ExecIO{Stdout: &out, Stderr: &out})
		if err != nil || ex.Code != 0 {
			t.Fatalf("%s: exec %q: %v, exit %d: %s", sb.Name, script, err, ex.Code, out.String())
		}
		return out.String()
	}
	files := func(sb *sandbox.Sandbox) string {
		t.Helper()
		return sh(sb, "cd /workspace && for f in *.txt; do echo $f=$(cat $f); done")
	}

	parent := newSandbox("parent")
	provision(parent)
	sh(parent, "echo one > /workspace/a.txt")

	// Fork: a capture, a child from it, the capture dropped (the engine's
	// order: capture, materialize, provision, drop).
	stage := b.CaptureName(parent.ID)
	t1 := time.Now()
	cp, release, err := b.Capture(ctx, parent, stage)
	if err != nil {
		dumpSnapshots(t, snaps, ns)
		t.Fatalf("fork capture: %v", err)
	}
	t.Logf("fork capture ready in %v (frozen %v, %d bytes)", time.Since(t1).Round(time.Millisecond), cp.Frozen, cp.SizeBytes)
	if cp.Frozen != 0 {
		t.Errorf("a capture on Kubernetes froze nothing, yet says %v", cp.Frozen)
	}
	child := newSandbox("child")
	if err := b.Materialize(ctx, child, stage); err != nil {
		t.Fatalf("materialize the child: %v", err)
	}
	provision(child)
	release()
	if err := b.DropCapture(stage); err != nil {
		t.Fatalf("drop the fork stage: %v", err)
	}
	if got := files(child); got != "a.txt=one\n" {
		t.Fatalf("the child sees %q; want the parent's a.txt", got)
	}
	sh(child, "echo child > /workspace/b.txt")
	sh(parent, "echo parent > /workspace/c.txt")
	if got := files(parent); got != "a.txt=one\nc.txt=parent\n" {
		t.Errorf("the parent sees %q: the child's write reached it, or its own is missing", got)
	}
	if got := files(child); got != "a.txt=one\nb.txt=child\n" {
		t.Errorf("the child sees %q: the parent's write reached it, or its own is missing", got)
	}

	// Snapshot, write more, stop, revert, start: as at the snapshot.
	snapID := randID()
	if _, release, err = b.Capture(ctx, parent, snapID); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	release()
	sh(parent, "echo two > /workspace/a.txt; echo later > /workspace/d.txt")
	if err := b.Stop(ctx, parent); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	if err := b.Revert(ctx, parent, snapID); err != nil {
		t.Fatalf("revert: %v", err)
	}
	t.Logf("reverted in %v", time.Since(t2).Round(time.Millisecond))
	if err := b.Provision(ctx, parent); err != nil {
		t.Fatalf("start after revert: %v", err)
	}
	if got := files(parent); got != "a.txt=one\nc.txt=parent\n" {
		t.Errorf("after the restore the parent holds %q; want the snapshot's a.txt=one, c.txt=parent", got)
	}

	// A sandbox from the snapshot.
	fromSnap := newSandbox("from-snapshot")
	if err := b.Materialize(ctx, fromSnap, snapID); err != nil {
		t.Fatalf("materialize from the snapshot: %v", err)
	}
	provision(fromSnap)
	if got := files(fromSnap); got != "a.txt=one\nc.txt=parent\n" {
		t.Errorf("the sandbox from the snapshot holds %q", got)
	}
	// The sweep: a capture no record keeps is reported and its fix
	// removes it; a recorded snapshot and a capture in use are left alone.
	orphan, inUse := randID(), b.CaptureName(parent.ID)
	for _, n := range []string{orphan, inUse} {
		if _, release, err = b.Capture(ctx, parent, n); err != nil {
			t.Fatalf("capture %s: %v", n, err)
		}
		if n == orphan {
			release()
		}
	}
	time.Sleep(5 * time.Millisecond)
	var found []string
	b.Sweep(ctx, node.SweepInput{Live: map[string]*sandbox.Sandbox{}, Busy: func(string) bool { return true },
		VolumeOwner: func(string) (string, bool) { return "", true },
		Snapshot:    func(id string) bool { return id == snapID }},
		func(kind, id, detail string, fix func() error) {
			if kind != "capture" {
				return
			}
			found = append(found, id)
			if fix == nil {
				t.Errorf("capture %s reported without a fix", id)
			} else if err := fix(); err != nil {
				t.Errorf("fix of capture %s: %v", id, err)
			}
		})
	if len(found) != 1 || found[0] != orphan {
		t.Errorf("sweep found captures %v; want only the unrecorded %s", found, orphan)
	}
	release()
	if err := b.DropCapture(inUse); err != nil {
		t.Fatal(err)
	}
	// A capture that does not exist.
	if err := b.Materialize(ctx, newSandbox("none"), "nosuch"); !errors.Is(err, node.ErrNoCapture) {
		t.Errorf("materialize of a missing capture = %v; want ErrNoCapture", err)
	}

	// Delete everything: nothing of berth's is left in the API or on disk.
	if err := b.DropCapture(snapID); err != nil {
		t.Fatal(err)
	}
	for _, sb := range made {
		if err := b.Remove(ctx, sb); err != nil {
			t.Fatalf("remove %s: %v", sb.Name, err)
		}
		if err := b.DeleteVolume(sb.Spec.Volumes[0].VolumeID); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		left := snapshotLeftovers(t, c, snaps, ns)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left after every delete: %v", left)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("whole test %v", time.Since(t0).Round(time.Millisecond))
}

// snapshotLeftovers lists berth's VolumeSnapshots, their contents, claims,
// PVs of the namespace and the CSI driver's volume and snapshot copies.
func snapshotLeftovers(t *testing.T, c *kubeenv.Cluster, snaps snapclient.Interface, ns string) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	sel := metav1.ListOptions{LabelSelector: kube.LabelManagedBy + "=" + kube.ManagedBy}
	vs, err := snaps.SnapshotV1().VolumeSnapshots(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range vs.Items {
		left = append(left, "volumesnapshot "+s.Name)
	}
	vcs, err := snaps.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range vcs.Items {
		left = append(left, "volumesnapshotcontent "+s.Name)
	}
	pvcs, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		left = append(left, "claim "+p.Name)
	}
	pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvs.Items {
		left = append(left, "pv "+p.Name)
	}
	for _, d := range []string{"volumes", "snapshots"} {
		ents, _ := os.ReadDir(filepath.Join(c.Dir, "csi", d))
		for _, e := range ents {
			left = append(left, "driver "+d+"/"+e.Name())
		}
	}
	return left
}

// dumpSnapshots logs the VolumeSnapshots and contents, for a failure.
func dumpSnapshots(t *testing.T, snaps snapclient.Interface, ns string) {
	ctx := context.Background()
	if vs, err := snaps.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range vs.Items {
			t.Logf("volumesnapshot %s: spec %+v status %s", s.Name, s.Spec, statusString(s.Status))
		}
	}
	if vcs, err := snaps.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range vcs.Items {
			t.Logf("volumesnapshotcontent %s: driver %s source %+v status %+v", s.Name, s.Spec.Driver, s.Spec.Source, s.Status)
		}
	}
}

func statusString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
