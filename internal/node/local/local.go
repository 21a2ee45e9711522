// Package local is berth's node backend for this machine: sandboxes are
// OCI containers (runc, runsc, or a microVM runtime with runc's CLI) over
// an overlayfs root of the template's layers, a disk-capped writable layer
// on its own loop-mounted image, quota-limited volume images in a
// reflink-capable storage pool, per-sandbox host id ranges seen through
// idmapped mounts, and, for egress, a veth on the daemon's bridge behind
// nftables. It implements node.Backend and every capability interface of
// package node; nothing above it touches the host.
//
// Where things are: overlay and writable layers (disk.go), volume mounts
// (volumes.go), host id ranges and idmapped views (ids.go, over hostids),
// egress attach and detach and resolv.conf (network.go, over egress), the
// agent channel (agentchan.go, over agentchan), the runtimes through
// internal/runtime (lifecycle.go), captures (captures.go, clones.go), the
// diff and quarantine reads (inspect.go, over hostfiles), checkpoints
// (hibernate.go), capacity and the reserve (capacity.go, over space), the
// share tmpfs holding the agent binary (share.go), the thaw pass at open
// (volume.ThawAll) and Sweep (sweep.go). The host layout is in
// docs/storage.md.
package local

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local/agentchan"
	"github.com/berth-sh/berth/internal/node/local/egress"
	"github.com/berth-sh/berth/internal/node/local/hostids"
	"github.com/berth-sh/berth/internal/node/local/space"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// Config configures the local backend.
type Config struct {
	DataDir string
	// AgentPath is the berth binary copied into the share and bind-mounted
	// into sandboxes as the agent.
	AgentPath string
	// IDMap is the stored id range every file on disk keeps.
	IDMap runtime.IDMap
	// Instance names this daemon's host resources (cgroup parent, bridge).
	Instance string
	// ReadyTimeout bounds the wait for a new sandbox's agent.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
	// PoolSize is the size of the storage pool image, when one is made.
	PoolSize int64
	// EgressSubnet: see package network; kept in <data-dir>/network.json.
	EgressSubnet netip.Prefix
	// EgressUpstream are the resolvers berth's resolver forwards to
	// (empty: the host's resolv.conf).
	EgressUpstream []netip.AddrPort
	// EgressRoots verify the servers the egress proxy dials (nil: the
	// system roots).
	EgressRoots *x509.CertPool
	// DiskDefault is the cap of a writable layer whose record names none
	// (made before caps were recorded); 0: none.
	DiskDefault int64
	// DiskLowWater is the host free space creates leave (capacity.go).
	DiskLowWater int64
	// Runtimes are the runtime classes, the default first.
	Runtimes []runtime.Runtime
	Images   *image.Store
	// Step, when set, is told how long each step of a Provision took
	// (steps.go names them): the metrics' berth_provision_step_seconds,
	// which `berth bench` reads to say where a cold create's time goes.
	Step func(step string, d time.Duration)
}

// DefaultIDMap maps sandbox root to host uid/gid 100000000 (and 65536 ids
// from there): far above any regular or subordinate id range.
var DefaultIDMap = runtime.IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536}

// InstanceName derives a short, stable name for the host resources of the
// daemon whose data dir is dataDir.
func InstanceName(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "berth-" + hex.EncodeToString(sum[:4])
}

