package engine

import (
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/sandbox"
)

// ImageTemplatePrefix begins the name of every image record the image
// cache keeps (create --image): "image@sha256:<hex>". No template a
// caller names can begin so ('@' is no name character), so a record
// never shadows a template, nor one a record.
const ImageTemplatePrefix = "image@"

// ImageTemplateName is the record name of the image of manifest digest
// ("sha256:<hex>").
func ImageTemplateName(digest string) string { return ImageTemplatePrefix + digest }

// IsImageTemplate reports whether name is an image cache record's.
func IsImageTemplate(name string) bool { return strings.HasPrefix(name, ImageTemplatePrefix) }

// The engine's own request and result types. The HTTP API's JSON types
// (package api) are converted to and from these in the server, so the API
// can change shape (a field renamed, seconds as floats) without the engine
// following, and a second front door can reach the engine with its own.
// Durations are time.Duration; a positive duration stays positive however
// small (the server's conversion rounds a positive number of seconds below
// a nanosecond up to one), so the engine's "at least 1ms" refusals still
// see it.

// CreateRequest is what a new sandbox is made from.
type CreateRequest struct {
	Name     string
	Template string // "" = the daemon's default template
	// Image, instead of Template, makes the sandbox from a registry
	// image: resolved to its digest and pulled on first use, then cached
	// by digest as a template record of the caller's (ImageTemplateName).
	Image string
	// ImageInsecure allows a plain-HTTP registry for Image.
	ImageInsecure bool
	// RegistryAuth is Image's registry account for this pull alone
	// (never stored); see templates' registryCtx.
	RegistryAuth *image.RequestAuth
	Persistent   bool
	// Resources: zero fields take the template's or the default.
	Resources sandbox.Resources
	Env       map[string]string
	Labels    map[string]string
	Timeout   time.Duration // hard lifetime; 0 = the template's or the default
	Network   string        // none | egress; "" = the template's, else none
	Runtime   string        // runtime class; "" = the daemon's default
	Workdir   string
	User      string // default user of its commands; "" = the template's

	PersistRoot     bool
	VolumeSizeBytes int64
	VolumeInodes    int64
	Volumes         []VolumeRequest
	KeepVolume      bool
	// Snapshot, if set, makes the sandbox from that snapshot instead of a
	// template.
	Snapshot    string
	Allow       []string
	PublicPorts []int
	// AllPortsPublic: every port open without a token through the E2B
	// door (sandbox.Spec.AllPortsPublic).
	AllPortsPublic bool
	// MaskRequestHost: the Host of requests to its ports through the E2B
	// door (sandbox.Spec.MaskRequestHost).
	MaskRequestHost string
	// KeepCreateLease: the create-time lease outlives a stop
	// (sandbox.Spec.KeepCreateLease; the E2B door's pause without memory).
	KeepCreateLease bool
	// Sudo gives the sandbox berth's sudo (sandbox.Spec.Sudo); a runtime
	// class without it refuses the create. SudoWhereOffered gives it
	// where the class has it and leaves it out elsewhere (the E2B door).
	Sudo, SudoWhereOffered bool
	// Secrets are the tenant's secrets injected into its execs.
	Secrets []sandbox.SecretRef
	// Policy: zero fields take the template's or the daemon's default.
	Policy sandbox.Policy
}

// VolumeRequest attaches a named volume at Path ("" = /workspace for the
// first).
type VolumeRequest struct {
	Name     string
	Path     string
	ReadOnly bool
}

// ExecRequest is a command to run in a sandbox.
type ExecRequest struct {
	Cmd     []string
	Env     map[string]string
	Workdir string
	User    string // "uid[:gid]" or a name from /etc/passwd
	Stdin   []byte // whole stdin, when ExecIO.Stdin is nil
	Timeout time.Duration
	TTY     bool
	Rows    uint16
	Cols    uint16
}

// Exit is how an exec ended.
type Exit struct {
	Code      int    // exit code; 128+signal when killed
	Signal    string // e.g. "SIGKILL"
	TimedOut  bool
	OOMKilled bool
	Duration  time.Duration // wall time of the process
}

// Resize is a terminal size change of a TTY exec.
type Resize struct {
	Rows, Cols uint16
}

// TermInput is a terminal's input, bytes and size changes in the order
// its user made them (agent.TermInput). Given as an exec's or an
// attach's Stdin, its resizes reach the process in order with the bytes:
// a resize sent beside the input, on ExecIO.Resize, can be overtaken by
// input typed after it.
type TermInput struct{ *agent.TermInput }

// NewTermInput returns an empty terminal input.
func NewTermInput() TermInput { return TermInput{agent.NewTermInput()} }

// Resize queues a size change after the input written before it.
func (t TermInput) Resize(rs Resize) error {
	return t.TermInput.Resize(agent.Resize{Rows: rs.Rows, Cols: rs.Cols})
}

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Name    string
	Path    string
	Size    int64
	Mode    uint32 // fs.FileMode bits
	ModTime time.Time
	IsDir   bool
	Link    string // symlink target
	// UID and GID own the file as the sandbox sees it; nil from an agent
	// too old to report them.
	UID, GID *uint32
	// Xattrs are a file's or directory's user-namespace extended
	// attributes by full name (agent.FileInfo's, bounded there).
	Xattrs map[string]string
}

// DiffEntry is one path of a sandbox that differs from its template.
type DiffEntry struct {
	Path string
	Kind string // added | changed | removed
	Size int64
	Dir  bool
}

// Isolation describes the boundary a sandbox runs behind.
type Isolation struct {
	Runtime       string
	SharedKernel  bool
	UserNamespace bool
	Seccomp       string
	Capabilities  []string
	NoNewPrivs    bool
	ReadonlyImage bool
	IDMode        string // per-sandbox | shared
	HostUID       uint32
	HostGID       uint32
	HostIDs       uint32
	UsernsOwner   string // sandbox | host-root | sentry
}

// Disk is the cap and usage of a sandbox's writable root layer.
type Disk struct {
	CapBytes   int64
	CapInodes  int64
	UsedBytes  int64
	UsedInodes int64
	Enforced   bool
	Note       string // why not enforced
	ReadOnly   bool
}
