// Package node is the seam between berth's engine and what runs its
// sandboxes, at the level of one sandbox, as containerd's sandbox
// Controller sits above its shims. The engine owns records, state,
// policies and events; a backend owns every host resource.
//
// The seam is a small core and optional capabilities:
//
//   - Backend is what every backend does: Runner (provision, stop,
//     discard, wipe, remove, status, kill, the agent client, port dials,
//     the init log), Volumes, Storage (capacity, admission, disk use),
//     Accounting (CPU, memory, OOM kills, refused agent connections), and
//     the node's own housekeeping (classes, isolation, host id ranges,
//     recover, sweep, tick, start, close).
//   - A capability is an interface a backend implements or not: Freezer
//     (pause, quarantine, the instant of a capture), Hibernator (checkpoint
//     and restore), Capturer (fork, snapshot, restore), Egress (addresses
//     and rules), EgressProxy (secrets injected at egress), RootLayer
//     (diff, quarantine reads, template builds) and Renamer (a pool
//     claim's hostname). The engine asks with Need, a type assertion that
//     answers a missing capability with the backend's reason (Refuser) as
//     errdefs.ErrNotSupported; a backend that gains one (Kubernetes
//     freezing gVisor pods) implements the interface and nothing above it
//     changes (a backend whose classes differ refuses in the method for
//     the classes whose Caps lack it).
//   - Caps stay data per runtime class: one backend's classes differ
//     (runc cannot checkpoint, runsc can), GET /v1/version lists them, and
//     create refuses what the class lacks before anything is made
//     (persist_root without a root layer, pause-when-idle of an ephemeral
//     sandbox without freeze, egress without egress). A class may claim a
//     capability only where its backend implements the interface
//     (CheckCaps, asserted by the conformance suite).
//
// What is pure is not on the seam: the egress rules' grammar is package
// network/egressrule, used alike by the engine and every backend.
//
// The local implementation (package node/local) runs sandboxes on this
// machine with runc, runsc or a microVM runtime over overlayfs, loop
// images, cgroups and nftables, and has every capability. The Kubernetes
// one (node/kube) makes a sandbox a pod reached at an address (the agent
// client comes from the backend, so the engine never sees a socket
// path), its workspace a PVC (volumes are ids the backend maps to its own
// storage); it captures through CSI snapshots, applies egress rules as
// NetworkPolicy, freezes gVisor pods through its node agent (the Freezer
// of its runsc class only), and lacks the rest. node/memnode is the in-memory double
// of the engine's unit tests; node/nodetest is the conformance suite all
// three pass.
//
// Every method that changes the host is idempotent: the engine may call it
// again after a crash, with the record as its intent. Hooks carry events,
// flows and the node's id slots back to the engine.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Caps is what a runtime class of a backend can do.
type Caps struct {
	// InheritFDs: init can be handed descriptors (the daemon-bound agent
	// socket, the compiled seccomp program).
	InheritFDs bool `json:"inherit_fds"`
	// Egress: network mode egress (default-deny, rules, flow log).
	Egress bool `json:"egress"`
	// Checkpoint: processes and memory can be saved to disk and restored
	// (hibernate / wake).
	Checkpoint bool `json:"checkpoint"`
	// Pool: warm-pool members (made ahead, handed over at a claim). Where
	// Freeze is true members wait frozen and a claim thaws them; where it
	// is false they wait running (costing what they reserve) and a claim
	// takes them as they are.
	Pool bool `json:"pool"`
	// Rename: a running sandbox's host name can be changed in place
	// (SetHostname), so a pool claim can give a named claimant its name.
	// Where false (a pod's hostname is fixed when it is made) only a create
	// without a name is served from a pool, keeping the member's sb-<id>.
	Rename bool `json:"rename"`
	// Freeze: processes can be frozen in place (pause, quarantine, and the
	// instant of a fork or snapshot capture).
	Freeze bool `json:"freeze"`
	// PortsViaAgent: ports are reached through the agent, not by entering
	// the sandbox's network from the host.
	PortsViaAgent bool `json:"ports_via_agent"`
	// Capture: the sandbox's files can be captured and laid down again
	// (fork, snapshot, restore, a sandbox from a snapshot). Without Freeze
	// a capture is crash-consistent at the storage level only: processes
	// keep running while it is taken.
	Capture bool `json:"capture"`
	// RootLayer: the sandbox's writable root layer is the backend's: it
	// can persist (persist_root), be listed (diff), become a template
	// layer (builds), be read while the sandbox is frozen (quarantine
	// reads), and its disk cap is enforced by the filesystem.
	RootLayer bool `json:"root_layer"`
	// Sudo: sandboxes can have berth's sudo (sandbox.Spec.Sudo): the
	// agent's binary mounted as /.berth/bin/sudo and served by the agent.
	Sudo bool `json:"sudo"`
}

