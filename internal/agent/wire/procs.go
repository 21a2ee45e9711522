package wire

import "time"

// Background processes (see the package doc, "Background processes"):
// their operations, the frame only an attach sends, and their messages.
const (
	OpProcStart  = "proc_start"  // start a background process → result ProcInfo
	OpProcList   = "proc_list"   // → result ProcListHead, result ProcInfo × count, end
	OpProcAttach = "proc_attach" // → replay of the output ring, then live output; exit or end
	OpProcStdin  = "proc_stdin"  // ← stdin*, then stdin-eof or end; → end
	OpProcSignal = "proc_signal" // → end
	OpProcWait   = "proc_wait"   // → exit, once the process has ended for good
)

// FrameGap (agent→client, attach only): output was dropped from the ring
// before this attacher read it; JSON Gap.
const FrameGap FrameType = 12

// Process states of ProcInfo.State.
const (
	ProcRunning    = "running"
	ProcRestarting = "restarting" // supervised, waiting out its backoff
	ProcExited     = "exited"     // ended by its own exit
	ProcKilled     = "killed"     // ended by a signal
)

// Restart policies of a supervised process.
const (
	RestartNever     = "never"
	RestartAlways    = "always"
	RestartOnFailure = "on-failure"
)

// Caps of the agent's process table and of what the client accepts.
const (
	MaxProcs      = 32      // processes running (or restarting) at once
	MaxProcExits  = 32      // ended processes kept for later reads; oldest dropped first
	ProcRingBytes = 1 << 20 // output kept per process, oldest dropped first
	MaxTagBytes   = 64
	MaxRestarts   = 1000     // cap of ProcRequest.MaxRestarts
	MaxProcInfo   = 64 << 10 // one ProcInfo as JSON
	ProcInfoArgs  = 64       // argv entries a ProcInfo carries at most
	ProcInfoArg   = 512      // bytes of each
)

// ProcRequest is the process part of a request header: which process (ID,
// an id or a tag) and what to do.
type ProcRequest struct {
	ID string `json:"id,omitempty"` // attach, stdin, signal, wait: an id or a tag
	// start:
	Tag         string `json:"tag,omitempty"`
	Restart     string `json:"restart,omitempty"`      // never (""), always, on-failure
	MaxRestarts int    `json:"max_restarts,omitempty"` // 0: 10
	// attach: keep streaming live output after the replay until the
	// process ends (otherwise the replay ends with exit, or end if it runs).
	Follow bool `json:"follow,omitempty"`
	// signal:
	Signal string `json:"signal,omitempty"`
	Stop   bool   `json:"stop,omitempty"` // no restart after this signal
}

// ProcInfo describes a background process. Argv is cut to ProcInfoArgs
// entries of ProcInfoArg bytes.
type ProcInfo struct {
	ID       string    `json:"id"`
	Tag      string    `json:"tag,omitempty"`
	Argv     []string  `json:"argv"`
	TTY      bool      `json:"tty,omitempty"`
	PID      int       `json:"pid,omitempty"` // of the current run, while running
	Started  time.Time `json:"started"`
	State    string    `json:"state"`
	Exit     *Exit     `json:"exit,omitempty"` // of the last run
	Restart  string    `json:"restart,omitempty"`
	Restarts int       `json:"restarts,omitempty"`
}

// ProcListHead opens a proc_list answer. Boot identifies the agent's
// lifetime: process ids are unique within one boot.
type ProcListHead struct {
	Boot  string `json:"boot"`
	Count int    `json:"count"`
}

// Gap is the payload of a gap frame.
type Gap struct {
	Skipped int64 `json:"skipped"` // bytes of output lost to this attacher
}
