// Package hostids manages the host id ranges of the local backend's
// sandboxes: the probe of which mode this host supports, the slot → range
// arithmetic, the idmapped views a sandbox's overlay root and volumes are
// made of, and the user namespaces made ahead for the next creates.
//
// It is separate from package local because it is a self-contained piece
// of kernel machinery with its own lock and background loop: it knows
// nothing of sandboxes but a range base and the directories to map, so it
// can be read, and reasoned about for leaks of namespaces, on its own.
//
// Every on-disk file of every sandbox — image layers, writable layers,
// volumes, snapshots — keeps its ids in one canonical stored range
// (local.Config.IDMap, host 100000000 + 65536 ids; layers are chowned
// into it once, at unpack). Each sandbox runs in its own host range, slot
// N of the id_slots table: host ids stored+(N+1)*65536 onwards. What the
// sandbox sees of the disk is idmapped (stored → its range) per sandbox:
// the layer store, its writable layer's dir and each volume are cloned as
// idmapped mounts under its sandbox dir, and the overlay root is made of
// those. So layers stay shared and unchanged, a fork or snapshot clone
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
// A host where idmapped mounts fail (probed at start) runs every sandbox
// in the stored range itself, as before: mode "shared". A probe that
// failed for want of a resource that may come back (the data dir full,
// memory short) is tried again in the background until it succeeds: a
// daemon started while the disk was momentarily full does not run its
// whole life without per-sandbox ranges.
package hostids

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/idmap"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

const (
	// SlotSize ids per sandbox: uids and gids 0..65535 inside.
	SlotSize = 65536
	// slotLimit bounds the slots: stored+65536 up to stored+2^30+65536.
	slotLimit = node.MaxIDSlots
	// readySlots is how many of the lowest free slots get their user
	// namespaces made ahead, in the background, so that a create does not
	// wait for them.
	readySlots = 2
)

// Paths, under a sandbox's dir, of its idmapped views and user namespace.
const (
	layersDir  = "layers" // the layer store
	rootDir    = "rw"     // the dir holding its upper and work dirs
	volPrefix  = "vol-"   // vol-N: volume N's filesystem
	usernsFile = "userns" // bind mount of its user namespace (runc)
)

// Manager is a node's host-id machinery.
type Manager struct {
	stored     runtime.IDMap
	log        *slog.Logger
	perSandbox atomic.Bool // idmapped mounts work: each sandbox has its own range
	ownedNS    atomic.Bool // user namespaces owned by a sandbox's host uid can be made
	dirs       []string    // what the probe mounts on
	transient  bool        // the probe failed for want of a resource: Run tries again
	mu         sync.Mutex
	mountNS    map[uint32]*os.File // by range base: stored → base, for idmapped mounts (stateless, reused)
	ready      map[uint32]*os.File // by range base: fresh sandbox namespaces owned by base, used once
	kick       chan struct{}
}

// Probe finds out which host-id mode this host supports: stored is the
// range files on disk keep, dirs the filesystems that must take idmapped
// mounts (the data dir, the storage pool).
func Probe(stored runtime.IDMap, dirs []string, log *slog.Logger) *Manager {
	m := &Manager{stored: stored, log: log, dirs: dirs, mountNS: map[uint32]*os.File{}, ready: map[uint32]*os.File{}, kick: make(chan struct{}, 1)}
	err, nerr := m.probe()
	if err == nil {
		log.Info("host ids: each sandbox has its own uid/gid range (idmapped layers)",
			"first", stored.HostUID+SlotSize, "size", SlotSize, "slots", slotLimit)
	} else {
		m.transient = Transient(err)
		log.Warn("host ids: idmapped mounts unavailable; every sandbox shares one uid/gid range and per-user kernel limits",
			"host_uid", stored.HostUID, "size", stored.Size, "err", err, "retried", m.transient)
	}
	if nerr != nil {
		m.transient = m.transient || Transient(nerr)
		log.Warn("host ids: cannot make user namespaces owned by a sandbox's uid; runc makes them as host root, which is charged their inotify instances",
			"err", nerr)
	}
	return m
}

