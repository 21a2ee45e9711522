// Package csidriver is berth's small CSI driver for its Kubernetes test
// cluster (kubeenv Options.CSI): a real CSI gRPC server over a unix socket
// whose volumes are directories under one root on this machine and whose
// snapshots are copies of them (cp --reflink=auto). It implements what
// the external-provisioner, the external-snapshotter's csi-snapshotter and
// the kubelet call: Identity; Controller CreateVolume (empty, or from a
// snapshot), DeleteVolume, CreateSnapshot, DeleteSnapshot, ListSnapshots;
// Node NodePublishVolume (a bind mount), NodeUnpublishVolume, NodeGetInfo,
// NodeGetCapabilities. It registers itself with the kubelet through the
// kubelet plugin registration API (a socket in the kubelet's
// plugins_registry), the part node-driver-registrar would do.
//
// It is a test fixture, not a product: capacity is recorded, not
// enforced. Volume and snapshot ids name directories, so each is checked
// to be one plain path element before it touches the disk.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Config says where the driver lives.
type Config struct {
	// Name is the driver's name (a StorageClass's provisioner).
	Name string
	// NodeID is what NodeGetInfo answers (the kubelet's node name).
	NodeID string
	// Root holds volumes/<id> and snapshots/<id>.
	Root string
	// Socket is the CSI endpoint the sidecars and the kubelet dial.
	Socket string
	// RegistrationDir is the kubelet's plugins_registry; "" registers
	// nothing (a controller-only driver).
	RegistrationDir string
}

// Driver is a running driver.
type Driver struct {
	cfg     Config
	srv     *grpc.Server
	reg     *grpc.Server
	regSock string
	done    chan struct{}

	mu sync.Mutex // one operation on the disk at a time
	// Registered is closed when the kubelet reports the registration.
	Registered chan struct{}
	regOnce    sync.Once
	regErr     string

	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
}

// Start serves the driver on cfg.Socket and registers it with the kubelet.
func Start(cfg Config) (*Driver, error) {
	if cfg.Name == "" || cfg.Root == "" || cfg.Socket == "" {
		return nil, errors.New("csidriver: name, root and socket are required")
	}
	for _, d := range []string{filepath.Join(cfg.Root, "volumes"), filepath.Join(cfg.Root, "snapshots"), filepath.Dir(cfg.Socket)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	d := &Driver{cfg: cfg, done: make(chan struct{}), Registered: make(chan struct{})}
	os.Remove(cfg.Socket)
	l, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return nil, err
	}
	d.srv = grpc.NewServer()
	csi.RegisterIdentityServer(d.srv, d)
	csi.RegisterControllerServer(d.srv, d)
	csi.RegisterNodeServer(d.srv, d)
	go func() { _ = d.srv.Serve(l); close(d.done) }()
	if cfg.RegistrationDir != "" {
		if err := os.MkdirAll(cfg.RegistrationDir, 0o700); err != nil {
			d.Stop()
			return nil, err
		}
		d.regSock = filepath.Join(cfg.RegistrationDir, cfg.Name+"-reg.sock")
		os.Remove(d.regSock)
		rl, err := net.Listen("unix", d.regSock)
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(d.reg, &registration{d: d})
		go func() { _ = d.reg.Serve(rl) }()
	}
	return d, nil
}

// Stop ends both servers and removes their sockets. Volumes' bind mounts
// are the kubelet's to undo (NodeUnpublish); the caller unmounts what is
// left under the kubelet's dir.
func (d *Driver) Stop() {
	if d.reg != nil {
		d.reg.Stop()
		os.Remove(d.regSock)
	}
	d.srv.Stop()
	<-d.done
	os.Remove(d.cfg.Socket)
}

// RegistrationError is the kubelet's refusal of the registration, if any.
func (d *Driver) RegistrationError() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regErr
}

// registration answers the kubelet's plugin watcher.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	d *Driver
}

func (r *registration) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.cfg.Name, Endpoint: r.d.cfg.Socket,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(ctx context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.d.mu.Lock()
		r.d.regErr = s.Error
		r.d.mu.Unlock()
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	r.d.regOnce.Do(func() { close(r.d.Registered) })
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Identity.

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: "0.1.0"}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Controller.

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// idRE: ids are one plain path element (the sidecars make pvc-<uid> and
// snapshot-<uid>).
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkID(what, id string) error {
	if !idRE.MatchString(id) || strings.Contains(id, "..") {
		return status.Errorf(codes.InvalidArgument, "bad %s %q", what, id)
	}
	return nil
}

func (d *Driver) volumeDir(id string) string   { return filepath.Join(d.cfg.Root, "volumes", id) }
func (d *Driver) snapshotDir(id string) string { return filepath.Join(d.cfg.Root, "snapshots", id) }