// Backend runs sandboxes on this machine.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	images  *image.Store
	volumes *volume.Manager
	scratch *volume.Manager // sandboxes' writable root layers (disk.go)
	pool    *volume.Pool
	// runtimes by name; def serves records that name none. A class may
	// join after start (AddRuntime: runsc once its probe succeeds), so
	// both are read under rtMu.
	rtMu     sync.RWMutex
	runtimes map[string]runtime.Runtime
	classes  []node.Class
	def      string

	mu       sync.Mutex
	agents   map[string]*agent.Client      // by sandbox id
	channels map[string]*agentchan.Channel // by sandbox id (agentchan.go)
	initLogs map[string]*agentchan.InitLog // by sandbox id (agentchan.go)
	// clonesInFlight are the snapshots-dir entries in use (clones.go).
	clonesInFlight map[string]int
	// readOnly are the sandbox filesystems seen read-only (capacity.go).
	readOnly map[string]bool

	hooks node.Hooks
	space *space.Space

	egress *egress.Net // the egress network, made on first use (network.go)

	agentRefused atomic.Uint64
	ids          *hostids.Manager // host id ranges (ids.go)

	wg     sync.WaitGroup
	stopCh chan struct{}
}

// The local backend has every capability (each class's Caps say which
// of them it serves).
var (
	_ node.Backend     = (*Backend)(nil)
	_ node.Freezer     = (*Backend)(nil)
	_ node.Hibernator  = (*Backend)(nil)
	_ node.Capturer    = (*Backend)(nil)
	_ node.Egress      = (*Backend)(nil)
	_ node.EgressProxy = (*Backend)(nil)
	_ node.RootLayer   = (*Backend)(nil)
	_ node.Renamer     = (*Backend)(nil)
)

// New opens the backend: the share, the storage pool (thawing what an
// interrupted capture left frozen), volumes and writable-layer stores,
// and the host id probe. Call Start for its background work.
func New(cfg Config) (*Backend, error) {
	if len(cfg.Runtimes) == 0 {
		return nil, errors.New("local backend: no runtime class")
	}
	if cfg.DataDir == "" || cfg.AgentPath == "" || cfg.Images == nil {
		return nil, errors.New("local backend: DataDir, AgentPath and Images are required")
	}
	if cfg.Instance == "" {
		cfg.Instance = InstanceName(cfg.DataDir)
	}
	if cfg.IDMap.Size == 0 {
		cfg.IDMap = DefaultIDMap
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "sandboxes"), 0o711); err != nil {
		return nil, err
	}
	// The runtime enters the user namespace before it mounts the root, so
	// mapped root must be able to traverse to it.
	if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
		return nil, err
	}
	uid, gid := cfg.IDMap.HostRoot()
	agentCopy, err := openShare(cfg.DataDir, cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	cfg.AgentPath = agentCopy
	pool, err := volume.OpenPool(cfg.DataDir, cfg.PoolSize)
	if err != nil {
		return nil, fmt.Errorf("storage pool: %w", err)
	}
	cfg.Logger.Info("storage pool", "kind", pool.Kind())
	volume.ThawAll(pool.Root(), cfg.Logger)
	vols, err := volume.New(filepath.Join(pool.Root(), "volumes"), uid, gid)
	if err != nil {
		return nil, err
	}
	scratch, err := volume.NewScratch(filepath.Join(pool.Root(), "scratch"), uid, gid, pool.Reflink())
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg: cfg, log: cfg.Logger, images: cfg.Images, volumes: vols, scratch: scratch, pool: pool,
		runtimes:       map[string]runtime.Runtime{},
		def:            cfg.Runtimes[0].Name(),
		ids:            hostids.Probe(cfg.IDMap, []string{cfg.DataDir, pool.Root()}, cfg.Logger),
		agents:         map[string]*agent.Client{},
		channels:       map[string]*agentchan.Channel{},
		initLogs:       map[string]*agentchan.InitLog{},
		clonesInFlight: map[string]int{},
		readOnly:       map[string]bool{},
		stopCh:         make(chan struct{}),
		hooks: node.Hooks{
			Event: func(*sandbox.Event) {},
			Flow:  func(node.Flow) {},
		},
	}
	b.egress = egress.New(egress.Config{Instance: cfg.Instance, Subnet: cfg.EgressSubnet, DataDir: cfg.DataDir,
		Logger: cfg.Logger, OnFlow: b.onFlow, Upstream: cfg.EgressUpstream, Roots: cfg.EgressRoots})
	b.space = &space.Space{DataDir: cfg.DataDir, PoolRoot: pool.Root(), LowWater: cfg.DiskLowWater, Log: cfg.Logger}
	for _, rt := range cfg.Runtimes {
		b.runtimes[rt.Name()] = rt
		b.classes = append(b.classes, node.Class{Name: rt.Name(), Caps: capsOf(rt)})
	}
	b.recoverCheckpoints(b.runtimes, true)
	return b, nil
}

