package kube

// Captures on Kubernetes: CSI VolumeSnapshots (snapshot.storage.k8s.io/v1)
// of a sandbox's owned claims. A pod's root layer goes with the pod, so
// only volumes are captured (persist_root is refused anyway). There is no
// freeze: a capture is what the CSI driver's snapshot gives, crash-
// consistent at the storage level, while the sandbox's processes run on.
//
// A capture named N of a sandbox with owned volumes v0, v1... (in the
// order of its spec) is one VolumeSnapshot per volume, berth-snap-N-0,
// berth-snap-N-1..., labelled with this instance and LabelCapture=N.
// Materialize makes a new sandbox's owned claims with those snapshots as
// their dataSource, in the same order; Revert deletes a stopped sandbox's
// owned claims and makes them again from the snapshots; DropCapture
// deletes the snapshots.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// LabelCapture names the capture a VolumeSnapshot belongs to.
const LabelCapture = "berth.sh/capture"

// annotations of a capture's VolumeSnapshot: the sandbox it was taken of
// and the mount path of the volume, for people and doctor.
const (
	annCaptureOf   = "berth.sh/captured-sandbox"
	annCapturePath = "berth.sh/volume-path"
)

// snapshotGroup is the API group of VolumeSnapshots.
const snapshotGroup = "snapshot.storage.k8s.io"

// defaultClassAnnotation marks a VolumeSnapshotClass the default for its
// driver; defaultStorageClassAnnotation the cluster's default StorageClass.
const (
	defaultClassAnnotation        = "snapshot.storage.kubernetes.io/is-default-class"
	defaultStorageClassAnnotation = "storageclass.kubernetes.io/is-default-class"
)

func snapName(capture string, k int) string { return "berth-snap-" + capture + "-" + strconv.Itoa(k) }

// validCapture: a capture name becomes part of object names and a label
// value (engine ids, fork-<id>-<hex>).
func validCapture(name string) bool { return name != "" && len(name) <= 48 && dnsLabel(name) }

// snapSupport is what detectSnapshots found: the class to name ("" the
// snapshot controller's default for the driver) or why captures are
// refused.
type snapSupport struct {
	class string
	why   string
}

// detectSnapshots looks, once at New, at whether the cluster can snapshot
// the claims this backend makes: the snapshot API served, and a
// VolumeSnapshotClass for the CSI driver that provisions them. Reading
// StorageClasses and VolumeSnapshotClasses needs cluster-wide rights the
// chart's Role does not give; where they are forbidden the check is left
// to the snapshot controller, whose refusal is then the capture's error.
func (b *Backend) detectSnapshots(ctx context.Context) snapSupport {
	if b.snap == nil {
		return snapSupport{why: "the backend was given no snapshot.storage.k8s.io client"}
	}
	rl, err := b.client.Discovery().ServerResourcesForGroupVersion(snapshotGroup + "/v1")
	if apierrors.IsNotFound(err) {
		return snapSupport{why: "the cluster serves no " + snapshotGroup + "/v1 API (install the external-snapshotter's CRDs and snapshot-controller, and a CSI driver with snapshots)"}
	}
	if err != nil {
		return snapSupport{why: "could not tell whether the cluster serves the " + snapshotGroup + "/v1 API: " + err.Error()}
	}
	if !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "volumesnapshots" }) {
		return snapSupport{why: "the cluster's " + snapshotGroup + "/v1 API has no volumesnapshots resource"}
	}
	scName, driver, why := b.claimDriver(ctx)
	if why != "" {
		return snapSupport{why: why}
	}
	if b.cfg.SnapshotClass != "" {
		vc, err := b.snap.SnapshotV1().VolumeSnapshotClasses().Get(ctx, b.cfg.SnapshotClass, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return snapSupport{why: "VolumeSnapshotClass " + b.cfg.SnapshotClass + " (--kube-snapshot-class) does not exist"}
		case apierrors.IsForbidden(err):
			// Trust the flag; the snapshot controller checks it.
		case err != nil:
			return snapSupport{why: "reading VolumeSnapshotClass " + b.cfg.SnapshotClass + ": " + err.Error()}
		case driver != "" && vc.Driver != driver:
			return snapSupport{why: fmt.Sprintf("VolumeSnapshotClass %s is for driver %s, but the claims' StorageClass %s provisions with %s", vc.Name, vc.Driver, scName, driver)}
		}
		return snapSupport{class: b.cfg.SnapshotClass}
	}
	list, err := b.snap.SnapshotV1().VolumeSnapshotClasses().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return snapSupport{} // the controller's default for the driver
	}
	if err != nil {
		return snapSupport{why: "listing VolumeSnapshotClasses: " + err.Error()}
	}
	class, why := pickSnapshotClass(list.Items, scName, driver)
	return snapSupport{class: class, why: why}
}

