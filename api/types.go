// Package api holds the JSON types of berth's HTTP API (/v1). The daemon's
// server and the Go SDK (package client) share them, so the wire format has a
// single definition. The OpenAPI document in api/openapi.json describes the
// same shapes for other languages.
//
// fileinfo.go is the POSIX view of file info (permissions 0755 = 493,
// mode_string drwxr-xr-x, type) beside the Go FileMode mode kept for old
// clients.
package api

import "time"

// Error is the body of every non-2xx response: {"error": {...}}.
type Error struct {
	Code    string `json:"code"`    // stable: invalid_argument, not_found, conflict, ...
	Message string `json:"message"` // one actionable line
	// RequestID is the request's X-Request-Id: quote it when reporting a
	// 5xx, whose cause is in the daemon's log under this id.
	RequestID string `json:"request_id,omitempty"`
	// Limit names the documented limit a limit_exceeded refusal went
	// past (max_allow_rules, max_labels, ...: docs/limits.md).
	Limit string `json:"limit,omitempty"`
}

// ErrorBody wraps Error as sent on the wire.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Resources are the limits of a sandbox: cgroup limits and the disk cap
// of its writable root layer.
type Resources struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	// DiskBytes caps the writable root layer and /tmp together (0: the
	// template's or the server's default).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

// Disk is the cap and usage of a sandbox's writable root layer (/tmp
// included): its own filesystem, so a write past the cap fails with
// ENOSPC inside the sandbox. For persist_root sandboxes the layer is on
// the workspace volume, whose size caps it (see storage).
type Disk struct {
	CapBytes   int64 `json:"cap_bytes"`
	CapInodes  int64 `json:"cap_inodes"`
	UsedBytes  int64 `json:"used_bytes"`
	UsedInodes int64 `json:"used_inodes"`
	// Enforced is false when the cap is recorded but not in force; Note
	// says why.
	Enforced bool   `json:"enforced"`
	Note     string `json:"note,omitempty"`
	// ReadOnly: the kernel made the layer's filesystem read-only (an I/O
	// error); a stop/start makes it anew.
	ReadOnly bool `json:"read_only,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Name     string `json:"name,omitempty"`
	Template string `json:"template,omitempty"` // default: the server's default template
	// Image makes the sandbox from a registry image instead of a
	// template: resolved to its manifest digest, pulled on first use and
	// cached by digest (as template "image@sha256:…" of the caller).
	// A tenant's key needs a daemon run with --tenant-pulls.
	Image string `json:"image,omitempty"`
	// ImageInsecure allows a plain-HTTP registry for Image.
	ImageInsecure bool `json:"image_insecure,omitempty"`
	// RegistryAuth is Image's registry account for this pull alone, never
	// stored or shown. Without it the host's pulls use the daemon's
	// credentials (serve --registry-auth) and a tenant's go anonymous.
	RegistryAuth   *RegistryAuth     `json:"registry_auth,omitempty"`
	Persistent     bool              `json:"persistent,omitempty"`
	Resources      Resources         `json:"resources,omitzero"`
	Env            map[string]string `json:"env,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"` // hard lifetime; 0 = none
	Network        string            `json:"network,omitempty"`         // none | egress
	Runtime        string            `json:"runtime,omitempty"`         // runtime class: runc
	Workdir        string            `json:"workdir,omitempty"`
	// User is who commands run as when an exec names no one, and who owns
	// /workspace ("uid[:gid]" or a name from the sandbox's /etc/passwd);
	// default: the template's user, else root.
	User string `json:"user,omitempty"`

	// PersistRoot keeps the whole writable root layer of a persistent
	// sandbox (packages installed with apt or pip survive stop/start), not
	// only its workspace volume.
	PersistRoot bool `json:"persist_root,omitempty"`
	// VolumeSizeBytes is the quota of a persistent sandbox's workspace
	// volume (and of its root layer with PersistRoot); default 1 GiB.
	VolumeSizeBytes int64 `json:"volume_size_bytes,omitempty"`
	// VolumeInodes caps the files on that volume; default 1 per 16 KiB.
	VolumeInodes int64 `json:"volume_inodes,omitempty"`
	// Volumes attaches existing named volumes.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// KeepVolume keeps the workspace volume when the sandbox is deleted.
	KeepVolume bool `json:"keep_volume,omitempty"`
	// Snapshot starts the sandbox from a snapshot (its template, workspace
	// and writable root) instead of a template.
	Snapshot string `json:"snapshot,omitempty"`
	// Allow lists egress rules for network mode egress:
	// [tcp://|udp://]IP|CIDR|DOMAIN|*.DOMAIN[:PORT[,PORT]]. All else is denied.
	Allow []string `json:"allow,omitempty"`
	// PublicPorts are sandbox ports the port proxy serves without credentials.
	PublicPorts []int `json:"public_ports,omitempty"`
	// Secrets are the tenant's secrets every exec in it gets as env vars.
	Secrets []SecretRef `json:"secrets,omitempty"`
	// Sudo gives the sandbox a passwordless sudo for root and its user
	// (as E2B's templates have): commands run as the sandbox's root, as
	// an exec with user root would. Default off.
	Sudo bool `json:"sudo,omitempty"`
	Policy
}

// Policy is a sandbox's lifecycle policy. Zero values mean "none" (or the
// template's or server's default).
type Policy struct {
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds,omitempty"`
	OnIdle             string  `json:"on_idle,omitempty"` // pause (default) | stop
	MaxAgeSeconds      float64 `json:"max_age_seconds,omitempty"`
	OnMaxAge           string  `json:"on_max_age,omitempty"` // stop | delete (default)
	// RetentionSeconds deletes a stopped sandbox this long after it stopped.
	RetentionSeconds float64 `json:"retention_seconds,omitempty"`
	// AutoResume makes exec, file and port requests to a paused or stopped
	// sandbox resume or start it first.
	AutoResume bool `json:"auto_resume,omitempty"`
	// IdleCPUThreshold: CPU use (in cores) above which the sandbox's
	// processes count as activity; 0 = default 0.05, negative = CPU is ignored.
	IdleCPUThreshold float64 `json:"idle_cpu_threshold,omitempty"`
}