// copyTree copies directory src to dst (which must not exist) through a
// temp dir renamed in, so a cut copy never counts.
func copyTree(src, dst string) error {
	tmp := dst + ".tmp"
	os.RemoveAll(tmp)
	out, err := exec.Command("cp", "-a", "--reflink=auto", src, tmp).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("cp %s: %v: %s", src, err, out)
	}
	return os.Rename(tmp, dst)
}

func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := checkID("volume name", req.GetName()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := req.GetName()
	dir := d.volumeDir(id)
	src := req.GetVolumeContentSource()
	if _, err := os.Stat(dir); err != nil {
		switch {
		case src.GetSnapshot() != nil:
			sid := src.GetSnapshot().GetSnapshotId()
			if err := checkID("snapshot id", sid); err != nil {
				return nil, err
			}
			if _, err := os.Stat(d.snapshotDir(sid)); err != nil {
				return nil, status.Errorf(codes.NotFound, "no snapshot %s", sid)
			}
			if err := copyTree(d.snapshotDir(sid), dir); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		case src != nil:
			return nil, status.Error(codes.InvalidArgument, "only snapshots are volume content sources here")
		default:
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		ContentSource: src}}, nil
}

func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := checkID("volume id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(d.volumeDir(req.GetVolumeId())); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

// snapshotOf describes snapshot id, whose source is recorded in a file
// beside its copy.
func (d *Driver) snapshotOf(id string) (*csi.Snapshot, error) {
	st, err := os.Stat(d.snapshotDir(id))
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(d.snapshotDir(id) + ".source")
	if err != nil {
		return nil, err
	}
	return &csi.Snapshot{SnapshotId: id, SourceVolumeId: string(src), CreationTime: timestamppb.New(st.ModTime()),
		ReadyToUse: true, SizeBytes: duBytes(d.snapshotDir(id))}, nil
}

func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := checkID("snapshot name", req.GetName()); err != nil {
		return nil, err
	}
	if err := checkID("source volume id", req.GetSourceVolumeId()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, src := req.GetName(), req.GetSourceVolumeId()
	if s, err := d.snapshotOf(id); err == nil {
		if s.SourceVolumeId != src {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s is of volume %s", id, s.SourceVolumeId)
		}
		return &csi.CreateSnapshotResponse{Snapshot: s}, nil
	}
	if _, err := os.Stat(d.volumeDir(src)); err != nil {
		return nil, status.Errorf(codes.NotFound, "no volume %s", src)
	}
	if err := os.WriteFile(d.snapshotDir(id)+".source", []byte(src), 0o600); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := copyTree(d.volumeDir(src), d.snapshotDir(id)); err != nil {
		os.Remove(d.snapshotDir(id) + ".source")
		return nil, status.Error(codes.Internal, err.Error())
	}
	s, err := d.snapshotOf(id)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateSnapshotResponse{Snapshot: s}, nil
}

func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if err := checkID("snapshot id", req.GetSnapshotId()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(d.snapshotDir(req.GetSnapshotId())); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	os.Remove(d.snapshotDir(req.GetSnapshotId()) + ".source")
	return &csi.DeleteSnapshotResponse{}, nil
}

func (d *Driver) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	if id := req.GetSnapshotId(); id != "" {
		if checkID("snapshot id", id) != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		ids = []string{id}
	} else {
		ents, err := os.ReadDir(filepath.Join(d.cfg.Root, "snapshots"))
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		for _, e := range ents {
			if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
				ids = append(ids, e.Name())
			}
		}
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, id := range ids {
		s, err := d.snapshotOf(id)
		if err != nil {
			continue
		}
		if src := req.GetSourceVolumeId(); src != "" && s.SourceVolumeId != src {
			continue
		}
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

// Node.

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID}, nil
}

func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := checkID("volume id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return nil, status.Errorf(codes.InvalidArgument, "bad target path %q", target)
	}
	src := d.volumeDir(req.GetVolumeId())
	if _, err := os.Stat(src); err != nil {
		return nil, status.Errorf(codes.NotFound, "no volume %s", req.GetVolumeId())
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount: %v", err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return nil, status.Errorf(codes.Internal, "read-only remount: %v", err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return nil, status.Errorf(codes.InvalidArgument, "bad target path %q", target)
	}
	for mounted(target) {
		if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
			}
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mounted reports whether path is a mount point (in /proc/self/mountinfo).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescape(f[4]) == path {
			return true
		}
	}
	return false
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// duBytes is the bytes allocated under dir.
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// WaitRegistered waits until the kubelet registered the driver.
func (d *Driver) WaitRegistered(timeout time.Duration) error {
	select {
	case <-d.Registered:
		return nil
	case <-time.After(timeout):
		if e := d.RegistrationError(); e != "" {
			return fmt.Errorf("csidriver: the kubelet refused the registration: %s", e)
		}
		return fmt.Errorf("csidriver: the kubelet did not register %s within %v", d.cfg.Name, timeout)
	}
}