// Class is a runtime class a backend offers.
type Class struct {
	Name string
	Caps Caps
}

// Status is what a backend sees of a sandbox's processes.
type Status string

const (
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped" // made but not running, or exited
	StatusGone    Status = "gone"    // nothing of its processes exists
)

// Capture is a crash-consistent copy of a sandbox's files (its owned
// volumes and writable root layer) kept by the backend under Name, for a
// fork's children or a snapshot.
type Capture struct {
	Name string
	// Frozen is how long the sandbox's processes and filesystems were
	// frozen while the copy was made.
	Frozen time.Duration
	// SizeBytes is an upper bound of what the copy pins.
	SizeBytes int64
}

// Checkpoint reports a hibernation: processes and memory saved.
type Checkpoint struct {
	Took      time.Duration
	SizeBytes int64
}

// Flow is one connection decision of an egress sandbox's network.
type Flow struct {
	SandboxID string
	Time      time.Time
	Kind      string
	Proto     string
	Src, Dst  string
	Name      string
	Decision  string
	Rule      string
}

// Deny is Flow.Decision of a refused connection.
const Deny = "deny"

// Change is one path of a sandbox that differs from its template.
type Change struct {
	Path string
	Kind string // added | changed | removed
	Size int64
	Dir  bool
}

// Disk is the cap and use of a sandbox's writable root layer.
type Disk struct {
	CapBytes, CapInodes   int64
	UsedBytes, UsedInodes int64
	// Enforced is false when the cap is recorded but not in force; Note
	// says why.
	Enforced bool
	Note     string
	// ReadOnly: the kernel made the layer's filesystem read-only.
	ReadOnly bool
}

// Isolation describes a sandbox's boundary: its runtime class's and its
// host ids.
type Isolation struct {
	Runtime       string
	SharedKernel  bool
	UserNamespace bool
	Seccomp       string
	Capabilities  []string
	NoNewPrivs    bool
	ReadonlyImage bool
	// IDMode is "per-sandbox" or "shared"; HostUID/HostGID are root's
	// host ids and HostIDs how many follow; UsernsOwner who owns the
	// user namespace ("sandbox", "host-root", "sentry").
	IDMode           string
	HostUID, HostGID uint32
	HostIDs          uint32
	UsernsOwner      string
}

// Report receives what a sweep finds: a host resource no record accounts
// for, or a record whose host side disagrees with it; fix, if not nil,
// repairs it, and the engine calls it at once (under whatever lock the
// sweep holds) when it was asked to fix.
type Report func(kind, id, detail string, fix func() error)

// SweepInput is what the engine knows that a sweep needs: the live
// records of this node, a way to look at one again under its lock, and
// which volumes and captures are recorded.
type SweepInput struct {
	// Live are this node's live sandboxes by id. Busy updates it.
	Live map[string]*sandbox.Sandbox
	// Busy reports whether an operation holds id (leave it alone); when
	// not, it re-reads the record into Live (or removes it).
	Busy func(id string) bool
	// TryLock takes id's operation lock if it is free, for a look that
	// must not race an operation (a capture freezes filesystems).
	TryLock func(id string) (unlock func(), ok bool)
	// VolumeOwner returns the sandbox a recorded live volume is attached
	// to ("" none), and whether the volume is recorded at all.
	VolumeOwner func(volumeID string) (sandboxID string, known bool)
	// Snapshot reports whether a snapshot id is recorded.
	Snapshot func(id string) bool
	// AtStart: the sweep right after the backend opened (it has just
	// thawed every filesystem; do not probe them again).
	AtStart bool
}

// FileSource serves reads of a sandbox whose processes do not run
// (quarantined, frozen): an agent that runs outside the sandbox, confined
// to its files.
type FileSource interface {
	// Client returns the agent to read path from and the path as that
	// agent sees it.
	Client(ctx context.Context, path string) (*agent.Client, string, error)
	Close()
}

