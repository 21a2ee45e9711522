package input

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Validate checks the fields of a decoded request body that the
// edge can judge alone: no control characters in names, paths, env,
// labels, users and rules, and numbers within what the kernel and the
// store accept. What needs a template or the host's state (defaults
// merged, volumes resolved) is the spec's own validation
// (sandbox.Spec.Validate), which the engine runs before any side effect.
//
// An exec or a process start is checked by the engine's own Validate of
// the request as the engine takes it (engine.ExecRequest.Validate,
// procs.StartRequest.Validate), after the one conversion (ExecRequest,
// StartRequest): the same rules the E2B door calls, and the engine
// meets again, so no door can accept what another refuses.
func Validate(v any) error {
	switch req := v.(type) {
	case *api.CreateSandboxRequest:
		return validateCreate(req)
	case *api.RunRequest:
		if err := validateCreate(&req.Sandbox); err != nil {
			return err
		}
		return validateExec(&req.Exec, false) // its command may be the template's
	case *api.ExecRequest:
		return validateExec(req, true)
	case *api.StartProcessRequest:
		// The wire's own field first: a timeout below a nanosecond
		// would convert to none.
		if req.TimeoutSeconds != 0 {
			return errdefs.Invalid("a background process has no timeout; kill it")
		}
		return StartRequest(req).Validate()
	case *api.ForkRequest:
		if req.Count < 0 || req.Count > snapshots.MaxForkCount {
			return errdefs.Invalid("count must be between 1 and %d", snapshots.MaxForkCount)
		}
		if err := checkSeconds("timeout_seconds", req.TimeoutSeconds); err != nil {
			return err
		}
		if err := sandbox.CheckText("name_prefix", req.NamePrefix); err != nil {
			return err
		}
		if err := sandbox.CheckEnv(req.Env); err != nil {
			return err
		}
		return sandbox.CheckLabels(req.Labels)
	case *api.CreateSnapshotRequest:
		if err := checkSeconds("retention_seconds", req.RetentionSeconds); err != nil {
			return err
		}
		return sandbox.CheckText("snapshot name", req.Name)
	case *api.ExportRequest:
		for _, p := range req.Paths {
			if err := sandbox.CheckPath("export path", p); err != nil {
				return err
			}
		}
	case *api.CopyRequest:
		for _, f := range [][2]string{{"from", req.From}, {"to", req.To}} {
			if err := sandbox.CheckText(f[0], f[1]); err != nil {
				return err
			}
		}
		for _, f := range [][2]string{{"from_path", req.FromPath}, {"to_path", req.ToPath}} {
			if err := sandbox.CheckPath(f[0], f[1]); err != nil {
				return err
			}
		}
	case *api.CreateVolumeRequest:
		if req.SizeBytes < 0 || req.Inodes < 0 {
			return errdefs.Invalid("volume size_bytes and inodes must not be negative")
		}
		return sandbox.CheckText("volume name", req.Name)
	case *api.PoolRequest:
		if req.Min < 0 {
			return errdefs.Invalid("pool min must not be negative")
		}
	case *api.NetworkRulesRequest:
		for _, a := range append(append([]string(nil), req.Allow...), req.Deny...) {
			if err := sandbox.CheckText("network rule", a); err != nil {
				return err
			}
		}
	case *api.ImportTemplateRequest:
		for _, f := range [][2]string{{"template name", req.Name}, {"path", req.Path}, {"ref", req.Ref}} {
			if err := sandbox.CheckText(f[0], f[1]); err != nil {
				return err
			}
		}
	case *api.BuildTemplateRequest:
		for _, f := range [][2]string{{"template name", req.Name}, {"from", req.From}} {
			if err := sandbox.CheckText(f[0], f[1]); err != nil {
				return err
			}
		}
		for i, step := range req.Run {
			if strings.IndexByte(step, 0) >= 0 {
				return errdefs.Invalid("run step %d contains a NUL byte", i+1)
			}
		}
		if err := checkSeconds("timeout_seconds", req.TimeoutSeconds); err != nil {
			return err
		}
		if err := sandbox.CheckText("network", req.Network); err != nil {
			return err
		}
		for _, a := range req.Allow {
			if err := sandbox.CheckText("allow rule", a); err != nil {
				return err
			}
		}
		return sandbox.CheckEnv(req.Env)
	case *api.ApplyRequest:
		if strings.IndexByte(req.Spec, 0) >= 0 {
			return errdefs.Invalid("the spec contains a NUL byte")
		}
	}
	return nil
}

// checkSeconds refuses a duration in seconds that is negative or past the
// longest the store keeps (a float that large would overflow a Duration).
func checkSeconds(name string, v float64) error {
	if !(v >= 0 && v <= sandbox.MaxTimeout.Seconds()) {
		return errdefs.Invalid("%s must be between 0 and %g", name, sandbox.MaxTimeout.Seconds())
	}
	return nil
}

