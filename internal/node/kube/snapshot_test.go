package kube

import (
	"errors"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/errdefs"
)

func vsc(name, driver string, isDefault bool) snapv1.VolumeSnapshotClass {
	c := snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver}
	if isDefault {
		c.Annotations = map[string]string{defaultClassAnnotation: "true"}
	}
	return c
}

// The class of captures: the driver's default, else its only one; none
// for the driver is a refusal naming it.
func TestPickSnapshotClass(t *testing.T) {
	for _, tc := range []struct {
		name          string
		classes       []snapv1.VolumeSnapshotClass
		driver        string
		class, reason string
	}{
		{"only one for the driver", []snapv1.VolumeSnapshotClass{vsc("a", "x.csi", false), vsc("b", "y.csi", true)}, "x.csi", "a", ""},
		{"the default among several", []snapv1.VolumeSnapshotClass{vsc("a", "x.csi", false), vsc("b", "x.csi", true)}, "x.csi", "b", ""},
		{"several, no default", []snapv1.VolumeSnapshotClass{vsc("a", "x.csi", false), vsc("b", "x.csi", false)}, "x.csi", "", "not exactly one marked default"},
		{"none for the driver", []snapv1.VolumeSnapshotClass{vsc("b", "y.csi", true)}, "x.csi", "", "no VolumeSnapshotClass for driver x.csi (the provisioner of StorageClass sc)"},
		{"none at all", nil, "", "", "no VolumeSnapshotClass exists"},
		{"driver unknown, one default", []snapv1.VolumeSnapshotClass{vsc("a", "x.csi", false), vsc("b", "y.csi", true)}, "", "b", ""},
		{"driver unknown, no default: the controller picks", []snapv1.VolumeSnapshotClass{vsc("a", "x.csi", false), vsc("b", "y.csi", false)}, "", "", ""},
	} {
		class, why := pickSnapshotClass(tc.classes, "sc", tc.driver)
		if class != tc.class || (tc.reason == "") != (why == "") || !strings.Contains(why, tc.reason) {
			t.Errorf("%s: class %q, why %q; want %q, %q", tc.name, class, why, tc.class, tc.reason)
		}
	}
}

// A capture's objects: one labelled VolumeSnapshot per owned claim, in
// order, named after the capture; claims made from them name them as
// data source and are at least as large as the snapshot needs.
func TestCaptureObjects(t *testing.T) {
	b, sb := testBackend(), testSandbox()
	b.snaps.class = "fast"
	vols := ownedVolumes(sb)
	if len(vols) != 1 || vols[0].VolumeID != "vol1" {
		t.Fatalf("owned volumes %+v; want vol1 only (vol2 is named)", vols)
	}
	s := b.snapshotFor(sb, "snap1", 0, vols[0])
	if s.Name != "berth-snap-snap1-0" || s.Namespace != "sandboxes" || *s.Spec.Source.PersistentVolumeClaimName != "berth-vol-vol1" ||
		*s.Spec.VolumeSnapshotClassName != "fast" {
		t.Errorf("snapshot %s/%s of %v class %v", s.Namespace, s.Name, *s.Spec.Source.PersistentVolumeClaimName, s.Spec.VolumeSnapshotClassName)
	}
	if s.Labels[LabelCapture] != "snap1" || s.Labels[LabelInstance] != "berth" || s.Labels[LabelManagedBy] != ManagedBy || s.Labels[LabelSandbox] != "" {
		t.Errorf("labels %v", s.Labels)
	}
	big := resource.MustParse("2Gi")
	yes := true
	s.Status = &snapv1.VolumeSnapshotStatus{ReadyToUse: &yes, RestoreSize: &big}
	child := testSandbox()
	child.Spec.VolumeSize = 1 << 30
	c := b.claimFromSnapshot(child, vols[0], s)
	if got := c.Spec.Resources.Requests.Storage().Value(); got != 2<<30 {
		t.Errorf("claim of %d bytes; want the snapshot's restore size", got)
	}
	if !fromSnapshot(c, "berth-snap-snap1-0") || fromSnapshot(c, "other") || c.Spec.DataSourceRef.Name != s.Name {
		t.Errorf("data source %+v", c.Spec.DataSource)
	}
	if c.Labels[LabelVolume] != "vol1" {
		t.Errorf("claim labels %v", c.Labels)
	}
	msg := "driver says no"
	s.Status.Error = &snapv1.VolumeSnapshotError{Message: &msg}
	if err := snapshotError(s); err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("snapshotError = %v", err)
	}
	n := b.CaptureName("abc123def456ghi7")
	if !validCapture(n) || !strings.HasPrefix(n, "fork-abc123def456ghi7-") || n == b.CaptureName("abc123def456ghi7") {
		t.Errorf("CaptureName = %q: not a fresh valid name", n)
	}
	if len(snapName(n, 15)) > 63 {
		t.Errorf("snapshot name %q too long", snapName(n, 15))
	}
	for _, bad := range []string{"", "../x", "A", strings.Repeat("a", 49), "a/b"} {
		if validCapture(bad) {
			t.Errorf("capture name %q accepted", bad)
		}
	}
}

// Without a snapshot client (or where the cluster cannot), every capture
// operation is refused as not supported with the reason, and the caps
// say so.
func TestCaptureRefusals(t *testing.T) {
	b, sb := testBackend(), testSandbox()
	ctx := t.Context()
	b.snaps.why = "the cluster serves no snapshot.storage.k8s.io/v1 API"
	_, release, err := b.Capture(ctx, sb, "snap1")
	release()
	for what, err := range map[string]error{"capture": err, "materialize": b.Materialize(ctx, sb, "snap1"),
		"revert": b.Revert(ctx, sb, "snap1")} {
		if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "serves no snapshot.storage.k8s.io/v1 API") {
			t.Errorf("%s: %v", what, err)
		}
	}
	if err := b.DropCapture("snap1"); err != nil {
		t.Errorf("drop: %v", err)
	}
	b.snaps.why = ""
	if _, _, err := b.Capture(ctx, sb, "snap1"); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("capture without a client: %v", err)
	}
}