// VolumeMount attaches a named volume at a path inside the sandbox.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"` // default /workspace for the first, required otherwise
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Volume is a named, quota-limited filesystem.
type Volume struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	State      string `json:"state"` // available | attached | deleted
	SizeBytes  int64  `json:"size_bytes"`
	Inodes     int64  `json:"inodes"`
	UsedBytes  int64  `json:"used_bytes"`
	UsedInodes int64  `json:"used_inodes"`
	AttachedTo string `json:"attached_to,omitempty"` // sandbox id
	Keep       bool   `json:"keep"`                  // outlives its sandbox
	// ReadOnly: the kernel made the mounted filesystem read-only (an I/O
	// error, e.g. the host disk under the pool filled); a stop/start
	// mounts it read-write again.
	ReadOnly  bool      `json:"read_only,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes,omitempty"` // default 1 GiB
	Inodes    int64  `json:"inodes,omitempty"`
}

// DiffEntry is one path that differs from the sandbox's template.
type DiffEntry struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // added | changed | removed
	Size int64  `json:"size"`
	Dir  bool   `json:"dir,omitempty"`
}

// Isolation describes the isolation boundary a sandbox runs behind.
type Isolation struct {
	Runtime       string   `json:"runtime"`        // runtime class, e.g. runc
	SharedKernel  bool     `json:"shared_kernel"`  // true for namespace runtimes
	UserNamespace bool     `json:"user_namespace"` // sandbox root is not host root
	Seccomp       string   `json:"seccomp"`        // profile name
	Capabilities  []string `json:"capabilities"`   // what root inside keeps
	NoNewPrivs    bool     `json:"no_new_privileges"`
	ReadonlyImage bool     `json:"readonly_image"`
	// IDMode is "per-sandbox" (its own host uid/gid range, image layers
	// idmapped onto it) or "shared" (one range for every sandbox: hosts
	// without idmapped mounts).
	IDMode string `json:"id_mode,omitempty"`
	// HostUID and HostGID are the host ids of root inside; HostIDs ids
	// from there are the sandbox's.
	HostUID uint32 `json:"host_uid,omitempty"`
	HostGID uint32 `json:"host_gid,omitempty"`
	HostIDs uint32 `json:"host_ids,omitempty"`
	// UsernsOwner says who owns the sandbox's user namespace, and so is
	// charged its per-user kernel counts (inotify instances): "sandbox"
	// (its own host root uid), "host-root", or "sentry" (runsc: gVisor
	// serves them itself).
	UsernsOwner string `json:"userns_owner,omitempty"`
}

