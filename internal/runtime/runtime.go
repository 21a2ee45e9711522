// Package runtime runs sandboxes as OCI containers. The Runtime interface is
// the contract between the sandbox manager and a runtime class; runc is the
// default implementation (namespaces + cgroups + seccomp + user namespace on
// the shared host kernel). gVisor (runsc) and microVM classes implement the
// same interface. BuildSpec turns berth's sandbox description into an OCI
// runtime-spec document with berth's isolation defaults, which no API field
// can weaken.
//
// Classes: runc (default, through containerd's go-runc), runsc (gVisor,
// static build; checkpoint and restore for hibernate; docs/gvisor.md) and
// kata (a microVM with runc's CLI, KVM hosts only, untested here;
// docs/microvm.md). Isolation describes a class's boundary in the runtime's
// own type. What the defaults are, and why: docs/isolation.md.
package runtime

import (
	"context"
	"os"
	"syscall"

	"github.com/berth-sh/berth/internal/sandbox"
)

// IDMap maps container ids 0..Size-1 onto host ids Host..Host+Size-1, for
// both uids and gids. Sandbox root is never host root.
type IDMap struct {
	HostUID uint32
	HostGID uint32
	Size    uint32
}

// HostRoot returns the host uid and gid of root inside the sandbox.
func (m IDMap) HostRoot() (uid, gid int) { return int(m.HostUID), int(m.HostGID) }

// Mount is an extra bind mount into the sandbox; the set is chosen by berth,
// never by an API caller.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
}

// Spec describes one sandbox container to start.
type Spec struct {
	ID       string
	Bundle   string // directory the runtime keeps config.json in
	Rootfs   string // the sandbox's root filesystem, already mounted
	Hostname string
	Args     []string // the init process: berth's agent
	Env      []string
	Mounts   []Mount
	// SecretsTmpfs mounts a small tmpfs at SecretsDir for the agent to
	// write secret files in: never the writable layer (secretfiles.go).
	SecretsTmpfs bool
	Resources    sandbox.Resources
	IDMap        IDMap
	// UsernsPath, if set, is a user namespace (a bind mount of one) with
	// IDMap's mapping for the container to join instead of making its
	// own: one the daemon made owned by the sandbox's host root uid.
	UsernsPath string
	// NetnsPath, if set, is a network namespace (a bind mount of one)
	// the daemon has made and wired already, for the container to join
	// instead of making an empty one. Runtimes that take the network
	// over when the sandbox is created (runsc's netstack copies the
	// interfaces and routes it finds then) need it; runc's sandboxes are
	// wired after start instead (see NetnsBeforeStart).
	NetnsPath   string
	CgroupsPath string // e.g. /berth-<instance>/<id>
	// Log receives init's stdout and stderr (and the runtime's own
	// messages while it starts the container): the write end of a pipe
	// the daemon drains into a bounded buffer, never a host file a
	// sandbox could grow or see the path of. nil is /dev/null.
	Log *os.File
	// ExtraFiles are passed to init as fds 3, 4, ...
	ExtraFiles []*os.File
	// InitSeccompFD, when positive, says the init process (berth's agent,
	// started with --seccomp-fd) installs the sandbox's seccomp filter
	// itself, before it reads any input, from the compiled program the
	// runtime passes it on this descriptor (3+len(ExtraFiles)). The
	// runtime then leaves the profile out of the bundle, so that it is not
	// compiled again on every start. Only runtimes that hand descriptors to
	// init (runc) accept it; the others refuse it.
	InitSeccompFD int
	// Helper, when set, is the path inside the sandbox of a berth binary
	// the runtime may run for set-up steps that cannot be done from the
	// host (runsc: the sandbox's task limit, see runsc_limits.go).
	Helper string
}

// Status is a container's status as the runtime sees it.
type Status string

const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
)

// State is a container known to the runtime.
type State struct {
	ID     string
	Status Status
	Pid    int
	Bundle string
}

// Isolation describes the boundary a runtime class provides. The daemon
// adds the per-sandbox parts (ids, user namespace owner) and turns it into
// the API's form; the runtime does not know the API.
type Isolation struct {
	Runtime       string   // runtime class, e.g. runc
	SharedKernel  bool     // true for namespace runtimes
	UserNamespace bool     // sandbox root is not host root
	Seccomp       string   // profile name
	Capabilities  []string // what root inside keeps
	NoNewPrivs    bool
	ReadonlyImage bool
}

// Runtime is a runtime class. Every method is idempotent where that makes
// sense: deleting or killing a container that is already gone succeeds.
type Runtime interface {
	Name() string
	// Start creates and starts the container detached and returns the host
	// pid of its init process.
	Start(ctx context.Context, spec *Spec) (pid int, err error)
	// State returns a container's state; an unknown id gives errdefs.ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// List returns every container in this runtime's root.
	List(ctx context.Context) ([]State, error)
	Kill(ctx context.Context, id string, sig syscall.Signal) error
	// Delete force-deletes the container: kills what is left, removes its
	// cgroup and runtime state. Unknown ids are not an error.
	Delete(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Isolation describes the boundary this class provides.
	Isolation() Isolation
}