// AddRuntime makes class rt available after the backend opened: a class
// whose probe failed at start for a passing reason (the data dir full for
// a moment) and succeeded later. Its sandboxes, left alone meanwhile
// (Runtime answers unavailable for them), are then served by it; the
// hibernations of its sandboxes a killed daemon left half done are
// settled first.
func (b *Backend) AddRuntime(rt runtime.Runtime) {
	b.recoverCheckpoints(map[string]runtime.Runtime{rt.Name(): rt}, false)
	b.rtMu.Lock()
	defer b.rtMu.Unlock()
	if _, ok := b.runtimes[rt.Name()]; ok {
		return
	}
	b.runtimes[rt.Name()] = rt
	b.classes = append(b.classes, node.Class{Name: rt.Name(), Caps: capsOf(rt)})
}

// capsOf says what runtime class rt can do on this backend. The runtimes
// mark what they cannot do (NoInheritedListeners) and how ports are
// reached (NetworkViaAgent); this is the one place those are read.
func capsOf(rt runtime.Runtime) node.Caps {
	_, noFDs := rt.(interface{ NoInheritedListeners() })
	_, viaAgent := rt.(interface{ NetworkViaAgent() })
	_, cp := rt.(checkpointer)
	_, sig := rt.(initSignaller)
	_, renamer := rt.(hostnameSetter)
	rename := !noFDs || renamer // nsenter into its UTS namespace, or the runtime's own way in
	return node.Caps{
		InheritFDs:    !noFDs,
		Egress:        true, // wired after start (runc) or before (netnsBeforeStart: gVisor)
		Checkpoint:    cp && sig,
		Pool:          rename, // a claim thaws and renames members in place
		Rename:        rename,
		Freeze:        true,
		PortsViaAgent: viaAgent,
		Capture:       true,
		RootLayer:     true,
		Sudo:          true, // a bind mount and the agent's flag: every class
	}
}

// hostnameSetter is a runtime that changes a running sandbox's host name
// itself, where the host's nsenter does not reach (gVisor: runsc.go).
type hostnameSetter interface {
	SetHostname(ctx context.Context, id, helper, name string) error
}

// netnsBeforeStart reports whether rt's sandboxes with a network are given
// a namespace wired before start (Spec.NetnsPath) rather than wired after.
func netnsBeforeStart(rt runtime.Runtime) bool {
	_, ok := rt.(interface{ NetnsBeforeStart() })
	return ok
}

// Start runs the backend's background work until Close; h is how it
// reports to the engine.
func (b *Backend) Start(h node.Hooks) {
	if h.Event != nil {
		b.hooks.Event = h.Event
	}
	if h.Flow != nil {
		b.hooks.Flow = h.Flow
	}
	b.hooks.Slots = h.Slots
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.ids.Run(b.stopCh, b.hooks.Slots)
	}()
}

// Classes lists the runtime classes, the default first.
func (b *Backend) Classes() []node.Class {
	b.rtMu.RLock()
	defer b.rtMu.RUnlock()
	return slices.Clone(b.classes)
}

// Runtime returns runtime class name (the default for ""). A class this
// backend does not have (now) is an absent runtime whose every call is
// refused as unavailable: serving a sandbox of one class with another's
// runtime would judge a running gVisor sandbox gone (runc knows no such
// container), destroy it, or start it again under runc.
func (b *Backend) Runtime(name string) runtime.Runtime {
	b.rtMu.RLock()
	defer b.rtMu.RUnlock()
	if name == "" {
		return b.runtimes[b.def]
	}
	if rt, ok := b.runtimes[name]; ok {
		return rt
	}
	return absentRuntime(name)
}