// probe tries idmapped mounts on every dir and a user namespace owned by
// a sandbox's uid, and turns on what works.
func (m *Manager) probe() (err, nerr error) {
	stored := m.stored
	first := stored.HostUID + SlotSize
	if failpoint.Enabled("ids.no-idmap") { // a host without idmapped mounts, for tests
		err = errors.New("idmapped mounts disabled (failpoint ids.no-idmap)")
	} else if stored.HostUID != stored.HostGID || stored.Size != SlotSize {
		err = fmt.Errorf("the stored id map %+v is not one %d-id block with uid = gid", stored, SlotSize)
	}
	for _, dir := range m.dirs {
		if err == nil {
			err = idmap.Probe(dir, idmap.Mapping{Inside: stored.HostUID, Outside: first, Size: SlotSize}, 0)
		}
	}
	owner := stored.HostUID
	if err == nil {
		owner = first
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
	// The namespace's owner follows the mode: set it before the mode.
	m.ownedNS.Store(nerr == nil)
	if err == nil {
		m.perSandbox.Store(true)
	}
	return err, nerr
}

// Transient reports whether err is the want of a resource that may come
// back (space, quota, memory, descriptors), not a host that lacks the
// feature.
func Transient(err error) bool {
	for _, e := range []error{unix.ENOSPC, unix.EDQUOT, unix.ENOMEM, unix.EAGAIN, unix.EMFILE, unix.ENFILE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Retry probes again after a transient failure and reports whether
// sandboxes now get their own ranges.
func (m *Manager) Retry() bool {
	if m.perSandbox.Load() {
		return true
	}
	err, _ := m.probe()
	if err == nil {
		m.log.Info("host ids: idmapped mounts work now; new sandboxes get their own uid/gid range",
			"first", m.stored.HostUID+SlotSize, "size", SlotSize)
		return true
	}
	if !Transient(err) {
		m.log.Warn("host ids: idmapped mounts unavailable; not tried again", "err", err)
		m.transient = false
	}
	return false
}

// OwnedNS reports whether the daemon can make a sandbox's user namespace
// owned by the sandbox's own host root uid.
func (m *Manager) OwnedNS() bool { return m.ownedNS.Load() }

func (m *Manager) slotBase(slot int) uint32 {
	return m.stored.HostUID + uint32(slot+1)*SlotSize
}

// Range returns host id slot's range, or, when sandboxes cannot have
// their own (no idmapped mounts), the shared stored range and false.
func (m *Manager) Range(slot int) (sandbox.HostIDs, bool) {
	if !m.perSandbox.Load() {
		return sandbox.HostIDs{Slot: -1, Base: m.stored.HostUID, Size: m.stored.Size, Mode: sandbox.IDModeShared}, false
	}
	defer m.Kick()
	return sandbox.HostIDs{Slot: slot, Base: m.slotBase(slot), Size: SlotSize, Mode: sandbox.IDModePerSandbox}, true
}

// IdmapRoot returns the overlay dirs of a sandbox (dir: its sandbox dir,
// base: its range) as seen through its idmapped mounts, made here if
// missing.
func (m *Manager) IdmapRoot(dir string, base uint32, lowers []string, upper, work string) ([]string, string, string, error) {
	layerRoot := filepath.Dir(filepath.Dir(lowers[0])) // <root>/<layer>/fs
	view := filepath.Join(dir, layersDir)
	if err := m.idmapDir(base, layerRoot, view); err != nil {
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
	rw := filepath.Join(dir, rootDir)
	if err := m.idmapDir(base, rwSrc, rw); err != nil {
		return nil, "", "", err
	}
	return out, filepath.Join(rw, filepath.Base(upper)), filepath.Join(rw, filepath.Base(work)), nil
}

// IdmapVolume mounts volume i's filesystem src under sandbox dir, shifted
// to range base, and returns the view.
func (m *Manager) IdmapVolume(dir string, base uint32, i int, src string) (string, error) {
	view := filepath.Join(dir, fmt.Sprintf("%s%d", volPrefix, i))
	return view, m.idmapDir(base, src, view)
}

// idmapDir mounts src at dst shifted from the stored range to base's,
// unless dst is mounted already (a restarted create).
func (m *Manager) idmapDir(base uint32, src, dst string) error {
	if ok, err := overlay.Mounted(dst); err != nil || ok {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	ns, err := m.mountNSOf(base)
	if err != nil {
		return err
	}
	return idmap.MountIdmapped(src, dst, ns)
}

// mountNSOf returns the idmapping namespace for range base (kept: it
// holds no process and no state, and any sandbox of that range may use it).
func (m *Manager) mountNSOf(base uint32) (*os.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ns := m.mountNS[base]; ns != nil {
		return ns, nil
	}
	ns, err := m.newMountNS(base)
	if err != nil {
		return nil, err
	}
	m.mountNS[base] = ns
	return ns, nil
}

func (m *Manager) newMountNS(base uint32) (*os.File, error) {
	return idmap.NewUserns(idmap.MountMaps(idmap.Mapping{Inside: m.stored.HostUID, Outside: base, Size: SlotSize}), 0)
}

func newSandboxNS(base, size uint32) (*os.File, error) {
	return idmap.NewUserns([]idmap.Mapping{{Inside: 0, Outside: base, Size: size}}, base)
}

// BindUserns gives the sandbox of dir its own user namespace (mapping 0
// to base, size ids, owned by base) held by a bind mount in dir, and
// returns its path; a namespace made ahead is taken when there is one.
// Already bound (a restarted create) is fine.
func (m *Manager) BindUserns(dir string, base, size uint32) (path string, madeAhead bool, err error) {
	path = filepath.Join(dir, usernsFile)
	if ok, err := overlay.Mounted(path); err != nil || ok {
		return path, false, err
	}
	m.mu.Lock()
	ns := m.ready[base]
	delete(m.ready, base)
	m.mu.Unlock()
	madeAhead = ns != nil
	if ns == nil {
		if ns, err = newSandboxNS(base, size); err != nil {
			return "", false, err
		}
	}
	defer ns.Close()
	m.Kick()
	return path, madeAhead, idmap.BindNS(ns, path)
}

// Kick asks the loop to look at the free slots again.
func (m *Manager) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// retryEvery is how often a probe that failed for want of a resource is
// tried again.
const retryEvery = 30 * time.Second

// retryUntil probes again every interval until idmapped mounts work
// (true) or stop closes or the failure is no longer transient (false).
func (m *Manager) retryUntil(stop <-chan struct{}, interval time.Duration) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	for m.transient {
		select {
		case <-stop:
			return false
		case <-t.C:
		}
		if m.Retry() {
			return true
		}
	}
	return false
}

// Run keeps user namespaces ready for the lowest free slots, so that the
// next creates find theirs made, until stop closes; slots lists the slots
// held. It returns at once in shared mode or without slots.
func (m *Manager) Run(stop <-chan struct{}, slots func(context.Context) (map[string]int, error)) {
	if slots == nil {
		return
	}
	if !m.perSandbox.Load() {
		if !m.transient || !m.retryUntil(stop, retryEvery) {
			return
		}
	}
	for {
		m.refill(context.Background(), slots)
		select {
		case <-stop:
			m.mu.Lock()
			for base, ns := range m.ready {
				ns.Close()
				delete(m.ready, base)
			}
			m.mu.Unlock()
			return
		case <-m.kick:
		}
	}
}

func (m *Manager) refill(ctx context.Context, slots func(context.Context) (map[string]int, error)) {
	held, err := slots(ctx)
	if err != nil {
		m.log.Warn("host ids: listing slots", "err", err)
		return
	}
	inUse := map[int]bool{}
	for _, s := range held {
		inUse[s] = true
	}
	want := map[uint32]bool{}
	for slot := 0; len(want) < readySlots && slot < slotLimit; slot++ {
		if !inUse[slot] {
			want[m.slotBase(slot)] = true
		}
	}
	live := map[uint32]bool{}
	for _, s := range held {
		live[m.slotBase(s)] = true
	}
	m.mu.Lock()
	// A slot just taken keeps its namespaces for the create that took it
	// (which takes the sandbox's own); those of released slots go.
	for base, ns := range m.ready {
		if !want[base] && !live[base] {
			ns.Close()
			delete(m.ready, base)
		}
	}
	for base, ns := range m.mountNS {
		if !want[base] && !live[base] {
			ns.Close()
			delete(m.mountNS, base)
		}
	}
	var missing []uint32
	for base := range want {
		if m.ready[base] == nil || m.mountNS[base] == nil {
			missing = append(missing, base)
		}
	}
	m.mu.Unlock()
	for _, base := range missing {
		var errs []error
		mns, err := m.newMountNS(base)
		errs = append(errs, err)
		var sns *os.File
		if m.ownedNS.Load() {
			sns, err = newSandboxNS(base, SlotSize)
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			m.log.Warn("host ids: making namespaces ahead", "base", base, "err", err)
		}
		m.mu.Lock()
		if mns != nil {
			if m.mountNS[base] == nil {
				m.mountNS[base] = mns
			} else {
				mns.Close()
			}
		}
		if sns != nil {
			if m.ready[base] == nil {
				m.ready[base] = sns
			} else {
				sns.Close()
			}
		}
		m.mu.Unlock()
	}
}
