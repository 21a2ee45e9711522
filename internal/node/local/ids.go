package local

// Host ids per sandbox.
//
// Every on-disk file of every sandbox — image layers, writable layers,
// volumes, snapshots — keeps its ids in one canonical stored range
// (Config.IDMap, host 100000000 + 65536 ids; layers are chowned into it
// once, at unpack). Each sandbox runs in its own host range, slot N of
// the id_slots table: host ids stored+(N+1)*65536 onwards. What the
// sandbox sees of the disk is idmapped (stored → its range) per sandbox:
// the layer store, its writable layer's dir and each volume are cloned
// as idmapped mounts under its sandbox dir, and the overlay root is made
// of those. So layers stay shared and unchanged, a fork or snapshot clone
// needs no chown (it is stored-range data like its parent's, seen through
// the child's own mapping), no live sandbox's uid owns any file on disk,
// and a released range reused later inherits nothing.
//
// With runc, the sandbox's user namespace itself is made by the daemon,
// owned by the sandbox's host root uid, and runc joins it by path: the
// kernel charges per-user counts (inotify instances) to the namespace's
// owner in the parent namespace, so a namespace runc made as host root
// would spend host root's quota for every sandbox.
//
// A host where idmapped mounts fail (probed once at start) runs every
// sandbox in the stored range itself, as before: mode "shared".

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/idmap"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

const (
	// idSlotSize ids per sandbox: uids and gids 0..65535 inside.
	idSlotSize = 65536
	// idSlotLimit bounds the slots: stored+65536 up to stored+2^30+65536.
	idSlotLimit = node.MaxIDSlots
	// idReadySlots is how many of the lowest free slots get their user
	// namespaces made ahead, in the background, so that a create does not
	// wait for them.
	idReadySlots = 2
)

// idState is the manager's host-id machinery.
type idState struct {
	perSandbox bool // idmapped mounts work: each sandbox has its own range
	ownedNS    bool // user namespaces owned by a sandbox's host uid can be made
	mu         sync.Mutex
	mountNS    map[uint32]*os.File // by range base: stored → base, for idmapped mounts (stateless, reused)
	ready      map[uint32]*os.File // by range base: fresh sandbox namespaces owned by base, used once
	kick       chan struct{}
}

// probeIDs finds out, once, which host-id mode this host supports.
func probeIDs(cfg Config, poolRoot string) *idState {
	st := &idState{mountNS: map[uint32]*os.File{}, ready: map[uint32]*os.File{}, kick: make(chan struct{}, 1)}
	stored := cfg.IDMap
	first := stored.HostUID + idSlotSize
	var err error
	if failpoint.Enabled("ids.no-idmap") { // a host without idmapped mounts, for tests
		err = errors.New("idmapped mounts disabled (failpoint ids.no-idmap)")
	} else if stored.HostUID != stored.HostGID || stored.Size != idSlotSize {
		err = fmt.Errorf("the stored id map %+v is not one %d-id block with uid = gid", stored, idSlotSize)
	}
	for _, dir := range []string{cfg.DataDir, poolRoot} {
		if err == nil {
			err = idmap.Probe(dir, idmap.Mapping{Inside: stored.HostUID, Outside: first, Size: idSlotSize}, 0)
		}
	}
	owner := stored.HostUID
	if err == nil {
		st.perSandbox = true
		owner = first
		cfg.Logger.Info("host ids: each sandbox has its own uid/gid range (idmapped layers)",
			"first", first, "size", idSlotSize, "slots", idSlotLimit)
	} else {
		cfg.Logger.Warn("host ids: idmapped mounts unavailable; every sandbox shares one uid/gid range and per-user kernel limits",
			"host_uid", stored.HostUID, "size", stored.Size, "err", err)
	}
	// A namespace owned by a sandbox's uid is made by that uid, unprivileged:
	// hosts that forbid unprivileged user namespaces refuse it.
	ns, nerr := idmap.NewUserns([]idmap.Mapping{{Inside: 0, Outside: owner, Size: stored.Size}}, owner)
	if nerr == nil {
		if got, oerr := idmap.Owner(ns); oerr != nil || got != owner {
			nerr = fmt.Errorf("namespace owned by %d, not %d (%v)", got, owner, oerr)
		}
		ns.Close()
	}
	if nerr != nil {
		cfg.Logger.Warn("host ids: cannot make user namespaces owned by a sandbox's uid; runc makes them as host root, which is charged their inotify instances",
			"err", nerr)
	}
	st.ownedNS = nerr == nil
	return st
}