// runtimeNamed returns class name, nil if this backend lacks it.
func (b *Backend) runtimeNamed(name string) runtime.Runtime {
	b.rtMu.RLock()
	defer b.rtMu.RUnlock()
	return b.runtimes[name]
}

func (b *Backend) rtFor(sb *sandbox.Sandbox) runtime.Runtime { return b.Runtime(sb.Spec.Runtime) }

func (b *Backend) caps(sb *sandbox.Sandbox) node.Caps { return capsOf(b.rtFor(sb)) }

// CgroupParent is the cgroup under which all of this daemon's sandboxes live.
func (b *Backend) CgroupParent() string { return "/" + b.cfg.Instance }

// AgentRefusals counts dials to an agent the backend refused because of
// who listened (an impostor, a replaced or redirected socket).
func (b *Backend) AgentRefusals() uint64 { return b.agentRefused.Load() }

// PoolKind names the storage pool's kind (metrics, inspect).
func (b *Backend) PoolKind() string { return b.pool.Kind() }

// emit hands an event to the engine.
func (b *Backend) emit(ev *sandbox.Event) {
	if ev.Actor == "" {
		ev.Actor = "daemon"
	}
	b.hooks.Event(ev)
}

// Paths of one sandbox's host resources.
type paths struct {
	dir, bundle, rootfs string
	// ctl is root-only and never mounted into the sandbox: the agent's
	// socket where the daemon binds it (socket), and the pin of the one
	// the agent binds itself (pin). run is the tmpfs that gVisor agents
	// bind their socket in, mounted into the sandbox at /.berth/run.
	ctl, socket, pin, run string
	// netns pins, in ctl, the network namespace made before start for
	// an egress sandbox of a class that needs it (NetnsBeforeStart).
	netns string
	// scratch holds the writable layer that does not persist: upper and
	// work on its own filesystem (disk.go) mounted at scratch/mnt, in the
	// storage pool so forks and snapshots can reflink it.
	scratch, upper, work string
	cgroup               string
}

func (b *Backend) paths(id string) paths {
	dir := filepath.Join(b.cfg.DataDir, "sandboxes", id)
	scratch := filepath.Join(b.pool.Root(), "scratch", id)
	return paths{
		dir:     dir,
		bundle:  filepath.Join(dir, "bundle"),
		rootfs:  filepath.Join(dir, "rootfs"),
		scratch: scratch,
		upper:   filepath.Join(scratch, "mnt", "upper"),
		work:    filepath.Join(scratch, "mnt", "work"),
		ctl:     filepath.Join(dir, agentchan.CtlDir),
		socket:  filepath.Join(dir, agentchan.CtlDir, agentchan.SockName),
		pin:     filepath.Join(dir, agentchan.CtlDir, agentchan.PinName),
		run:     filepath.Join(dir, "run"),
		netns:   filepath.Join(dir, agentchan.CtlDir, "netns"),
		cgroup:  "/" + b.cfg.Instance + "/" + id,
	}
}

// Agent returns the client of sb's agent.
func (b *Backend) Agent(sb *sandbox.Sandbox) *agent.Client { return b.agentFor(sb.ID) }

func (b *Backend) agentFor(id string) *agent.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.agents[id]
	if !ok {
		b.mu.Unlock()
		c = b.newAgentClient(id)
		b.mu.Lock()
		if prev, ok := b.agents[id]; ok {
			return prev
		}
		b.agents[id] = c
	}
	return c
}

func (b *Backend) forgetAgent(id string) {
	b.mu.Lock()
	delete(b.agents, id)
	b.mu.Unlock()
}