// pickSnapshotClass chooses the VolumeSnapshotClass for driver (of
// StorageClass scName): the one marked default, else the only one.
// driver "" (not readable): the one default class of the cluster, else
// leave it to the snapshot controller.
func pickSnapshotClass(classes []snapv1.VolumeSnapshotClass, scName, driver string) (class, why string) {
	var mine []snapv1.VolumeSnapshotClass
	for _, c := range classes {
		if driver == "" || c.Driver == driver {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		if driver == "" {
			return "", "no VolumeSnapshotClass exists"
		}
		return "", fmt.Sprintf("no VolumeSnapshotClass for driver %s (the provisioner of StorageClass %s)", driver, scName)
	}
	var defaults []string
	for _, c := range mine {
		if c.Annotations[defaultClassAnnotation] == "true" {
			defaults = append(defaults, c.Name)
		}
	}
	switch {
	case len(defaults) == 1:
		return defaults[0], ""
	case len(mine) == 1:
		return mine[0].Name, ""
	case driver == "":
		return "", ""
	default:
		return "", fmt.Sprintf("%d VolumeSnapshotClasses for driver %s and not exactly one marked default; name one with --kube-snapshot-class", len(mine), driver)
	}
}

// claimDriver returns the StorageClass the claims use and its
// provisioner; both "" when they cannot be read (forbidden, or no
// default StorageClass and none configured).
func (b *Backend) claimDriver(ctx context.Context) (sc, driver, why string) {
	if b.cfg.StorageClass != "" {
		s, err := b.client.StorageV1().StorageClasses().Get(ctx, b.cfg.StorageClass, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "", "", "StorageClass " + b.cfg.StorageClass + " (--storage-class) does not exist"
		case err != nil:
			return b.cfg.StorageClass, "", ""
		}
		return s.Name, s.Provisioner, ""
	}
	list, err := b.client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", ""
	}
	var def []storagev1.StorageClass
	for _, s := range list.Items {
		if s.Annotations[defaultStorageClassAnnotation] == "true" {
			def = append(def, s)
		}
	}
	if len(def) != 1 {
		return "", "", ""
	}
	return def[0].Name, def[0].Provisioner, ""
}

// capturesRefused is the refusal of every capture operation, nil when the
// cluster can take them.
func (b *Backend) capturesRefused(what string) error {
	switch {
	case b.snaps.why != "":
		return notOnKube(what, b.snaps.why)
	case b.snap == nil:
		return notOnKube(what, "the backend was given no snapshot.storage.k8s.io client")
	}
	return nil
}

// ownedVolumes are sb's owned volumes in spec order: what a capture holds.
func ownedVolumes(sb *sandbox.Sandbox) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned {
			out = append(out, vm)
		}
	}
	return out
}

// markCapture keeps a sweep off capture name until the returned func runs.
func (b *Backend) markCapture(name string) func() {
	b.mu.Lock()
	b.capturing[name]++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		if b.capturing[name]--; b.capturing[name] <= 0 {
			delete(b.capturing, name)
		}
		b.mu.Unlock()
	}
}

func (b *Backend) captureInFlight(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capturing[name] > 0
}