func (b *Backend) slotBase(slot int) uint32 {
	return b.cfg.IDMap.HostUID + uint32(slot+1)*idSlotSize
}

// IDRange returns host id slot's range, or, when sandboxes cannot have
// their own (no idmapped mounts), the shared stored range and false.
func (b *Backend) IDRange(slot int) (sandbox.HostIDs, bool) {
	if !b.ids.perSandbox {
		return sandbox.HostIDs{Slot: -1, Base: b.cfg.IDMap.HostUID, Size: b.cfg.IDMap.Size, Mode: sandbox.IDModeShared}, false
	}
	defer b.kickIDs()
	return sandbox.HostIDs{Slot: slot, Base: b.slotBase(slot), Size: idSlotSize, Mode: sandbox.IDModePerSandbox}, true
}

// idMapOf is the user-namespace mapping sb runs with.
func (b *Backend) idMapOf(sb *sandbox.Sandbox) runtime.IDMap {
	if ids := sb.Spec.IDs; ids != nil && ids.Mode == sandbox.IDModePerSandbox {
		return runtime.IDMap{HostUID: ids.Base, HostGID: ids.Base, Size: ids.Size}
	}
	return b.cfg.IDMap
}

// perSandboxIDs reports whether sb's files must be idmapped.
func perSandboxIDs(sb *sandbox.Sandbox) bool {
	return sb.Spec.IDs != nil && sb.Spec.IDs.Mode == sandbox.IDModePerSandbox
}

// Paths, under a sandbox's dir, of its idmapped views and user namespace.
const (
	idmapLayersDir = "layers" // the layer store
	idmapRootDir   = "rw"     // the dir holding its upper and work dirs
	idmapVolPrefix = "vol-"   // vol-N: volume N's filesystem
	usernsFile     = "userns" // bind mount of its user namespace (runc)
)

// idmapRoot returns the overlay dirs of sb as seen through its idmapped
// mounts (made here if missing), or the dirs themselves in shared mode.
func (b *Backend) idmapRoot(sb *sandbox.Sandbox, lowers []string, upper, work string) ([]string, string, string, error) {
	if !perSandboxIDs(sb) || len(lowers) == 0 {
		return lowers, upper, work, nil
	}
	p := b.paths(sb.ID)
	layerRoot := filepath.Dir(filepath.Dir(lowers[0])) // <root>/<layer>/fs
	view := filepath.Join(p.dir, idmapLayersDir)
	if err := b.idmapDir(sb, layerRoot, view); err != nil {
		return nil, "", "", err
	}
	out := make([]string, len(lowers))
	for i, l := range lowers {
		rel, err := filepath.Rel(layerRoot, l)
		if err != nil || filepath.Dir(filepath.Dir(l)) != layerRoot {
			return nil, "", "", fmt.Errorf("layer %s is not in the layer store %s", l, layerRoot)
		}
		out[i] = filepath.Join(view, rel)
	}
	rwSrc := filepath.Dir(upper)
	if filepath.Dir(work) != rwSrc {
		return nil, "", "", fmt.Errorf("upper %s and work %s are not siblings", upper, work)
	}
	rw := filepath.Join(p.dir, idmapRootDir)
	if err := b.idmapDir(sb, rwSrc, rw); err != nil {
		return nil, "", "", err
	}
	return out, filepath.Join(rw, filepath.Base(upper)), filepath.Join(rw, filepath.Base(work)), nil
}