// Runner makes, runs and removes one sandbox: what every backend does,
// as containerd's sandbox Controller is what every sandbox runtime does.
type Runner interface {
	// Provision lays down sb's host side (root, writable layer, volumes,
	// network) and starts it with the agent as init, returning once the
	// agent answers. sb.Spec.Layers must be set. Idempotent: a half-made
	// sandbox (a restarted create or start) is finished or made again.
	Provision(ctx context.Context, sb *sandbox.Sandbox) error
	// Stop ends sb's processes and releases its host resources, keeping
	// its files (writable layer, volumes, bundle).
	Stop(ctx context.Context, sb *sandbox.Sandbox) error
	// Discard drops the writable layer that does not persist (all of an
	// ephemeral sandbox's, a persistent one's unless persist_root) of a
	// stopped sandbox.
	Discard(ctx context.Context, sb *sandbox.Sandbox) error
	// Wipe returns a stopped sandbox's writable layer and owned volumes'
	// contents to empty (reset).
	Wipe(ctx context.Context, sb *sandbox.Sandbox) error
	// Remove deletes every host resource of sb except its volumes' data,
	// then checks that nothing is left.
	Remove(ctx context.Context, sb *sandbox.Sandbox) error
	// Status reports sb's processes as the backend sees them.
	Status(ctx context.Context, sb *sandbox.Sandbox) (Status, error)
	// Exited reports, cheaply, that no process of sb runs any more.
	Exited(sb *sandbox.Sandbox) bool
	// KillAll ends every process of sb from outside (an agent that does
	// not answer past a deadline).
	KillAll(ctx context.Context, sb *sandbox.Sandbox) error
	// Agent returns the client of sb's agent. The backend decides how it
	// is reached and verifies every connection.
	Agent(sb *sandbox.Sandbox) *agent.Client
	// WaitReady waits until sb's agent answers.
	WaitReady(ctx context.Context, sb *sandbox.Sandbox) error
	// DialPort connects to a TCP port of a running sandbox; nothing
	// listening is errdefs.ErrUnreachable.
	DialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error)
	// InitLog returns up to n bytes of the end of what sb's init printed.
	InitLog(sb *sandbox.Sandbox, n int, wait time.Duration) string
	// Forget drops what the backend keeps in memory about a deleted sb.
	Forget(sb *sandbox.Sandbox)
}

// Volumes hold volume data, by the volume's id.
type Volumes interface {
	// NormalizeVolume applies the backend's defaults to a volume's size
	// and inode count and checks them against its limits.
	NormalizeVolume(size, inodes int64) (int64, int64, error)
	CreateVolume(id string, size, inodes int64) error
	DeleteVolume(id string) error
	VolumeUsage(id string) (VolumeUsage, error)
	// VolumeIDs lists the volumes the backend holds.
	VolumeIDs() ([]string, error)
}

// VolumeUsage is what a volume holds.
type VolumeUsage struct {
	UsedBytes, UsedInodes int64
	// ReadOnly: the kernel made the filesystem read-only (an I/O error).
	ReadOnly bool
}

// Storage admits and reports the space sandboxes and volumes take.
type Storage interface {
	// Capacity is the most a disk cap or volume may be.
	Capacity() (int64, error)
	// Admit refuses (errdefs.InsufficientStorage) objects that may grow
	// to need bytes when they cannot fit; committed is what existing ones
	// may still grow to, read only for the refusal's message.
	Admit(need int64, what string, committed func() int64) error
	// Committed is what sb's disk cap and owned volumes may still grow by.
	Committed(sb *sandbox.Sandbox) int64
	// ReleaseReserve frees room kept for recording deletes on a full disk.
	ReleaseReserve()
	// DiskUsage reports sb's writable layer's cap and use (nil: none).
	DiskUsage(sb *sandbox.Sandbox) *Disk
}

// Accounting samples what sandboxes use.
type Accounting interface {
	// CPUUsage and OOMKills sample sb's accounting.
	CPUUsage(sb *sandbox.Sandbox) (time.Duration, error)
	OOMKills(sb *sandbox.Sandbox) (uint64, error)
	// MemoryUsage is the memory sb's processes hold now.
	MemoryUsage(sb *sandbox.Sandbox) (int64, error)
	// AgentRefusals counts connections to agents refused for who
	// listened (a replaced, redirected or impostor endpoint).
	AgentRefusals() uint64
}

