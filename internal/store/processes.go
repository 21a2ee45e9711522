package store

import (
	"context"
	"time"
)

// SupervisedProcess is a sandbox's background process with a restart
// policy, recorded so that the engine starts it again at every boot of
// the sandbox's agent (internal/engine/procs). Spec is the request as
// given; its Env is the request's own (stored as a sandbox's Spec.Env
// is), never a secret's value: secrets are the sandbox's references,
// resolved at each start.
type SupervisedProcess struct {
	SandboxID string
	// Key names the record within its sandbox for ever: the API id of
	// the process's first run.
	Key  string
	Spec ProcessSpec
	// Boot and AgentID are the run of the agent's current boot: the
	// agent's boot id and its process number ("" until started).
	Boot      string
	AgentID   string
	CreatedAt time.Time
}

// ProcessSpec is what a supervised process runs, and how.
type ProcessSpec struct {
	Cmd         []string          `json:"cmd"`
	Env         map[string]string `json:"env,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	User        string            `json:"user,omitempty"`
	TTY         bool              `json:"tty,omitempty"`
	Rows        uint16            `json:"rows,omitempty"`
	Cols        uint16            `json:"cols,omitempty"`
	Tag         string            `json:"tag,omitempty"`
	Restart     string            `json:"restart"`
	MaxRestarts int               `json:"max_restarts,omitempty"`
	// ReadyPort, when set, is a TCP port the process listens on: its
	// start, and a port request that wakes the sandbox, wait (at most
	// ServiceReadyWait, the daemon's bound) until it accepts.
	ReadyPort int `json:"ready_port,omitempty"`
}

// MaxSupervised caps the supervised processes recorded per sandbox (the
// agent runs at most as many background processes at once).
const MaxSupervised = 32

// Processes are the sandboxes' supervised processes.
type Processes interface {
	// PutProcess inserts p or replaces the record of (p.SandboxID,
	// p.Key).
	PutProcess(ctx context.Context, p *SupervisedProcess) error
	// ListProcesses returns sandbox id's records, oldest first.
	ListProcesses(ctx context.Context, sandboxID string) ([]*SupervisedProcess, error)
	// DeleteProcess removes the record of (sandboxID, key); one that is
	// not there is not an error. A sandbox's records also go when its
	// record becomes deleted (UpdateSandbox) and when it is purged.
	DeleteProcess(ctx context.Context, sandboxID, key string) error
}
