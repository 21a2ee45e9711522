package sandbox

import (
	"math"
	"sync/atomic"

	"github.com/berth-sh/berth/internal/errdefs"
)

// CPUPeriod is the CFS period, in µs, the runtime expresses a CPU quota in
// (internal/runtime's cpuPeriod): quota = cpus × CPUPeriod, truncated.
const CPUPeriod = 100000

// MinCPUQuota is the kernel's floor for cpu.max / cfs_quota_us (1 ms):
// a smaller quota is refused by the cgroup write, and a quota that
// truncates to 0 would mean no limit at all.
const MinCPUQuota = 1000

// MinCPUs is the smallest CPU limit the kernel can enforce: 1 ms of CPU per
// 100 ms period.
const MinCPUs = float64(MinCPUQuota) / CPUPeriod

// CPUQuota is the CFS quota, in µs per CPUPeriod, of a cpus limit.
func CPUQuota(cpus float64) int64 { return int64(cpus * CPUPeriod) }

// hostPidMax is the host's kernel.pid_max, when the daemon has read it: a
// pids limit above it limits nothing.
var hostPidMax atomic.Int64

// SetHostPidMax records the host's kernel.pid_max (0: unknown), which
// Validate then enforces as the largest pids limit.
func SetHostPidMax(n int64) { hostPidMax.Store(n) }

// MaxPidsHere is the largest pids limit Validate accepts on this host.
func MaxPidsHere() int64 {
	if n := hostPidMax.Load(); n > 0 && n < MaxPids {
		return n
	}
	return MaxPids
}

// validateResources checks r against what the kernel accepts, naming the
// bound that was crossed.
func validateResources(r Resources) error {
	switch {
	case math.IsNaN(r.CPUs) || r.CPUs <= 0 || r.CPUs > MaxCPUs:
		return errdefs.Invalid("cpus must be in [%g, %d], got %g", MinCPUs, MaxCPUs, r.CPUs)
	case CPUQuota(r.CPUs) < MinCPUQuota:
		return errdefs.Invalid("cpus must be at least %g (the kernel's CFS quota minimum is 1 ms per 100 ms period), got %g",
			MinCPUs, r.CPUs)
	case r.MemoryBytes < MinMemoryBytes || r.MemoryBytes > MaxMemoryBytes:
		return errdefs.Invalid("memory must be between %d MiB and %d GiB, got %d bytes",
			MinMemoryBytes>>20, MaxMemoryBytes>>30, r.MemoryBytes)
	case r.Pids < MinPids:
		return errdefs.Invalid("pids must be at least %d, got %d", MinPids, r.Pids)
	case r.Pids > MaxPidsHere():
		if MaxPidsHere() < MaxPids {
			return errdefs.Invalid("pids must be at most %d (the host's kernel.pid_max), got %d", MaxPidsHere(), r.Pids)
		}
		return errdefs.Invalid("pids must be at most %d, got %d", MaxPids, r.Pids)
	}
	return nil
}

// controlAt returns the index of the first control character in s — a C0
// byte (NUL, newline, escape, ...), DEL, or a C1 control encoded in UTF-8
// (U+0080..U+009F) — and, if allowWS, lets tab, newline and carriage
// return pass. -1: none.
func controlAt(s string, allowWS bool) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\t' || c == '\n' || c == '\r':
			if !allowWS {
				return i
			}
		case c < 0x20 || c == 0x7f:
			return i
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f:
			return i
		}
	}
	return -1
}

// CheckText refuses a NUL or any other control character in a name,
// path, label, user, rule or other one-line field: they break exec
// (execve refuses NUL), forge log and table lines, or drive terminals.
func CheckText(field, v string) error {
	if i := controlAt(v, false); i >= 0 {
		return errdefs.Invalid("%s must not contain control characters (byte 0x%02x at offset %d)", field, v[i], i)
	}
	return nil
}

// CheckEnvValue is CheckText for an environment value, where tab and
// newlines are legitimate (a PEM key, a multi-line setting) and the rest,
// NUL first, is not.
func CheckEnvValue(key, v string) error {
	if i := controlAt(v, true); i >= 0 {
		return errdefs.Invalid("env %s: value must not contain NUL or control characters (byte 0x%02x at offset %d)", key, v[i], i)
	}
	return nil
}

// CheckPath checks an absolute path inside a sandbox: absolute, no
// control characters.
func CheckPath(field, p string) error {
	if p == "" || p[0] != '/' {
		return errdefs.Invalid("%s must be an absolute path", field)
	}
	return CheckText(field, p)
}

// MaxFilePathBytes bounds the path of a file request (PATH_MAX).
const MaxFilePathBytes = 4096

// CheckFilePath checks the path a file request names (REST's file routes
// and the E2B door's filesystem): given, at most MaxFilePathBytes, no
// control characters. Relative paths are the door's to resolve.
func CheckFilePath(field, p string) error {
	if p == "" {
		return errdefs.Invalid("%s is required", field)
	}
	if len(p) > MaxFilePathBytes {
		return errdefs.Invalid("%s longer than %d bytes", field, MaxFilePathBytes)
	}
	return CheckText(field, p)
}

// CheckEnv checks an environment map given to a create, fork or exec.
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return errdefs.Limit("max_env", MaxEnv, "%d env variables given", len(env))
	}
	for k, v := range env {
		if !validEnvKey(k) {
			return errdefs.Invalid("bad env name %q: use letters, digits and _, not starting with a digit", k)
		}
		if len(v) > MaxEnvValueBytes {
			return errdefs.Limit("env_value_bytes", MaxEnvValueBytes, "env %s: value of %d bytes", k, len(v))
		}
		if err := CheckEnvValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// CheckLabels checks a label map.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return errdefs.Limit("max_labels", MaxLabels, "%d labels given", len(labels))
	}
	for k, v := range labels {
		if !validLabelKey(k) {
			return errdefs.Invalid("bad label key %q (1-63 letters, digits and _./-)", k)
		}
		if len(v) > MaxLabelValueBytes {
			return errdefs.Limit("label_value_bytes", MaxLabelValueBytes, "label %s: value of %d bytes", k, len(v))
		}
		if err := CheckText("label "+k, v); err != nil {
			return err
		}
	}
	return nil
}

// CheckAllow checks the count and text of egress allow rules; package
// network/egressrule parses them (egressrule.Check), counting each port of
// a rule against MaxAllowRules too.
func CheckAllow(allow []string) error {
	if len(allow) > MaxAllowRules {
		return errdefs.Limit("max_allow_rules", MaxAllowRules, "%d allow rules given", len(allow))
	}
	for _, a := range allow {
		if err := CheckText("allow rule", a); err != nil {
			return err
		}
	}
	return nil
}