// Backend is one node's sandbox machinery: the core every backend
// implements. What only some backends can do is a capability interface
// below, asked for with Need (or a type assertion), never a method every
// backend must write only to refuse.
type Backend interface {
	Runner
	Volumes
	Storage
	Accounting

	// Classes lists the runtime classes, the default first.
	Classes() []Class
	// Isolation describes sb's boundary.
	Isolation(sb *sandbox.Sandbox) Isolation
	// IDRange returns host id range slot's ids, or, when ok is false, the
	// one shared range every sandbox uses (no slot is needed).
	IDRange(slot int) (ids sandbox.HostIDs, ok bool)

	// Recover re-registers the host side of live sandboxes after a start
	// (network attachments) and removes what belongs to none of them.
	Recover(ctx context.Context, live []*sandbox.Sandbox) error
	// Sweep reports host resources no live record accounts for, and
	// records whose host side disagrees with them (the host half of
	// doctor).
	Sweep(ctx context.Context, in SweepInput, report Report)
	// Tick is the backend's share of the reconciler's periodic pass over
	// the live sandboxes.
	Tick(ctx context.Context, live []*sandbox.Sandbox)
	// Start begins the backend's background work; h is how it reports
	// back. The engine calls it once, before reconciling.
	Start(h Hooks)
	// Close stops background work and releases the node's shared
	// resources; keepNetwork leaves the egress network in place for
	// sandboxes that keep running.
	Close(keepNetwork bool)
}

// Freezer stops and continues every process of a sandbox in place
// (Caps.Freeze: pause, quarantine, the instant of a capture).
type Freezer interface {
	Freeze(ctx context.Context, sb *sandbox.Sandbox) error
	Thaw(ctx context.Context, sb *sandbox.Sandbox) error
}

// Hibernator saves and restores processes and memory (Caps.Checkpoint).
type Hibernator interface {
	// Checkpoint saves running or paused sb's processes and memory and
	// ends them. On failure, alive says whether sb still runs as before;
	// a failure after the image was complete leaves sb Hibernated (its
	// image recorded), which the engine undoes by restoring it.
	Checkpoint(ctx context.Context, sb *sandbox.Sandbox) (cp Checkpoint, alive bool, err error)
	// Hibernated reports whether stopped sb has a checkpoint to restore.
	Hibernated(sb *sandbox.Sandbox) bool
	// Restore brings a hibernated sb back from its checkpoint, its agent
	// answering; the checkpoint is removed once it runs.
	Restore(ctx context.Context, sb *sandbox.Sandbox) error
}

// Capturer copies a sandbox's files for forks and snapshots
// (Caps.Capture).
type Capturer interface {
	// Capture copies sb's files under name (which must be new), freezing
	// sb's processes (if running) and filesystems only while it copies.
	// release ends the capture's use by the caller; until then a sweep
	// leaves it alone. Every freeze is undone; a thaw that fails is the
	// error.
	Capture(ctx context.Context, sb *sandbox.Sandbox, name string) (c Capture, release func(), err error)
	// Materialize lays capture name down as the files of new sandbox sb.
	Materialize(ctx context.Context, sb *sandbox.Sandbox, name string) error
	// Revert replaces stopped sandbox sb's files with capture name's.
	Revert(ctx context.Context, sb *sandbox.Sandbox, name string) error
	// DropCapture removes capture name; a missing one is not an error.
	DropCapture(name string) error
	// CaptureName returns a fresh name for a fork's capture of parent.
	CaptureName(parent string) string
}

// Egress gives egress sandboxes their addresses and applies their rules
// (Caps.Egress). The rules' grammar is package network/egressrule's.
type Egress interface {
	// Allocate returns addresses for new egress sandbox id that used does
	// not report taken.
	Allocate(ctx context.Context, id string, used func(addr string) bool) (ipv4, ipv6 string, err error)
	// SetRules applies sb's rules now (cut: none at all, a quarantine).
	SetRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error
}

// EgressProxy puts berth's egress proxy on a sandbox's path, so secrets
// are injected into its requests at egress.
type EgressProxy interface {
	// EgressCA returns the certificate (PEM) of sb's own egress CA, made
	// on first use and kept on the node (its key never in the sandbox)
	// until sb is removed, and the node's system CA bundle (for images
	// without their own).
	EgressCA(ctx context.Context, sb *sandbox.Sandbox) (ca, system []byte, err error)
}