// Sandbox is the representation of a sandbox returned by the API.
type Sandbox struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Template       string            `json:"template"`
	State          string            `json:"state"`
	Persistent     bool              `json:"persistent"`
	Resources      Resources         `json:"resources"`
	Env            map[string]string `json:"env,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	Network        string            `json:"network"`
	Workdir        string            `json:"workdir,omitempty"`
	User           string            `json:"user,omitempty"`
	Isolation      Isolation         `json:"isolation"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
	ExpiresAt      *time.Time        `json:"expires_at,omitempty"`
	DeletedAt      *time.Time        `json:"deleted_at,omitempty"`
	Cause          string            `json:"cause,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	Error          string            `json:"error,omitempty"`

	Hostname    string        `json:"hostname"`
	PersistRoot bool          `json:"persist_root,omitempty"`
	Volumes     []VolumeMount `json:"volumes,omitempty"`
	KeepVolume  bool          `json:"keep_volume,omitempty"`
	// Sudo: the sandbox has sudo for root and its user.
	Sudo           bool       `json:"sudo,omitempty"`
	Policy         Policy     `json:"policy"`
	LastActivityAt *time.Time `json:"last_activity_at,omitempty"`
	PausedAt       *time.Time `json:"paused_at,omitempty"`
	StoppedAt      *time.Time `json:"stopped_at,omitempty"`
	// NextAction is the policy action the reconciler will take next, and when.
	NextAction   string     `json:"next_action,omitempty"`
	NextActionAt *time.Time `json:"next_action_at,omitempty"`
	// Storage is the usage of the sandbox's workspace volume, if any.
	Storage *Volume `json:"storage,omitempty"`
	// Disk is the cap and usage of the writable root layer.
	Disk    *Disk    `json:"disk,omitempty"`
	Lineage *Lineage `json:"lineage,omitempty"`
	// IPv4 and IPv6 are the sandbox's addresses in network mode egress;
	// a persistent sandbox keeps them across stop/start.
	IPv4        string   `json:"ipv4,omitempty"`
	IPv6        string   `json:"ipv6,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	PublicPorts []int    `json:"public_ports,omitempty"`
	// Secrets are the references its execs get (names, never values).
	Secrets []SecretRef `json:"secrets,omitempty"`
	// LeaseToken, returned by create only, is a bearer credential for this
	// sandbox alone, by id, that dies with it: exec, files (export
	// included), ports, reading the sandbox and its events, and touch.
	LeaseToken string `json:"lease_token,omitempty"`
}

// NetworkRulesRequest is the body of POST /v1/sandboxes/{id}/network:
// rules to add and to remove, effective at once on a running sandbox.
type NetworkRulesRequest struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// NetworkRules is the answer of GET|POST /v1/sandboxes/{id}/network.
type NetworkRules struct {
	Mode  string   `json:"mode"`
	IPv4  string   `json:"ipv4,omitempty"`
	IPv6  string   `json:"ipv6,omitempty"`
	Allow []string `json:"allow"`
}

