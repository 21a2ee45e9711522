package csidriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The driver over its real socket, as the sidecars and the kubelet call
// it: a volume, a snapshot (a copy: later writes do not reach it), a
// volume from the snapshot, a bind-mount publish and unpublish, the
// registration socket, and ids that would leave its root refused.
func TestDriver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("csidriver: NodePublish bind-mounts; run as root (make test-k8s does)")
	}
	dir := t.TempDir()
	d, err := Start(Config{Name: "csi.berth.test", NodeID: "n1", Root: filepath.Join(dir, "data"),
		Socket: filepath.Join(dir, "csi.sock"), RegistrationDir: filepath.Join(dir, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "csi.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	id, ctl, nd := csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	if info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil || info.Name != "csi.berth.test" {
		t.Fatalf("plugin info %v, %v", info, err)
	}
	v, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "data", "volumes", v.Volume.VolumeId)
	if err := os.WriteFile(filepath.Join(vol, "a.txt"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: "pvc-1"})
	if err != nil || !s.Snapshot.ReadyToUse || s.Snapshot.SourceVolumeId != "pvc-1" {
		t.Fatalf("snapshot %v, %v", s, err)
	}
	if again, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: "pvc-1"}); err != nil || again.Snapshot.SnapshotId != "snapshot-1" {
		t.Errorf("repeated create of a snapshot: %v, %v", again, err)
	}
	if err := os.WriteFile(filepath.Join(vol, "a.txt"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: "pvc-1"})
	if err != nil || len(list.Entries) != 1 {
		t.Fatalf("list %v, %v", list, err)
	}
	_, err = ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2", VolumeContentSource: &csi.VolumeContentSource{
		Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "pods", "p1", "mount")
	if _, err := nd.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-2", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "a.txt")); err != nil || string(b) != "one" {
		t.Errorf("the volume from the snapshot holds %q, %v; want the snapshot's one", b, err)
	}
	if _, err := nd.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-2", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if mounted(target) {
		t.Error("still mounted after unpublish")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target left: %v", err)
	}
	for _, bad := range []string{"..", "../x", "a/b", "", "/etc"} {
		_, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: bad})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("volume name %q: %v", bad, err)
		}
		_, err = ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: bad})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("snapshot id %q: %v", bad, err)
		}
	}
	if _, err := nd.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: "relative/x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("relative target: %v", err)
	}
	for _, del := range []func() error{
		func() error {
			_, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snapshot-1"})
			return err
		},
		func() error { _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); return err },
		func() error { _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-2"}); return err },
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"volumes", "snapshots"} {
		if ents, _ := os.ReadDir(filepath.Join(dir, "data", sub)); len(ents) > 0 {
			t.Errorf("%s left: %v", sub, ents)
		}
	}

	// The kubelet's side of the registration.
	rc, err := grpc.NewClient("unix://"+filepath.Join(dir, "registry", "csi.berth.test-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	reg := registerapi.NewRegistrationClient(rc)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil || info.Type != registerapi.CSIPlugin || info.Endpoint != filepath.Join(dir, "csi.sock") {
		t.Fatalf("registration info %v, %v", info, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitRegistered(time.Second); err != nil {
		t.Error(err)
	}
}
