// Package sandbox holds berth's core domain model: the sandbox record, its
// state machine and the policy arithmetic (deadlines) as pure functions of the
// current time. It does no I/O; the daemon, store and API build on it.
//
// Spec validation keeps resources within what the kernel enforces: cpus at
// least 0.01 (the CFS quota floor), memory at least 16 MiB, pids between 8
// and the host's kernel.pid_max (read by the daemon at start); and no
// control characters in names, paths, env, labels and rules (text.go).
// Policies (hard timeout, idle timeout with pause or stop, max age with
// stop or delete, retention) are deadlines computed by Next from stored
// timestamps; the reconciler sleeps until the next one.
package sandbox

import (
	"fmt"
	"math"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// State is a sandbox lifecycle state (see DESIGN.md, "The state layers").
type State string

const (
	StateCreating    State = "creating"
	StateRunning     State = "running"
	StatePaused      State = "paused"
	StateStopping    State = "stopping"
	StateStopped     State = "stopped"
	StateStarting    State = "starting"
	StateDeleting    State = "deleting"
	StateDeleted     State = "deleted"
	StateFailed      State = "failed"
	StateQuarantined State = "quarantined"
)

// transitions lists, for each state, the states it may move to.
// Every state may move to deleting and failed; those are added in CanTransition.
var transitions = map[State][]State{
	StateCreating:    {StateRunning},
	StateRunning:     {StatePaused, StateStopping, StateQuarantined},
	StatePaused:      {StateRunning, StateStopping, StateQuarantined},
	StateStopping:    {StateStopped},
	StateStopped:     {StateStarting, StateQuarantined},
	StateStarting:    {StateRunning, StateStopped}, // a failed start falls back to stopped
	StateQuarantined: {StateRunning, StatePaused, StateStopped},
	StateFailed:      {},
	StateDeleting:    {StateDeleted},
	StateDeleted:     {},
}

// CanTransition reports whether a sandbox may move from one state to another.
func CanTransition(from, to State) bool {
	if from == StateDeleted {
		return false
	}
	if to == StateDeleting {
		return from != StateDeleting
	}
	if to == StateFailed {
		return from != StateDeleting && from != StateFailed
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether no further transition other than deletion is
// expected from s.
func (s State) Terminal() bool { return s == StateDeleted }

// Live reports whether the sandbox may have processes or host resources.
func (s State) Live() bool { return s != StateDeleted }

// Cause says who or what drove a transition.
type Cause string

const (
	CauseUser       Cause = "user"
	CausePolicy     Cause = "policy"
	CauseReconciler Cause = "reconciler"
	CauseAdmin      Cause = "admin"
	CauseClient     Cause = "client" // the client of a one-shot run went away
)

// Resources are the limits of a sandbox: cgroup limits, and the disk cap
// of its writable root layer (/tmp included).
type Resources struct {
	CPUs        float64 `json:"cpus"`         // CPU quota in cores
	MemoryBytes int64   `json:"memory_bytes"` // memory limit (no swap)
	Pids        int64   `json:"pids"`         // max processes and threads
	// DiskBytes caps the writable root layer; its inode cap follows from
	// it (DiskInodes). 0: the server's default.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

// Limits on what a request may ask for; the server may lower them by config.
const (
	MaxCPUs        = 64
	MinMemoryBytes = 16 << 20
	MaxMemoryBytes = 256 << 30
	MinPids        = 8
	MinDiskBytes   = 16 << 20
	MaxDiskBytes   = 16 << 40 // the storage pool's size bounds it further
	MaxPids        = 1 << 20
	MaxTimeout     = 30 * 24 * time.Hour
	MaxEnv         = 256
	MaxLabels      = 64
)

// Documented limits (docs/limits.md): a request past one is refused with
// 400 limit_exceeded naming it (errdefs.Limit).
const (
	// MaxAllowRules is the most egress allow rules a sandbox may have; a
	// rule with ports counts once per port (each is its own kernel rule).
	MaxAllowRules = 512
	// MaxEnvValueBytes and MaxLabelValueBytes bound one value.
	MaxEnvValueBytes   = 32 << 10
	MaxLabelValueBytes = 256
)

// bytesPerDiskInode sets a disk cap's inode cap: one inode per 16 KiB.
const bytesPerDiskInode = 16 << 10

// DiskInodes is the inode cap that goes with a disk cap of bytes.
func DiskInodes(bytes int64) int64 { return bytes / bytesPerDiskInode }

// DefaultResources applies when neither request nor template says otherwise.
var DefaultResources = Resources{CPUs: 1, MemoryBytes: 512 << 20, Pids: 512}

// Spec is what the user asked for; it does not change over a sandbox's life.
type Spec struct {
	Template   string            `json:"template"`
	Persistent bool              `json:"persistent"`
	Resources  Resources         `json:"resources"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Timeout    time.Duration     `json:"timeout,omitempty"` // hard lifetime limit; 0 = none
	Network    string            `json:"network,omitempty"` // "none" (default) | "egress"
	Runtime    string            `json:"runtime,omitempty"` // runtime class, e.g. "runc"
	Workdir    string            `json:"workdir,omitempty"`
	// User is who commands run as when an exec names no one, and who owns
	// /workspace: the create's user, else the template's ("" = root).
	// "uid[:gid]" or a name from the sandbox's /etc/passwd.
	User string `json:"user,omitempty"`
	// Secrets are the tenant's secrets its execs get (names only: see secrets.go).
	Secrets []SecretRef `json:"secrets,omitempty"`
	// OneShot marks a `berth run` sandbox: it is destroyed when its client's
	// connection goes away.
	OneShot bool `json:"one_shot,omitempty"`

	// PersistRoot keeps the whole writable root layer of a persistent
	// sandbox on its workspace volume.
	PersistRoot bool `json:"persist_root,omitempty"`
	// Volumes are mounted in order; a persistent sandbox's own workspace
	// volume comes first.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// VolumeSize and VolumeInodes size the workspace volume it creates.
	VolumeSize   int64 `json:"volume_size,omitempty"`
	VolumeInodes int64 `json:"volume_inodes,omitempty"`
	// KeepVolume keeps the workspace volume after the sandbox is deleted.
	KeepVolume bool   `json:"keep_volume,omitempty"`
	Policy     Policy `json:"policy"`
	// Layers are the template's layers when the sandbox was made: a
	// template updated later does not change what this sandbox's writable
	// layer sits on.
	Layers []string `json:"layers,omitempty"`
	// HostUsr: the host's /usr is bind-mounted read-only (builtin template).
	HostUsr bool `json:"host_usr,omitempty"`
	// TemplateEnv is the template's environment when the sandbox was made.
	TemplateEnv []string `json:"template_env,omitempty"`
	// Parent and FromSnapshot record lineage.
	Parent       string `json:"parent,omitempty"`
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Pool marks a warm-pool member not yet handed out, for template Pool.
	Pool string `json:"pool,omitempty"`
	// Network identity and egress rules (mode egress): addresses are
	// assigned once and kept; rules can change while it runs.
	IPv4        string   `json:"ipv4,omitempty"`
	IPv6        string   `json:"ipv6,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	PublicPorts []int    `json:"public_ports,omitempty"`
	// AllPortsPublic: the E2B door serves every port of the sandbox
	// without a token (E2B's default, unless the create asked
	// allowPublicTraffic: false). berth's own port proxy keeps to
	// PublicPorts.
	AllPortsPublic bool `json:"all_ports_public,omitempty"`
	// MaskRequestHost: the Host header the E2B door gives requests to
	// the sandbox's ports ("${PORT}" the port; E2B's maskRequestHost);
	// "" keeps the caller's.
	MaskRequestHost string `json:"mask_request_host,omitempty"`
	// KeepCreateLease: a stop leaves the create-time lease alive (E2B's
	// pause without memory, whose SDK resumes with the token it had); the
	// lease still ends with its key, the sandbox's deletion, quarantine or
	// failure, or its own revocation, and the guard refuses it while the
	// sandbox is not running. Every other lease of it ends at the stop.
	KeepCreateLease bool `json:"keep_create_lease,omitempty"`
	// Sudo: the sandbox has berth's sudo (internal/agent/sudo) for root
	// and User: the agent serves it and /.berth/bin/sudo is first in its
	// commands' PATH. Fixed at container start.
	Sudo bool `json:"sudo,omitempty"`
	// IDs is the sandbox's host uid/gid range, given at create and
	// released at delete; never inherited by a fork or snapshot.
	IDs *HostIDs `json:"ids,omitempty"`
}

// HostIDs is where a sandbox's ids 0..Size-1 are on the host: uid and gid
// Base..Base+Size-1.
type HostIDs struct {
	// Slot is the id_slots row held (-1: the shared range, no slot).
	Slot int    `json:"slot"`
	Base uint32 `json:"base"`
	Size uint32 `json:"size"`
	// Mode is IDModePerSandbox or IDModeShared.
	Mode string `json:"mode"`
}

// Host id modes: each sandbox its own range (idmapped layers), or one
// range for all (layers chowned into it; hosts without idmapped mounts).
const (
	IDModePerSandbox = "per-sandbox"
	IDModeShared     = "shared"
)

// VolumeMount attaches volume VolumeID (named Name) at Path.
type VolumeMount struct {
	VolumeID string `json:"volume_id"`
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Owned volumes were made for this sandbox and go with it unless kept.
	Owned bool `json:"owned,omitempty"`
}

// Policy is a sandbox's lifecycle policy; zero durations mean none.
type Policy struct {
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	OnIdle      Action        `json:"on_idle,omitempty"`
	MaxAge      time.Duration `json:"max_age,omitempty"`
	OnMaxAge    Action        `json:"on_max_age,omitempty"`
	Retention   time.Duration `json:"retention,omitempty"`
	AutoResume  bool          `json:"auto_resume,omitempty"`
	// IdleCPUThreshold in cores; negative: CPU use never counts as activity.
	IdleCPUThreshold float64 `json:"idle_cpu_threshold,omitempty"`
}

// DefaultIdleCPUThreshold is the CPU use, in cores, above which a
// sandbox's processes count as activity.
const DefaultIdleCPUThreshold = 0.05

// Action is what a policy does when its deadline passes.
type Action string

const (
	ActionNone   Action = ""
	ActionPause  Action = "pause"
	ActionStop   Action = "stop"
	ActionDelete Action = "delete"
)

// Sandbox is the durable record of one sandbox.
type Sandbox struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	State     State     `json:"state"`
	Spec      Spec      `json:"spec"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// StartedAt is when the sandbox last entered running from creating/starting.
	StartedAt time.Time `json:"started_at,omitzero"`
	DeletedAt time.Time `json:"deleted_at,omitzero"`
	// Cause and Reason describe the last transition.
	Cause  Cause  `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Error holds the last failure, e.g. of a teardown step still being retried.
	Error string `json:"error,omitempty"`
	// Generation increments on every update; updates are compare-and-swap on it.
	Generation int64 `json:"generation"`

	// LastActivityAt is the last API activity (exec, files, touch) or
	// observed busy CPU; idle timeouts count from it.
	LastActivityAt time.Time `json:"last_activity_at,omitzero"`
	PausedAt       time.Time `json:"paused_at,omitzero"`
	StoppedAt      time.Time `json:"stopped_at,omitzero"`
	// PrevState is the state a quarantined sandbox returns to on release.
	PrevState State `json:"prev_state,omitempty"`
	// Node is the daemon whose host runs the sandbox; only it acts on it.
	Node string `json:"node,omitempty"`
	// Replica is the replica that made the last transition (package
	// leader's holder id). On a node several replicas share, a create or
	// start whose replica is gone is finished by the node lease's holder.
	Replica string `json:"replica,omitempty"`
}

// Hostname is the sandbox's host name: its name, or sb-<id prefix>.
func (s *Sandbox) Hostname() string {
	if s.Name != "" {
		return s.Name
	}
	return "sb-" + s.ID[:min(8, len(s.ID))]
}

// Deadline returns when the sandbox's hard timeout expires, and false if it
// has none.
func (s *Sandbox) Deadline() (time.Time, bool) {
	if s.Spec.Timeout <= 0 || s.StartedAt.IsZero() {
		return time.Time{}, false
	}
	return s.StartedAt.Add(s.Spec.Timeout), true
}

// Expired reports whether the sandbox's hard timeout has passed at now.
func (s *Sandbox) Expired(now time.Time) bool {
	d, ok := s.Deadline()
	return ok && !now.Before(d)
}

// charset checks that s is 1..max bytes, its first byte in first and the
// rest in rest. (Hand-written: compiling the equivalent regexps at start-up
// cost every berth process, the agent included, over a millisecond.)
func charset(s string, max int, first, rest func(byte) bool) bool {
	if len(s) == 0 || len(s) > max || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// ValidName reports whether n is an acceptable sandbox, template or volume
// name: a letter or digit, then up to 62 letters, digits, '_', '.', '-'.
func ValidName(n string) bool {
	return charset(n, 63, alnum, func(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' })
}

func validEnvKey(k string) bool {
	return charset(k, 256, func(c byte) bool { return alnum(c) && !(c >= '0' && c <= '9') || c == '_' },
		func(c byte) bool { return alnum(c) || c == '_' })
}

func validLabelKey(k string) bool {
	return charset(k, 63, alnum, func(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '/' || c == '-' })
}

// Validate checks a spec after defaults have been applied.
func (sp *Spec) Validate() error {
	if err := validateResources(sp.Resources); err != nil {
		return err
	}
	// The upper bound is the storage pool's size, which the manager checks.
	if r := sp.Resources; r.DiskBytes < 0 || r.DiskBytes != 0 && r.DiskBytes < MinDiskBytes {
		return errdefs.Invalid("disk must be at least %d MiB, got %d bytes", MinDiskBytes>>20, sp.Resources.DiskBytes)
	}
	if sp.Timeout < 0 || sp.Timeout > MaxTimeout {
		return errdefs.Invalid("timeout must be between 0 and %s", MaxTimeout)
	}
	if err := CheckEnv(sp.Env); err != nil {
		return err
	}
	if err := CheckLabels(sp.Labels); err != nil {
		return err
	}
	if err := CheckText("template", sp.Template); err != nil {
		return err
	}
	for _, e := range sp.TemplateEnv {
		if err := CheckEnvValue("of the template", e); err != nil {
			return err
		}
	}
	if err := CheckAllow(sp.Allow); err != nil {
		return err
	}
	for _, vm := range sp.Volumes {
		if err := CheckText("volume name", vm.Name); err != nil {
			return err
		}
		if vm.Path != "" {
			if err := CheckPath("volume "+vm.Name+" path", vm.Path); err != nil {
				return err
			}
		}
	}
	switch sp.Network {
	case "", "none":
	case "egress":
	default:
		return errdefs.Invalid("network must be none or egress, got %q", sp.Network)
	}
	if sp.Network != "egress" && len(sp.Allow) > 0 {
		return errdefs.Invalid("allow rules need network mode egress")
	}
	for _, p := range sp.PublicPorts {
		if p < 1 || p > 65535 {
			return errdefs.Invalid("public port %d out of range", p)
		}
	}
	if sp.Workdir != "" {
		if err := CheckPath("workdir", sp.Workdir); err != nil {
			return err
		}
	}
	if err := CheckText("user", sp.User); err != nil {
		return err
	}
	return sp.Policy.validate(sp.Persistent)
}

func (p *Policy) validate(persistent bool) error {
	for name, d := range map[string]time.Duration{"idle timeout": p.IdleTimeout, "max age": p.MaxAge, "retention": p.Retention} {
		if d < 0 || d > MaxTimeout {
			return errdefs.Invalid("%s must be between 0 and %s", name, MaxTimeout)
		}
	}
	switch p.OnIdle {
	case ActionNone, ActionPause:
	case ActionStop:
	default:
		return errdefs.Invalid("on_idle must be pause or stop, got %q", p.OnIdle)
	}
	switch p.OnMaxAge {
	case ActionNone, ActionStop, ActionDelete:
	default:
		return errdefs.Invalid("on_max_age must be stop or delete, got %q", p.OnMaxAge)
	}
	if math.IsNaN(p.IdleCPUThreshold) || p.IdleCPUThreshold > MaxCPUs {
		return errdefs.Invalid("idle_cpu_threshold is in cores: at most %d", MaxCPUs)
	}
	return nil
}

// Event is one recorded transition or mutating call.
type Event struct {
	ID        int64     `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"` // e.g. "state", "exec", "files.write"
	From      State     `json:"from,omitempty"`
	To        State     `json:"to,omitempty"`
	Actor     string    `json:"actor,omitempty"` // e.g. "key:abc123", "policy:timeout", "reconciler"
	Cause     Cause     `json:"cause,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Outcome   string    `json:"outcome,omitempty"` // "ok" | "error"
	Message   string    `json:"message,omitempty"`
}

// ErrWrongState builds the 409 returned when an operation does not fit the
// sandbox's current state.
func ErrWrongState(op string, s *Sandbox) error {
	return errdefs.Conflict("cannot %s sandbox %s: it is %s", op, s.ID, s.State)
}

// Transition moves s to the state to, recording cause and reason; it fails
// with a 409 if the state machine forbids the move.
func (s *Sandbox) Transition(to State, cause Cause, reason string, now time.Time) error {
	if !CanTransition(s.State, to) {
		return fmt.Errorf("%s -> %s: %w", s.State, to, ErrWrongState(string(to), s))
	}
	from := s.State
	s.State = to
	s.Cause = cause
	s.Reason = reason
	s.UpdatedAt = now
	switch to {
	case StateRunning:
		// The hard timeout counts per run: from create, and again from
		// each start of a stopped sandbox.
		if from == StateCreating || from == StateStarting {
			s.StartedAt = now
			s.LastActivityAt = now
		}
		s.PausedAt = time.Time{}
		s.StoppedAt = time.Time{}
	case StatePaused:
		s.PausedAt = now
	case StateStopped:
		s.StoppedAt = now
		s.PausedAt = time.Time{}
	case StateDeleted:
		s.DeletedAt = now
	}
	return nil
}