// volumeSource is where volume i of sb is bind-mounted from: its data dir,
// through an idmapped view of the volume in per-sandbox mode.
func (b *Backend) volumeSource(sb *sandbox.Sandbox, i int) (string, error) {
	vid := sb.Spec.Volumes[i].VolumeID
	if !perSandboxIDs(sb) {
		return filepath.Join(b.volumes.Path(vid), volumeDataDir), nil
	}
	view := filepath.Join(b.paths(sb.ID).dir, fmt.Sprintf("%s%d", idmapVolPrefix, i))
	if err := b.idmapDir(sb, b.volumes.Path(vid), view); err != nil {
		return "", err
	}
	return filepath.Join(view, volumeDataDir), nil
}

// idmapDir mounts src at dst shifted from the stored range to sb's,
// unless dst is mounted already (a restarted create).
func (b *Backend) idmapDir(sb *sandbox.Sandbox, src, dst string) error {
	if ok, err := overlay.Mounted(dst); err != nil || ok {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	ns, err := b.mountNS(sb.Spec.IDs.Base)
	if err != nil {
		return err
	}
	return idmap.MountIdmapped(src, dst, ns)
}

// mountNS returns the idmapping namespace for range base (kept: it holds
// no process and no state, and any sandbox of that range may use it).
func (b *Backend) mountNS(base uint32) (*os.File, error) {
	b.ids.mu.Lock()
	defer b.ids.mu.Unlock()
	if ns := b.ids.mountNS[base]; ns != nil {
		return ns, nil
	}
	ns, err := b.newMountNS(base)
	if err != nil {
		return nil, err
	}
	b.ids.mountNS[base] = ns
	return ns, nil
}

func (b *Backend) newMountNS(base uint32) (*os.File, error) {
	return idmap.NewUserns(idmap.MountMaps(idmap.Mapping{Inside: b.cfg.IDMap.HostUID, Outside: base, Size: idSlotSize}), 0)
}

func (b *Backend) newSandboxNS(base, size uint32) (*os.File, error) {
	return idmap.NewUserns([]idmap.Mapping{{Inside: 0, Outside: base, Size: size}}, base)
}

// sandboxUserns returns the path of sb's own user namespace for the
// runtime to join ("" when the runtime makes it: runsc, or hosts that
// cannot make one owned by the sandbox's uid). The namespace is held by a
// bind mount in the sandbox dir, unmounted with its other mounts.
func (b *Backend) sandboxUserns(sb *sandbox.Sandbox, rt runtime.Runtime) (string, error) {
	if rt.Name() != "runc" || !b.ids.ownedNS || sb.Spec.IDs == nil {
		return "", nil
	}
	path := filepath.Join(b.paths(sb.ID).dir, usernsFile)
	if ok, err := overlay.Mounted(path); err != nil || ok {
		return path, err
	}
	ids := b.idMapOf(sb)
	b.ids.mu.Lock()
	ns := b.ids.ready[ids.HostUID]
	delete(b.ids.ready, ids.HostUID)
	b.ids.mu.Unlock()
	b.log.Debug("sandbox user namespace", "sandbox", sb.ID, "owner", ids.HostUID, "made_ahead", ns != nil)
	if ns == nil {
		var err error
		if ns, err = b.newSandboxNS(ids.HostUID, ids.Size); err != nil {
			return "", err
		}
	}
	defer ns.Close()
	b.kickIDs()
	return path, idmap.BindNS(ns, path)
}

// Isolation describes sb's boundary: its runtime class's, plus its ids.
func (b *Backend) Isolation(sb *sandbox.Sandbox) node.Isolation {
	rt := b.rtFor(sb)
	iso := nodeIsolation(rt.Isolation())
	ids := b.idMapOf(sb)
	iso.IDMode = sandbox.IDModeShared
	if perSandboxIDs(sb) {
		iso.IDMode = sandbox.IDModePerSandbox
	}
	if sb.Spec.IDs == nil && sb.State == sandbox.StateDeleted {
		iso.IDMode = ""
		return iso
	}
	iso.HostUID, iso.HostGID, iso.HostIDs = ids.HostUID, ids.HostGID, ids.Size
	switch {
	case rt.Name() == "runsc":
		iso.UsernsOwner = "sentry" // gVisor serves the per-user limits itself
	case rt.Name() == "runc" && b.ids.ownedNS && sb.Spec.IDs != nil:
		iso.UsernsOwner = "sandbox"
	default:
		iso.UsernsOwner = "host-root"
	}
	return iso
}

func (b *Backend) kickIDs() {
	select {
	case b.ids.kick <- struct{}{}:
	default:
	}
}

// idLoop keeps user namespaces ready for the lowest free slots, so that
// the next creates find theirs made.
func (b *Backend) idLoop() {
	defer b.wg.Done()
	if !b.ids.perSandbox || b.hooks.Slots == nil {
		return
	}
	for {
		b.refillIDs(context.Background())
		select {
		case <-b.stopCh:
			b.ids.mu.Lock()
			for base, ns := range b.ids.ready {
				ns.Close()
				delete(b.ids.ready, base)
			}
			b.ids.mu.Unlock()
			return
		case <-b.ids.kick:
		}
	}
}

func (b *Backend) refillIDs(ctx context.Context) {
	held, err := b.hooks.Slots(ctx)
	if err != nil {
		b.log.Warn("host ids: listing slots", "err", err)
		return
	}
	inUse := map[int]bool{}
	for _, s := range held {
		inUse[s] = true
	}
	want := map[uint32]bool{}
	for slot := 0; len(want) < idReadySlots && slot < idSlotLimit; slot++ {
		if !inUse[slot] {
			want[b.slotBase(slot)] = true
		}
	}
	live := map[uint32]bool{}
	for _, s := range held {
		live[b.slotBase(s)] = true
	}
	b.ids.mu.Lock()
	// A slot just taken keeps its namespaces for the create that took it
	// (which takes the sandbox's own); those of released slots go.
	for base, ns := range b.ids.ready {
		if !want[base] && !live[base] {
			ns.Close()
			delete(b.ids.ready, base)
		}
	}
	for base, ns := range b.ids.mountNS {
		if !want[base] && !live[base] {
			ns.Close()
			delete(b.ids.mountNS, base)
		}
	}
	var missing []uint32
	for base := range want {
		if b.ids.ready[base] == nil || b.ids.mountNS[base] == nil {
			missing = append(missing, base)
		}
	}
	b.ids.mu.Unlock()
	for _, base := range missing {
		var errs []error
		mns, err := b.newMountNS(base)
		errs = append(errs, err)
		var sns *os.File
		if b.ids.ownedNS {
			sns, err = b.newSandboxNS(base, idSlotSize)
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			b.log.Warn("host ids: making namespaces ahead", "base", base, "err", err)
		}
		b.ids.mu.Lock()
		if mns != nil {
			if b.ids.mountNS[base] == nil {
				b.ids.mountNS[base] = mns
			} else {
				mns.Close()
			}
		}
		if sns != nil {
			if b.ids.ready[base] == nil {
				b.ids.ready[base] = sns
			} else {
				sns.Close()
			}
		}
		b.ids.mu.Unlock()
	}
}

// nodeIsolation is the node's form of what a runtime class reports.
func nodeIsolation(iso runtime.Isolation) node.Isolation {
	return node.Isolation{Runtime: iso.Runtime, SharedKernel: iso.SharedKernel, UserNamespace: iso.UserNamespace,
		Seccomp: iso.Seccomp, Capabilities: iso.Capabilities, NoNewPrivs: iso.NoNewPrivs, ReadonlyImage: iso.ReadonlyImage}
}