// validateCreate checks a create request's own fields; the merged spec is
// checked again by sandbox.Spec.Validate.
func validateCreate(req *api.CreateSandboxRequest) error {
	if err := checkSecretRefs(req.Secrets); err != nil {
		return err
	}
	for _, f := range [][2]string{{"name", req.Name}, {"template", req.Template}, {"runtime", req.Runtime},
		{"network", req.Network}, {"snapshot", req.Snapshot}, {"on_idle", req.OnIdle}, {"on_max_age", req.OnMaxAge}} {
		if err := sandbox.CheckText(f[0], f[1]); err != nil {
			return err
		}
	}
	res := req.Resources
	if res.CPUs != 0 && (res.CPUs < sandbox.MinCPUs || sandbox.CPUQuota(res.CPUs) < sandbox.MinCPUQuota) {
		return errdefs.Invalid("cpus must be at least %g (the kernel's CFS quota minimum is 1 ms per 100 ms period), got %g",
			sandbox.MinCPUs, res.CPUs)
	}
	if res.CPUs > sandbox.MaxCPUs {
		return errdefs.Invalid("cpus must be at most %d, got %g", sandbox.MaxCPUs, res.CPUs)
	}
	if res.MemoryBytes != 0 && (res.MemoryBytes < sandbox.MinMemoryBytes || res.MemoryBytes > sandbox.MaxMemoryBytes) {
		return errdefs.Invalid("memory_bytes must be between %d MiB and %d GiB, got %d",
			sandbox.MinMemoryBytes>>20, sandbox.MaxMemoryBytes>>30, res.MemoryBytes)
	}
	if res.Pids != 0 && (res.Pids < sandbox.MinPids || res.Pids > sandbox.MaxPidsHere()) {
		return errdefs.Invalid("pids must be between %d and %d, got %d", sandbox.MinPids, sandbox.MaxPidsHere(), res.Pids)
	}
	if req.VolumeSizeBytes < 0 || req.VolumeInodes < 0 {
		return errdefs.Invalid("volume_size_bytes and volume_inodes must not be negative")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"timeout_seconds", req.TimeoutSeconds}, {"idle_timeout_seconds", req.IdleTimeoutSeconds},
		{"max_age_seconds", req.MaxAgeSeconds}, {"retention_seconds", req.RetentionSeconds}} {
		if err := checkSeconds(f.name, f.v); err != nil {
			return err
		}
	}
	if err := sandbox.CheckEnv(req.Env); err != nil {
		return err
	}
	if err := sandbox.CheckLabels(req.Labels); err != nil {
		return err
	}
	if req.Workdir != "" {
		if err := sandbox.CheckPath("workdir", req.Workdir); err != nil {
			return err
		}
	}
	if err := sandbox.CheckText("user", req.User); err != nil {
		return err
	}
	for _, vm := range req.Volumes {
		if err := sandbox.CheckText("volume name", vm.Name); err != nil {
			return err
		}
		if err := sandbox.CheckText("volume "+vm.Name+" path", vm.Path); err != nil {
			return err
		}
	}
	for _, a := range req.Allow {
		if err := sandbox.CheckText("allow rule", a); err != nil {
			return err
		}
	}
	return nil
}

// validateExec checks an exec request at the edge, before anything
// starts (a run's sandbox, a WebSocket's stream): the wire's own field
// (timeout_seconds, a number of seconds) here, every other rule the
// engine's (engine.ExecRequest.Validate), which it meets again on every
// door.
func validateExec(req *api.ExecRequest, needCmd bool) error {
	if err := checkSeconds("timeout_seconds", req.TimeoutSeconds); err != nil {
		return err
	}
	e := ExecRequest(req)
	if needCmd {
		return e.Validate()
	}
	return e.CheckFields()
}

// CheckPathValues refuses control characters in the {id} and {name} path
// values a route matched, before they reach a lookup or a log line.
func CheckPathValues(r *http.Request) error {
	for _, k := range []string{"id", "name"} {
		if err := sandbox.CheckText(k, r.PathValue(k)); err != nil {
			return err
		}
	}
	return nil
}

// ExecRequest is req as the engine takes it: the one conversion, which the
// server's handlers and the edge's check both use.
func ExecRequest(r *api.ExecRequest) *engine.ExecRequest {
	return &engine.ExecRequest{Cmd: r.Cmd, Env: r.Env, Workdir: r.Workdir, User: r.User, Stdin: r.Stdin,
		Timeout: TimeoutSeconds(r.TimeoutSeconds), TTY: r.TTY, Rows: r.Rows, Cols: r.Cols}
}

// StartRequest is a process start as the engine takes it: the one
// conversion, which the handler and the edge's check both use.
func StartRequest(r *api.StartProcessRequest) *procs.StartRequest {
	return &procs.StartRequest{ExecRequest: *ExecRequest(&r.ExecRequest), Tag: r.Tag, Restart: r.Restart,
		MaxRestarts: r.MaxRestarts, ReadyPort: r.ReadyPort}
}

// TimeoutSeconds converts a timeout in seconds as the engine always has: a
// value below a nanosecond is no timeout.
func TimeoutSeconds(v float64) time.Duration {
	d := v * float64(time.Second)
	switch {
	case math.IsNaN(d) || d >= math.MaxInt64:
		return math.MaxInt64
	case d <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(d)
}