// RootLayer is a sandbox's writable root layer held by the backend
// (Caps.RootLayer): listed, read while frozen, made a template layer.
type RootLayer interface {
	// Diff lists sb's files that differ from its template.
	Diff(ctx context.Context, sb *sandbox.Sandbox) ([]Change, error)
	// QuarantineFiles serves reads of a quarantined sandbox.
	QuarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (FileSource, error)
	// CommitLayer ends build sandbox sb and stores what it wrote as a new
	// template layer, returning its id.
	CommitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error)
}

// Renamer changes a running sandbox's host name in place (Caps.Rename:
// a pool claim gives a named claimant its name); a class without
// Caps.Rename refuses it.
type Renamer interface {
	SetHostname(ctx context.Context, sb *sandbox.Sandbox, name string) error
}

// Refuser is a backend that says why it lacks a capability: Refuse
// returns the refusal (errdefs.ErrNotSupported, with the reason) of op,
// one of the Op constants, or nil to leave the refusal to Need.
type Refuser interface {
	Refuse(op string) error
}

// The operations of the capability interfaces, as a refusal names them.
const (
	OpPause          = "pause (freeze)"
	OpResume         = "resume (thaw)"
	OpHibernate      = "hibernate"
	OpWake           = "wake"
	OpCapture        = "fork and snapshot (capture)"
	OpEgress         = "network mode egress"
	OpEgressSecrets  = "secrets injected at egress"
	OpDiff           = "diff"
	OpQuarantine     = "quarantine"
	OpTemplateBuilds = "template builds"
	OpRename         = "rename"
)

// Need returns b's capability C (one of the interfaces above), or, when
// b lacks it, the refusal of op: the backend's own (Refuser) or a plain
// errdefs.ErrNotSupported.
func Need[C any](b Backend, op string) (C, error) {
	if c, ok := any(b).(C); ok {
		return c, nil
	}
	var zero C
	if r, ok := b.(Refuser); ok {
		if err := r.Refuse(op); err != nil {
			return zero, err
		}
	}
	return zero, errdefs.NotSupported("%s is not available on this node backend", op)
}

// Hibernated reports whether stopped sb has a checkpoint on b to restore
// (never on a backend that cannot checkpoint).
func Hibernated(b Backend, sb *sandbox.Sandbox) bool {
	h, ok := b.(Hibernator)
	return ok && h.Hibernated(sb)
}

// CheckCaps reports a class of b that claims a capability whose interface
// b does not implement (the conformance suite's Capabilities case).
func CheckCaps(b Backend) error {
	for _, c := range b.Classes() {
		for _, need := range []struct {
			claims bool
			has    bool
			what   string
		}{
			{c.Caps.Freeze, is[Freezer](b), "freeze (node.Freezer)"},
			{c.Caps.Checkpoint, is[Hibernator](b), "checkpoint (node.Hibernator)"},
			{c.Caps.Capture, is[Capturer](b), "capture (node.Capturer)"},
			{c.Caps.Egress, is[Egress](b), "egress (node.Egress)"},
			{c.Caps.RootLayer, is[RootLayer](b), "root_layer (node.RootLayer)"},
			{c.Caps.Rename, is[Renamer](b), "rename (node.Renamer)"},
		} {
			if need.claims && !need.has {
				return fmt.Errorf("runtime class %s claims %s, which its backend does not implement", c.Name, need.what)
			}
		}
	}
	return nil
}

func is[C any](b Backend) bool {
	_, ok := any(b).(C)
	return ok
}

// Hooks are how a backend tells the engine what it saw.
type Hooks struct {
	// Event records an event about a sandbox (security refusals, storage
	// going read-only). It must not block.
	Event func(*sandbox.Event)
	// Flow receives egress flow decisions. It must not block.
	Flow func(Flow)
	// Slots lists the host id slots held on this node (by sandbox id).
	Slots func(ctx context.Context) (map[string]int, error)
}

// MaxIDSlots bounds the host id ranges (slots) of one node.
const MaxIDSlots = 16384

// ErrNoCapture is returned for a capture that does not exist.
var ErrNoCapture = errors.New("no such capture")

// ClassCaps returns the capabilities of class name of b (the default
// class for ""), and whether b offers it.
func ClassCaps(b Backend, name string) (Caps, bool) {
	cls := b.Classes()
	if name == "" && len(cls) > 0 {
		return cls[0].Caps, true
	}
	for _, c := range cls {
		if c.Name == name {
			return c.Caps, true
		}
	}
	return Caps{}, false
}