// snapshotFor is the VolumeSnapshot of sb's k-th owned volume vm under
// capture name.
func (b *Backend) snapshotFor(sb *sandbox.Sandbox, name string, k int, vm sandbox.VolumeMount) *snapv1.VolumeSnapshot {
	claim := claimName(vm.VolumeID)
	s := &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: snapName(name, k), Namespace: b.cfg.Namespace,
			Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance, LabelCapture: name},
			Annotations: map[string]string{annCaptureOf: sb.ID, annCapturePath: vm.Path}},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}},
	}
	if b.snaps.class != "" {
		c := b.snaps.class
		s.Spec.VolumeSnapshotClassName = &c
	}
	return s
}

// Capture takes a VolumeSnapshot of each of sb's owned claims under name
// and waits until every one is ready to use. Nothing is frozen (Frozen
// is 0): the copy is what the CSI driver's snapshot gives, crash-
// consistent per volume. On failure every snapshot made is deleted.
func (b *Backend) Capture(ctx context.Context, sb *sandbox.Sandbox, name string) (c node.Capture, release func(), err error) {
	if err := b.capturesRefused("fork and snapshot"); err != nil {
		return c, func() {}, err
	}
	if !validCapture(name) {
		return c, func() {}, fmt.Errorf("bad capture name %q", name)
	}
	unmark := b.markCapture(name)
	exists := false // another's capture of that name: not ours to drop
	defer func() {
		if err != nil && !exists {
			if derr := b.DropCapture(name); derr != nil {
				b.log.Warn("removing a failed capture", "capture", name, "err", derr)
			}
			unmark()
			release = func() {}
		}
	}()
	api := b.snap.SnapshotV1().VolumeSnapshots(b.cfg.Namespace)
	vols := ownedVolumes(sb)
	for k, vm := range vols {
		if _, err := api.Create(ctx, b.snapshotFor(sb, name, k, vm), metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) && k == 0 {
				exists = true
				unmark()
				return c, func() {}, fmt.Errorf("capture %s exists", name)
			}
			return c, nil, fmt.Errorf("snapshot of volume %s: %w", vm.VolumeID, err)
		}
	}
	for k, vm := range vols {
		s, err := b.waitSnapshotReady(ctx, snapName(name, k))
		if err != nil {
			return c, nil, fmt.Errorf("snapshot of volume %s: %w", vm.VolumeID, err)
		}
		c.SizeBytes += restoreSize(s)
	}
	c.Name = name
	return c, unmark, nil
}

// restoreSize is what a snapshot says a volume made from it needs.
func restoreSize(s *snapv1.VolumeSnapshot) int64 {
	if s.Status != nil && s.Status.RestoreSize != nil {
		return s.Status.RestoreSize.Value()
	}
	return 0
}

// snapshotError is the error a snapshot's status reports, nil if none.
func snapshotError(s *snapv1.VolumeSnapshot) error {
	if s.Status == nil || s.Status.Error == nil {
		return nil
	}
	msg := "no message"
	if s.Status.Error.Message != nil {
		msg = *s.Status.Error.Message
	}
	return fmt.Errorf("VolumeSnapshot %s failed: %s", s.Name, msg)
}

func snapshotReady(s *snapv1.VolumeSnapshot) bool {
	return s.Status != nil && s.Status.ReadyToUse != nil && *s.Status.ReadyToUse
}

