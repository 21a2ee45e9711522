package wire

import (
	"syscall"
	"time"
)

// The messages of the wire protocol (see the package doc): the request
// header and the JSON payloads of frames. They are the agent's own, not
// the HTTP API's: an agent binary already running in a sandbox speaks
// exactly these bytes, so the API can change without changing them.
// Fields are only ever added, optional, never renamed or retyped
// (wire_test.go pins the encoding of each).

// request is the JSON header line that opens every connection.
type Request struct {
	V         int          `json:"v"`
	Op        string       `json:"op"`
	Path      string       `json:"path,omitempty"`
	Mode      uint32       `json:"mode,omitempty"` // permission bits (fs.FileMode & 0o7777)
	Parents   bool         `json:"parents,omitempty"`
	Recursive bool         `json:"recursive,omitempty"`
	UID       *int         `json:"uid,omitempty"` // owner of created files; nil = the agent's
	GID       *int         `json:"gid,omitempty"`
	Exec      *ExecSpec    `json:"exec,omitempty"`
	Port      int          `json:"port,omitempty"` // dial: loopback port in the sandbox
	Proc      *ProcRequest `json:"proc,omitempty"` // background processes (procs.go)
	// Move (move.go in agentd): Dest is the new path; NoReplace refuses
	// an existing one instead of replacing it by rename(2)'s rules.
	Dest      string `json:"dest,omitempty"`
	NoReplace bool   `json:"no_replace,omitempty"`
	// Owner (mkdir): the directory, made or already there, is then owned
	// by this user ("uid[:gid]" or a name), resolved against the
	// sandbox's own /etc/passwd and /etc/group. Owner (write_file,
	// write_tar): what the write creates is owned by this user (it wins
	// over UID and GID).
	Owner string `json:"owner,omitempty"`
	// PreserveOwner (write_tar): each entry is owned by the archive's
	// uid and gid, as the sandbox sees ids (archive semantics); the
	// directories made on the way are owned as Owner says.
	PreserveOwner bool `json:"preserve_owner,omitempty"`
	// Shutdown: the signal and grace of a graceful stop (shutdown.go).
	Shutdown *ShutdownRequest `json:"shutdown,omitempty"`
	// Xattrs (write_file): extended attributes of the user namespace
	// ("user." names) set on the new file before it replaces the old
	// one, within MaxXattrs and MaxXattrBytes. An agent older than this
	// field ignores it and answers a FileInfo without Xattrs, which the
	// client reads as refused.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Bounds of the user xattrs a write sets and a stat or list reports for
// one file: names and values together (an entry's JSON stays under
// MaxEntryJSON).
const (
	MaxXattrs     = 32
	MaxXattrBytes = 8 << 10
	XattrPrefix   = "user."
)

// ExecSpec is the exec part of a request.
type ExecSpec struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Dir       string   `json:"dir,omitempty"`
	User      string   `json:"user,omitempty"`
	TTY       bool     `json:"tty,omitempty"`
	Rows      uint16   `json:"rows,omitempty"`
	Cols      uint16   `json:"cols,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
}

// PingResult is the result of a ping.
type PingResult struct {
	Version  string `json:"version"`
	PID      int    `json:"pid"`
	UptimeNS int64  `json:"uptime_ns"`
	Boot     string `json:"boot,omitempty"` // ProcListHead.Boot; older agents send none
}

// SignalMsg is the payload of a signal frame.
type SignalMsg struct {
	Signal string `json:"signal"` // "SIGINT" or "INT"
}

// Error is the payload of an error frame.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// DialResult is the result frame of a dial.
type DialResult struct {
	Addr string `json:"addr"`
}

// Exit is the payload of an exit frame: how an exec's process ended.
type Exit struct {
	Code     int    `json:"code"`             // exit code; 128+n when killed by signal n
	Signal   string `json:"signal,omitempty"` // e.g. "SIGKILL" when killed by a signal
	TimedOut bool   `json:"timed_out"`
	// OOMKilled is on the wire (always false) since the first version;
	// the agent cannot know it, the client clears it and the daemon sets
	// it from the cgroup.
	OOMKilled  bool    `json:"oom_killed"`
	DurationMS float64 `json:"duration_ms"` // wall time of the process
}

// FileInfo describes one file: the result of stat, each entry of list,
// and the result of read_file and write_file.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // Go fs.FileMode bits
	ModTime time.Time `json:"mod_time"`
	IsDir   bool      `json:"is_dir"`
	Link    string    `json:"link,omitempty"` // symlink target
	// UID and GID are the owner as the sandbox sees it. They are absent
	// from agents older than them, hence pointers (0 is root).
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// Xattrs are a regular file's or directory's extended attributes of
	// the user namespace (full names, "user.x"), those that fit in
	// MaxXattrs and MaxXattrBytes in name order; absent when it has
	// none, and from agents older than them.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Resize is the payload of a resize frame: the terminal's new size.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// SigRelisten is the signal the daemon sends PID 1 after restoring a
// checkpoint: a quiesced agent listens on its socket again (see agentd's
// hibernate.go for why it is a signal and not an operation).
const SigRelisten = syscall.SIGSTKFLT