// Flow is one connection attempt or DNS query of a sandbox.
type Flow struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"` // conn | dns
	Proto    string    `json:"proto"`
	Src      string    `json:"src"`
	Dst      string    `json:"dst"`
	Name     string    `json:"name,omitempty"` // DNS name queried, or the name the address was resolved from
	Decision string    `json:"decision"`       // allow | deny
	Rule     string    `json:"rule,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec and the first
// message of GET /v1/sandboxes/{id}/exec/ws.
type ExecRequest struct {
	Cmd            []string          `json:"cmd"`
	Env            map[string]string `json:"env,omitempty"`
	Workdir        string            `json:"workdir,omitempty"`
	User           string            `json:"user,omitempty"`  // "uid[:gid]" or a name from /etc/passwd
	Stdin          []byte            `json:"stdin,omitempty"` // whole stdin for non-interactive exec (base64 in JSON)
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	TTY            bool              `json:"tty,omitempty"` // ws only
	Rows           uint16            `json:"rows,omitempty"`
	Cols           uint16            `json:"cols,omitempty"`
}

// ExecExit is the final result of an exec.
type ExecExit struct {
	Code      int    `json:"code"`             // exit code; 128+signal when killed
	Signal    string `json:"signal,omitempty"` // e.g. "SIGKILL" when killed by a signal
	TimedOut  bool   `json:"timed_out"`
	OOMKilled bool   `json:"oom_killed"`
	// DurationMS is the wall time of the process.
	DurationMS float64 `json:"duration_ms"`
}

// ExecEvent is one line of the NDJSON stream POST .../exec answers with:
// output events as produced, then exactly one exit (or error) event.
type ExecEvent struct {
	Stream string    `json:"stream,omitempty"` // "stdout" | "stderr"
	Data   []byte    `json:"data,omitempty"`   // base64 in JSON
	Exit   *ExecExit `json:"exit,omitempty"`
	Error  *Error    `json:"error,omitempty"` // the exec could not run or was cut off
}

// WebSocket frames of /exec/ws after the JSON ExecRequest text message:
// binary messages whose first byte is the kind.
const (
	WSStdin    byte = 0 // client -> server: stdin bytes
	WSStdout   byte = 1 // server -> client
	WSStderr   byte = 2 // server -> client
	WSResize   byte = 3 // client -> server: JSON {"rows":R,"cols":C}
	WSExit     byte = 4 // server -> client: JSON ExecExit, then close
	WSStdinEOF byte = 5 // client -> server: stdin closed
	WSError    byte = 6 // server -> client: JSON Error, then close
)

// Resize is the payload of WSResize. A resize reaches the command in order
// with the stdin messages around it.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// RunRequest is the body of POST /v1/run: a one-shot ephemeral job. The
// response is the same NDJSON stream as exec; the sandbox is destroyed when
// the command ends or the client's connection goes away.
type RunRequest struct {
	Sandbox CreateSandboxRequest `json:"sandbox"`
	Exec    ExecRequest          `json:"exec"`
}

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // Go fs.FileMode bits (kept for old clients; see Permissions)
	ModTime time.Time `json:"mod_time"`
	IsDir   bool      `json:"is_dir"`
	Link    string    `json:"link,omitempty"` // symlink target
	// The POSIX view (fileinfo.go): Permissions is the number (0755 is
	// 493), ModeString as ls shows it, Type one of the FileType names;
	// UID and GID as the sandbox sees them (absent from old agents).
	Permissions uint32  `json:"permissions"`
	ModeString  string  `json:"mode_string"`
	Type        string  `json:"type"`
	UID         *uint32 `json:"uid,omitempty"`
	GID         *uint32 `json:"gid,omitempty"`
}

// Template is a template as the API shows it.
type Template struct {
	// Tenant owns the template ("" or absent: the host's shared catalogue,
	// which every tenant sees).
	Tenant    string    `json:"tenant,omitempty"`
	Pool      *Pool     `json:"pool,omitempty"`
	Name      string    `json:"name"`
	Layers    []string  `json:"layers"`
	Source    string    `json:"source"`
	Builtin   bool      `json:"builtin"`
	Size      int64     `json:"size"`
	Env       []string  `json:"env,omitempty"`
	Workdir   string    `json:"workdir,omitempty"`
	CreatedAt time.Time `json:"created_at"`

	// User is the default user of its sandboxes' commands ("" = root).
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// ExposedPorts are the image's ("8080/tcp"); shown, never published.
	ExposedPorts []string `json:"exposed_ports,omitempty"`
	// StopSignal is the image's STOPSIGNAL, sent at stop ("" is SIGTERM).
	StopSignal string `json:"stop_signal,omitempty"`
	// Build is the record of the build that made the template (build,
	// apply, a Dockerfile): its steps and, for steps with a network,
	// their flows (only in GET /v1/templates/{name} and a build's answer;
	// a list gives the counts).
	Build *TemplateBuild `json:"build,omitempty"`
	// Labels are the image's (a Dockerfile's LABEL).
	Labels map[string]string `json:"labels,omitempty"`
}

// TemplateBuild is the record of a template's build.
type TemplateBuild struct {
	Steps []TemplateBuildStep `json:"steps"`
}

// TemplateBuildStep is one step of a build.
type TemplateBuildStep struct {
	Step int    `json:"step"`
	Desc string `json:"desc"`
	// Line is the step's line in its Dockerfile (0: not from one).
	Line   int  `json:"line,omitempty"`
	Cached bool `json:"cached,omitempty"`
	// Network is the step's network mode (none or egress), Allow its
	// egress rules, Sandbox the build sandbox it ran in.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Sandbox string   `json:"sandbox,omitempty"`
	// FlowCount is how many flows the step made (Flows holds the first
	// 256 of them; FlowsDropped the rest).
	FlowCount    int    `json:"flow_count,omitempty"`
	Flows        []Flow `json:"flows,omitempty"`
	FlowsDropped int    `json:"flows_dropped,omitempty"`
}

// ImportTemplateRequest is the body of POST /v1/templates/import. Exactly one
// of Path (a directory holding an OCI layout, or a docker-save tarball, on the
// daemon's host) and Ref (a registry reference) is set. A tarball may also be
// uploaded as the body of PUT /v1/templates/{name}/archive.
type ImportTemplateRequest struct {
	Name     string `json:"name"`
	Path     string `json:"path,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Insecure bool   `json:"insecure,omitempty"` // allow plain-HTTP registries
	// RegistryAuth is a registry account for this pull alone, never
	// stored or shown. Without it the host's pulls use the daemon's
	// credentials (serve --registry-auth) and a tenant's go anonymous.
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
	// Service is a supervised service of the template's sandboxes (processes.go).
	Service *TemplateService `json:"service,omitempty"`
}