// waitSnapshotReady polls the API until snapshot name is ready to use;
// an error in its status ends the wait with that error (the snapshot
// controller keeps retrying some errors: the first one seen is final
// here, the capture is dropped). Bounded by ReadyTimeout.
func (b *Backend) waitSnapshotReady(ctx context.Context, name string) (*snapv1.VolumeSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	api := b.snap.SnapshotV1().VolumeSnapshots(b.cfg.Namespace)
	delay := 50 * time.Millisecond
	for {
		s, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for VolumeSnapshot %s to be ready: %w", name, ctx.Err())
			}
			return nil, err
		}
		if err := snapshotError(s); err != nil {
			return nil, err
		}
		if snapshotReady(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for VolumeSnapshot %s to be ready: %w", name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// captureSnapshots returns capture name's snapshots for n owned volumes,
// each ready to use: node.ErrNoCapture when one is missing.
func (b *Backend) captureSnapshots(ctx context.Context, name string, n int) ([]*snapv1.VolumeSnapshot, error) {
	if !validCapture(name) {
		return nil, fmt.Errorf("%w %q", node.ErrNoCapture, name)
	}
	api := b.snap.SnapshotV1().VolumeSnapshots(b.cfg.Namespace)
	out := make([]*snapv1.VolumeSnapshot, n)
	for k := range n {
		s, err := api.Get(ctx, snapName(name, k), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w %s: no VolumeSnapshot %s", node.ErrNoCapture, name, snapName(name, k))
		}
		if err != nil {
			return nil, err
		}
		if s.Labels[LabelInstance] != b.cfg.Instance || s.Labels[LabelCapture] != name {
			return nil, fmt.Errorf("%w %s: VolumeSnapshot %s is not this instance's", node.ErrNoCapture, name, s.Name)
		}
		if s.DeletionTimestamp != nil {
			return nil, fmt.Errorf("%w %s: VolumeSnapshot %s is being deleted", node.ErrNoCapture, name, s.Name)
		}
		if err := snapshotError(s); err != nil {
			return nil, err
		}
		if !snapshotReady(s) {
			if s, err = b.waitSnapshotReady(ctx, s.Name); err != nil {
				return nil, err
			}
		}
		out[k] = s
	}
	return out, nil
}

// claimFromSnapshot is volume vm's claim with snapshot s as its data
// source, at least as large as the snapshot needs.
func (b *Backend) claimFromSnapshot(sb *sandbox.Sandbox, vm sandbox.VolumeMount, s *snapv1.VolumeSnapshot) *corev1.PersistentVolumeClaim {
	size := max(sb.Spec.VolumeSize, restoreSize(s))
	if size <= 0 {
		size = 1 << 30
	}
	c := b.claimFor(vm.VolumeID, size)
	group := snapshotGroup
	c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: s.Name}
	c.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: s.Name}
	return c
}

// fromSnapshot reports whether claim c was made from snapshot name.
func fromSnapshot(c *corev1.PersistentVolumeClaim, name string) bool {
	ds := c.Spec.DataSource
	return ds != nil && ds.Kind == "VolumeSnapshot" && ds.Name == name && ds.APIGroup != nil && *ds.APIGroup == snapshotGroup
}

// Materialize makes new sandbox sb's owned claims from capture name's
// snapshots, in order (a fork's child and a sandbox from a snapshot have
// the source's owned volumes, fresh ids, same order). A claim already
// made from the same snapshot (a restarted create) is kept.
func (b *Backend) Materialize(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	if err := b.capturesRefused("a sandbox from a snapshot"); err != nil {
		return err
	}
	vols := ownedVolumes(sb)
	snaps, err := b.captureSnapshots(ctx, name, len(vols))
	if err != nil {
		return err
	}
	api := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace)
	for k, vm := range vols {
		if !validID(vm.VolumeID) {
			return errdefs.Invalid("volume id %q cannot name a claim", vm.VolumeID)
		}
		_, err := api.Create(ctx, b.claimFromSnapshot(sb, vm, snaps[k]), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			c, gerr := api.Get(ctx, claimName(vm.VolumeID), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if !fromSnapshot(c, snaps[k].Name) {
				return fmt.Errorf("volume %s: claim %s exists and was not made from %s", vm.VolumeID, c.Name, snaps[k].Name)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("volume %s from %s: %w", vm.VolumeID, snaps[k].Name, err)
		}
	}
	return nil
}

// Revert replaces stopped sandbox sb's owned claims with claims made from
// capture name's snapshots: each claim is deleted, gone from the API,
// then made again under its name with the snapshot as data source. Every
// snapshot is checked before any claim is touched. A revert cut short
// leaves some claims missing; it can be run again.
func (b *Backend) Revert(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	if err := b.capturesRefused("restoring a snapshot"); err != nil {
		return err
	}
	if p, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(sb.ID), metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		return fmt.Errorf("sandbox %s still has a pod; stop it first", sb.ID)
	}
	vols := ownedVolumes(sb)
	snaps, err := b.captureSnapshots(ctx, name, len(vols))
	if err != nil {
		return err
	}
	api := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace)
	for k, vm := range vols {
		if err := b.DeleteVolume(vm.VolumeID); err != nil {
			return err
		}
		if err := b.waitClaimGoneAPI(ctx, vm.VolumeID); err != nil {
			return err
		}
		if _, err := api.Create(ctx, b.claimFromSnapshot(sb, vm, snaps[k]), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("volume %s from %s: %w", vm.VolumeID, snaps[k].Name, err)
		}
	}
	return nil
}

