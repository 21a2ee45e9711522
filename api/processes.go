package api

import "time"

// Background processes: /v1/sandboxes/{id}/processes. A process started
// there outlives the client that started it; its output is kept (the last
// MiB) for later reads, its exit too, and it ends with its sandbox's stop
// (state "stopped") or delete.

// StartProcessRequest is the body of POST /v1/sandboxes/{id}/processes:
// an exec request with a tag and a restart policy. Its exec fields are
// ExecRequest's own (one definition), but stdin and timeout_seconds: a
// background process takes its stdin through its stdin call and has no
// timeout, and a start that gives either is refused (400).
type StartProcessRequest struct {
	ExecRequest
	// Tag names the process, unique among the sandbox's running ones: a
	// letter, then letters, digits, '_', '.', '-'.
	Tag string `json:"tag,omitempty"`
	// Restart is never (default), always or on-failure; MaxRestarts caps
	// the restarts (0: 10).
	// A process with a restart policy is supervised: recorded with its
	// sandbox, it is started again at every boot (start after stop, wake,
	// restart after a host reboot) until it is killed (berth kill).
	Restart     string `json:"restart,omitempty"`
	MaxRestarts int    `json:"max_restarts,omitempty"`
	// ReadyPort, when set, is a TCP port the process listens on: the
	// start answers once it accepts (at most 30 s, the daemon's bound),
	// and, for a supervised process, so does a port request that wakes
	// its auto_resume sandbox.
	ReadyPort int `json:"ready_port,omitempty"`
}

// Process describes a background process.
type Process struct {
	ID      string    `json:"id"`
	Tag     string    `json:"tag,omitempty"`
	Argv    []string  `json:"argv"`
	TTY     bool      `json:"tty,omitempty"`
	PID     int       `json:"pid,omitempty"` // in the sandbox, while running
	Started time.Time `json:"started"`
	// State is running, restarting, exited, killed (by a signal), stopped
	// (ended by the sandbox's stop), paused or hibernated (with the
	// sandbox).
	State    string    `json:"state"`
	Exit     *ExecExit `json:"exit,omitempty"`
	Restart  string    `json:"restart,omitempty"`
	Restarts int       `json:"restarts,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessEvent is one line of the NDJSON stream of GET .../logs: the kept
// output, then (with follow) live output, then an exit event if the
// process has ended. Gap counts output bytes dropped before they were
// read.
type ProcessEvent struct {
	Stream string    `json:"stream,omitempty"`
	Data   []byte    `json:"data,omitempty"`
	Gap    int64     `json:"gap,omitempty"`
	Exit   *ExecExit `json:"exit,omitempty"`
	Error  *Error    `json:"error,omitempty"`
}

// TemplateService names a template's supervised service at import: Cmd,
// or with FromImage the image's entrypoint and cmd; Restart is always,
// on-failure (default) or never.
type TemplateService struct {
	Cmd         []string `json:"cmd,omitempty"`
	FromImage   bool     `json:"from_image,omitempty"`
	Restart     string   `json:"restart,omitempty"`
	MaxRestarts int      `json:"max_restarts,omitempty"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // "TERM" or "SIGTERM"; "" is SIGTERM
}