// RegistryAuth is a registry account given with one request: Username
// and Password, or Token (a registry bearer token).
type RegistryAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

// BuildTemplateRequest is the body of POST /v1/templates/build.
type BuildTemplateRequest struct {
	Name           string            `json:"name"`
	From           string            `json:"from"`
	Run            []string          `json:"run"` // shell steps, run with /bin/sh -c in order
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"` // per step
	// Service replaces the base template's supervised service (FromImage:
	// the base's entrypoint and cmd); nil keeps the base's.
	Service *TemplateService `json:"service,omitempty"`
	// Network is the steps' network: "none" (default, loopback only) or
	// "egress" with Allow rules, under the egress policy and flow log of
	// any sandbox; the flows are kept in the template's build record.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
}

// Event is a recorded transition or mutating call.
type Event struct {
	ID        int64     `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	Actor     string    `json:"actor,omitempty"`
	Cause     string    `json:"cause,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Outcome   string    `json:"outcome,omitempty"`
	Message   string    `json:"message,omitempty"`
}

// DoctorFinding is one orphan or leak found by GET /v1/doctor.
type DoctorFinding struct {
	Kind   string `json:"kind"`   // mount | cgroup | runtime | dir | process | record
	ID     string `json:"id"`     // the sandbox id it belongs to, if known
	Detail string `json:"detail"` // path or name
	Fixed  bool   `json:"fixed"`
	Error  string `json:"error,omitempty"`
}

// DoctorReport is the answer of GET /v1/doctor and POST /v1/doctor/fix.
type DoctorReport struct {
	Findings []DoctorFinding `json:"findings"`
	Runtime  string          `json:"runtime"`
	Healthy  bool            `json:"healthy"`
	// Leases say which replica runs the background work (docs/kubernetes.md,
	// "Replicas"): this daemon's node lease and the store-wide one.
	Leases []DoctorLease `json:"leases,omitempty"`
}

