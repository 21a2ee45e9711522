package store

import (
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// ServiceSpec is a template's supervised service: a command berth runs in
// every sandbox of the template when it becomes running (create, start,
// wake, auto-resume), as the background process tagged ServiceTag,
// restarted by Restart when it ends.
type ServiceSpec struct {
	Cmd []string `json:"cmd"`
	// Restart is "always", "on-failure" or "never"; "" is on-failure.
	Restart string `json:"restart,omitempty"`
	// MaxRestarts caps the restarts of one run of the sandbox; 0 is 10.
	MaxRestarts int               `json:"max_restarts,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Dir         string            `json:"dir,omitempty"`
	User        string            `json:"user,omitempty"`
	// ReadyPort, when set, is a TCP port the service listens on: create
	// returns once it accepts a connection, or after ServiceReadyWait
	// (the daemon's bound; the sandbox cannot lengthen it).
	ReadyPort int `json:"ready_port,omitempty"`
}

// ServiceReadyWait bounds how long a create waits for a service's
// ReadyPort.
const ServiceReadyWait = 30 * time.Second

// ServiceTag is the tag of a template's service among the sandbox's
// background processes.
const ServiceTag = "service"

// Service restart policies.
const (
	RestartAlways    = "always"
	RestartOnFailure = "on-failure"
	RestartNever     = "never"
)

// Validate checks a service spec.
func (s *ServiceSpec) Validate() error {
	if len(s.Cmd) == 0 || s.Cmd[0] == "" {
		return errdefs.Invalid("service: cmd is required")
	}
	if len(s.Cmd) > 4096 {
		return errdefs.Invalid("service: at most 4096 arguments")
	}
	n := 0
	for _, a := range s.Cmd {
		n += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("service: arguments must not contain NUL bytes")
		}
	}
	if n > 256<<10 {
		return errdefs.TooLarge("service: arguments exceed 256 KiB")
	}
	switch s.Restart {
	case "", RestartAlways, RestartOnFailure, RestartNever:
	default:
		return errdefs.Invalid("service: restart %q: want always, on-failure or never", s.Restart)
	}
	if s.MaxRestarts < 0 || s.MaxRestarts > 1000 {
		return errdefs.Invalid("service: max_restarts must be 0..1000")
	}
	if s.ReadyPort < 0 || s.ReadyPort > 65535 {
		return errdefs.Invalid("service: ready_port must be 1..65535")
	}
	if s.Dir != "" && !strings.HasPrefix(s.Dir, "/") {
		return errdefs.Invalid("service: dir must be an absolute path")
	}
	if len(s.Env) > 1024 {
		return errdefs.Invalid("service: at most 1024 env variables")
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return errdefs.Invalid("service: bad env variable %q", k)
		}
	}
	if strings.IndexByte(s.User, 0) >= 0 || strings.IndexByte(s.Dir, 0) >= 0 {
		return errdefs.Invalid("service: NUL byte in user or dir")
	}
	return nil
}

// Command is the image's command: Entrypoint followed by Cmd (records
// from before Entrypoint was kept hold the whole command in Cmd).
func (c TemplateConfig) Command() []string {
	return append(append([]string{}, c.Entrypoint...), c.Cmd...)
}