// waitClaimGoneAPI waits until volume id's claim is gone, asking the API
// (a claim made again under the same name must not meet the old one).
func (b *Backend) waitClaimGoneAPI(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	for {
		_, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Get(ctx, claimName(id), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for claim %s to go (is a pod still using it?): %w", claimName(id), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DropCapture deletes capture name's VolumeSnapshots (the snapshot
// controller then deletes their contents and the driver's copies); a
// missing one is not an error.
func (b *Backend) DropCapture(name string) error {
	if b.snaps.why != "" || b.snap == nil {
		return nil // none can exist
	}
	if !validCapture(name) {
		return fmt.Errorf("bad capture name %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReadyTimeout)
	defer cancel()
	api := b.snap.SnapshotV1().VolumeSnapshots(b.cfg.Namespace)
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: b.captureSelector(name)})
	if err != nil {
		return fmt.Errorf("capture %s: %w", name, err)
	}
	var errs []error
	for _, s := range list.Items {
		if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// captureSelector selects this instance's snapshots of capture name
// ("" every capture).
func (b *Backend) captureSelector(name string) string {
	sel := labels.Set{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance}.String()
	if name == "" {
		return sel + "," + LabelCapture
	}
	return sel + "," + LabelCapture + "=" + name
}

// CaptureName returns a fresh name for a fork's capture of parent.
func (b *Backend) CaptureName(parent string) string {
	var r [3]byte
	_, _ = rand.Read(r[:])
	return "fork-" + parent + "-" + hex.EncodeToString(r[:])
}

// sweepCaptures reports this instance's captures no operation of this
// process uses and no record keeps: fork stages and unrecorded snapshots
// older than Config.CaptureGrace. The fix deletes them.
func (b *Backend) sweepCaptures(ctx context.Context, recorded func(string) bool, report node.Report) {
	if b.snaps.why != "" || b.snap == nil {
		return
	}
	list, err := b.snap.SnapshotV1().VolumeSnapshots(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: b.captureSelector("")})
	if err != nil {
		report("kubernetes", b.cfg.Namespace, "listing berth's VolumeSnapshots: "+err.Error(), nil)
		return
	}
	oldest := map[string]time.Time{}
	for _, s := range list.Items {
		name := s.Labels[LabelCapture]
		if s.DeletionTimestamp != nil || !validCapture(name) {
			continue // being deleted already; or not a name this backend makes
		}
		if t, ok := oldest[name]; !ok || s.CreationTimestamp.Time.Before(t) {
			oldest[name] = s.CreationTimestamp.Time
		}
	}
	names := make([]string, 0, len(oldest))
	for n := range oldest {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		if b.captureInFlight(name) || time.Since(oldest[name]) < b.cfg.CaptureGrace {
			continue
		}
		drop := func() error { return b.DropCapture(name) }
		switch {
		case strings.HasPrefix(name, "fork-"):
			report("capture", name, "VolumeSnapshots of a fork stage of no fork in progress", drop)
		case recorded == nil || !recorded(name):
			report("capture", name, "VolumeSnapshots of a snapshot with no record", drop)
		}
	}
}