// Forget drops what the backend keeps in memory about sb.
func (b *Backend) Forget(sb *sandbox.Sandbox) {
	b.forgetAgent(sb.ID)
	defer b.ids.Kick() // its id slot is free: make the next one's namespaces
	b.mu.Lock()
	delete(b.channels, sb.ID)
	delete(b.initLogs, sb.ID)
	for k := range b.readOnly {
		if len(k) > len(sb.ID) && k[:len(sb.ID)+1] == sb.ID+"/" {
			delete(b.readOnly, k)
		}
	}
	b.mu.Unlock()
}

// CPUUsage is the CPU time sb's processes used.
func (b *Backend) CPUUsage(sb *sandbox.Sandbox) (time.Duration, error) {
	return cgroups.CPUUsage(b.paths(sb.ID).cgroup)
}

// MemoryUsage is the memory sb's cgroup holds.
func (b *Backend) MemoryUsage(sb *sandbox.Sandbox) (int64, error) {
	return cgroups.MemoryUsage(b.paths(sb.ID).cgroup)
}

// OOMKills counts the processes of sb the memory limit killed.
func (b *Backend) OOMKills(sb *sandbox.Sandbox) (uint64, error) {
	n, err := cgroups.OOMKills(b.paths(sb.ID).cgroup)
	return uint64(max(n, 0)), err
}

// Exited reports that sb's cgroup holds no process.
func (b *Backend) Exited(sb *sandbox.Sandbox) bool {
	return cgroups.Empty(b.paths(sb.ID).cgroup)
}

// KillAll kills every process in sb's cgroup.
func (b *Backend) KillAll(ctx context.Context, sb *sandbox.Sandbox) error {
	return cgroups.KillAll(b.paths(sb.ID).cgroup)
}

// Freeze freezes sb's processes (the cgroup freezer, via the runtime).
func (b *Backend) Freeze(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.rtFor(sb).Pause(ctx, sb.ID)
}

// Thaw continues sb's frozen processes.
func (b *Backend) Thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.rtFor(sb).Resume(ctx, sb.ID)
}

// Status reports sb's container as its runtime sees it.
func (b *Backend) Status(ctx context.Context, sb *sandbox.Sandbox) (node.Status, error) {
	st, err := b.rtFor(sb).State(ctx, sb.ID)
	if err != nil {
		if isNotFound(err) {
			return node.StatusGone, nil
		}
		return "", err
	}
	switch st.Status {
	case runtime.StatusRunning:
		return node.StatusRunning, nil
	case runtime.StatusPaused:
		return node.StatusPaused, nil
	}
	return node.StatusStopped, nil
}

// Close stops background work, the network's resolver and flow log
// (removing its bridge and tables unless keepNetwork), unmounts the share
// and the pool, and removes the daemon's cgroup parent if no sandbox is
// left in it.
func (b *Backend) Close(keepNetwork bool) {
	select {
	case <-b.stopCh:
	default:
		close(b.stopCh)
	}
	b.wg.Wait()
	b.egress.Close(keepNetwork)
	if err := closeShare(b.cfg.DataDir); err != nil {
		b.log.Warn("unmounting the share", "err", err)
	}
	sbMounts, _ := overlay.MountsUnder(filepath.Join(b.cfg.DataDir, "sandboxes"))
	if err := b.pool.Close(len(sbMounts) > 0); err != nil {
		b.log.Warn("unmounting the storage pool", "err", err)
	}
	if len(cgroups.Children(b.CgroupParent())) == 0 {
		for _, p := range cgroups.Paths(b.CgroupParent()) {
			_ = os.Remove(p) // rmdir: fails harmlessly if a sandbox appeared
		}
	}
}

// randomSuffix returns 16 random characters of [a-z0-9].
func randomSuffix() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var buf [16]byte
	if _, err := readRandom(buf[:]); err != nil {
		panic(err)
	}
	for i := range buf {
		buf[i] = alphabet[int(buf[i])%len(alphabet)]
	}
	return string(buf[:])
}