// DoctorLease is one reconcile lease as the answering daemon sees it.
type DoctorLease struct {
	Name            string `json:"name"`              // node:<node> or store
	Holder          string `json:"holder"`            // the replica holding it, as last read
	Self            string `json:"self"`              // the answering replica
	Held            bool   `json:"held"`              // the answering replica holds it now
	Epoch           int64  `json:"epoch"`             // fencing token: grows with every change of holder
	RemainingMillis int64  `json:"remaining_ms"`      // left of the holder's lease when last read
	Trivial         bool   `json:"trivial,omitempty"` // no other replica can contend
	Error           string `json:"error,omitempty"`
}

// Version is the answer of GET /v1/version.
type Version struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	Runtime string `json:"runtime"`
	// TLSFingerprint is "sha256:<hex>" of the --listen certificate.
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
	// Classes are the runtime classes, the default first, with what each
	// can do on this daemon's backend: a client learns before it asks
	// that, say, pods cannot be paused in place.
	Classes []RuntimeClass `json:"classes,omitempty"`
}

// RuntimeClass is one runtime class a daemon offers and what it can do.
type RuntimeClass struct {
	Name         string      `json:"name"`
	Capabilities RuntimeCaps `json:"capabilities"`
}

// RuntimeCaps says what a runtime class can do; an operation whose
// capability is false is refused (400 or 501) with the reason.
type RuntimeCaps struct {
	// Freeze: pause and quarantine keep processes in memory, frozen.
	Freeze bool `json:"freeze"`
	// Checkpoint: hibernate saves processes and memory to disk.
	Checkpoint bool `json:"checkpoint"`
	// Capture: fork, snapshot, sandboxes from snapshots, restore.
	Capture bool `json:"capture"`
	// RootLayer: persist_root, diff, template builds, an enforced disk cap.
	RootLayer bool `json:"root_layer"`
	// Egress: network mode egress (default deny, rules, flow log).
	Egress bool `json:"egress"`
	// Pool: warm pools.
	Pool bool `json:"pool"`
	// Rename: a running sandbox's host name can change (a named create
	// can be served from a warm pool).
	Rename bool `json:"rename"`
	// Sudo: sandboxes can have sudo (create's sudo).
	Sudo bool `json:"sudo"`
}

// BuildEvent is one line of the NDJSON stream POST /v1/templates/build
// answers with: step output as produced, then one event with Template or Error.
type BuildEvent struct {
	Step     int       `json:"step"` // 1-based index into Run; 0 for set-up
	Stream   string    `json:"stream,omitempty"`
	Data     []byte    `json:"data,omitempty"`
	Template *Template `json:"template,omitempty"`
	Error    *Error    `json:"error,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork. Children start
// as a copy-on-write view of the parent's filesystem (workspace and
// writable root) at the instant of the fork.
type ForkRequest struct {
	Count int `json:"count,omitempty"` // default 1, at most 64
	// Persistent makes the children persistent; by default they are
	// ephemeral and destroyed at the end of their timeout or on delete.
	Persistent     bool              `json:"persistent,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	NamePrefix     string            `json:"name_prefix,omitempty"` // children are named PREFIX-1, PREFIX-2, ...
}

// ForkResponse lists the children made by a fork.
type ForkResponse struct {
	Children []Sandbox `json:"children"`
	// FreezeMS is how long the parent was frozen for the snapshot.
	FreezeMS float64 `json:"freeze_ms"`
}

// Lineage shows where a sandbox comes from and what came from it.
type Lineage struct {
	Parent       string   `json:"parent,omitempty"`        // sandbox it was forked from
	FromSnapshot string   `json:"from_snapshot,omitempty"` // snapshot it was made from
	Children     []string `json:"children,omitempty"`
}

// Snapshot is a named, crash-consistent copy of a sandbox's filesystem
// state (workspace volume and writable root layer).
type Snapshot struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	SandboxID string     `json:"sandbox_id"`
	Template  string     `json:"template"`
	SizeBytes int64      `json:"size_bytes"`
	Parent    string     `json:"parent,omitempty"` // the snapshot the sandbox was made from, if any
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	Name             string  `json:"name,omitempty"`
	RetentionSeconds float64 `json:"retention_seconds,omitempty"` // deleted this long after creation; 0 = kept
}

// ExportRequest is the body of POST /v1/sandboxes/{id}/export: the response
// is a tar stream of exactly the named paths.
type ExportRequest struct {
	Paths []string `json:"paths"`
}

// CopyRequest is the body of POST /v1/copy: copy a path from one sandbox to
// another (or within one) directly, with docker cp's rules (berth cp
// CHILD:/path PARENT:/path; see snapshots.Copy).
type CopyRequest struct {
	From     string `json:"from"`      // sandbox id or name
	FromPath string `json:"from_path"` // file or directory
	To       string `json:"to"`
	ToPath   string `json:"to_path"` // the copy's path, or the directory it goes into when that exists
	// PreserveOwner keeps the source's owners (archive mode); otherwise
	// what the copy creates belongs to the destination sandbox's user.
	PreserveOwner bool `json:"preserve_owner,omitempty"`
}

// PoolRequest is the body of PUT /v1/templates/{name}/pool.
type PoolRequest struct {
	Min int `json:"min"` // ready sandboxes kept for this template; 0 = no pool
	// Auto forgets the size set (min must be 0): the default template's
	// pool is the daemon's automatic one again, any other has none.
	Auto bool `json:"auto,omitempty"`
}

// Pool is a template's warm pool as the API shows it.
type Pool struct {
	// Tenant owns the pool's template ("" or absent: the host's shared
	// catalogue).
	Tenant   string `json:"tenant,omitempty"`
	Template string `json:"template"`
	Min      int    `json:"min"`
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
	Hits     int64  `json:"hits"`
	Misses   int64  `json:"misses"`
	// Reason says why the pool holds fewer than Min (ready and starting),
	// when a refill failed: "tenant quota reached: ...", "host capacity:
	// ...", "error: ...". Absent when the pool is full or filling.
	Reason string `json:"reason,omitempty"`
	// Auto: no size was set for this template and Min is the daemon's
	// automatic warm pool's (the default template, sized from recent
	// demand; berth serve --warm-pool).
	Auto bool `json:"auto,omitempty"`
}

// ApplyRequest is the body of POST /v1/apply: a declarative template.
// The response is an NDJSON stream of BuildEvent (progress, then the
// template or an error).
type ApplyRequest struct {
	// Spec is the template file's content (YAML or JSON).
	Spec string `json:"spec"`
	// Files holds the content of files that copy steps name, by their path
	// in the spec, as a tar archive (base64 in JSON).
	Files []byte `json:"files,omitempty"`
}

// NextCursorHeader is the response header of a paged list route (?limit=,
// ?cursor=) that carries the next page's cursor; the last page has none.
// The body is the page's bare JSON array.
const NextCursorHeader = "Berth-Next-Cursor"

// SandboxUsage is GET /v1/sandboxes/{id}/usage: a running sandbox's
// resource use now, from berth's own accounting. CPUPercent is of its CPU
// limit over the last 200 ms; memory is what its cgroup holds (page cache
// included); disk is its writable root layer (0 when that lives on its
// volume: see the sandbox's storage). A sandbox that is not running has
// no use to measure: State says which state it is in, the figures are 0.
// The daemon keeps no history: the console samples it while a sandbox's
// page is open.
type SandboxUsage struct {
	Time             time.Time `json:"time"`
	State            string    `json:"state"`
	CPUPercent       float64   `json:"cpu_percent"`
	CPUs             float64   `json:"cpus"`
	MemoryBytes      int64     `json:"memory_bytes"`
	MemoryLimitBytes int64     `json:"memory_limit_bytes"`
	DiskBytes        int64     `json:"disk_bytes"`
	DiskLimitBytes   int64     `json:"disk_limit_bytes"`
}
