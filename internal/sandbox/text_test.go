package sandbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

func validSpec() sandbox.Spec {
	return sandbox.Spec{Resources: sandbox.DefaultResources, Template: "base", Workdir: "/w"}
}

func TestResourceBounds(t *testing.T) {
	for _, tc := range []struct {
		r   sandbox.Resources
		msg string
	}{
		{sandbox.Resources{CPUs: 1e-5, MemoryBytes: 64 << 20, Pids: 64}, "at least 0.01"},
		{sandbox.Resources{CPUs: 0.0099, MemoryBytes: 64 << 20, Pids: 64}, "at least 0.01"},
		{sandbox.Resources{CPUs: 1e-9, MemoryBytes: 64 << 20, Pids: 64}, "at least 0.01"},
		{sandbox.Resources{CPUs: 0.01, MemoryBytes: 64 << 20, Pids: 64}, ""},
		{sandbox.Resources{CPUs: 64, MemoryBytes: 64 << 20, Pids: 64}, ""},
		{sandbox.Resources{CPUs: 64.5, MemoryBytes: 64 << 20, Pids: 64}, "cpus must be in"},
		{sandbox.Resources{CPUs: 1, MemoryBytes: 16<<20 - 1, Pids: 64}, "memory must be between 16 MiB"},
		{sandbox.Resources{CPUs: 1, MemoryBytes: 64 << 20, Pids: 7}, "pids must be at least 8"},
	} {
		sp := validSpec()
		sp.Resources = tc.r
		err := sp.Validate()
		if tc.msg == "" && err != nil || tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.msg)
		}
	}
	sandbox.SetHostPidMax(32768)
	defer sandbox.SetHostPidMax(0)
	sp := validSpec()
	sp.Resources.Pids = 32769
	if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), "kernel.pid_max") {
		t.Errorf("pids over pid_max: %v", err)
	}
	sp.Resources.Pids = 32768
	if err := sp.Validate(); err != nil {
		t.Errorf("pids at pid_max: %v", err)
	}
}

func TestTextRefused(t *testing.T) {
	for name, mut := range map[string]func(*sandbox.Spec){
		"env NUL":       func(s *sandbox.Spec) { s.Env = map[string]string{"A": "a\x00"} },
		"env ESC":       func(s *sandbox.Spec) { s.Env = map[string]string{"A": "\x1b[2J"} },
		"workdir NUL":   func(s *sandbox.Spec) { s.Workdir = "/a\x00b" },
		"workdir LF":    func(s *sandbox.Spec) { s.Workdir = "/a\nb" },
		"label DEL":     func(s *sandbox.Spec) { s.Labels = map[string]string{"k": "\x7f"} },
		"label C1":      func(s *sandbox.Spec) { s.Labels = map[string]string{"k": "a\u009bb"} },
		"template":      func(s *sandbox.Spec) { s.Template = "b\x00" },
		"allow":         func(s *sandbox.Spec) { s.Network, s.Allow = "egress", []string{"a.com\r"} },
		"volume path":   func(s *sandbox.Spec) { s.Volumes = []sandbox.VolumeMount{{Name: "v", Path: "/x\x00"}} },
		"relative path": func(s *sandbox.Spec) { s.Workdir = "tmp" },
	} {
		sp := validSpec()
		mut(&sp)
		if err := sp.Validate(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	sp := validSpec()
	sp.Env = map[string]string{"PEM": "-----BEGIN-----\r\nAAA\tB\n-----END-----\n", "U": "ünïcode"}
	if err := sp.Validate(); err != nil {
		t.Errorf("multi-line env refused: %v", err)
	}
}

// FuzzResources: every accepted CPU limit is one the runtime expresses as
// a quota the kernel enforces (>= 1 ms per period), and never "no limit".
func FuzzResources(f *testing.F) {
	for _, c := range []float64{1e-9, 1e-5, 0.0099, 0.01, 0.010000001, 0.5, 1, 63.99999, 64, 64.0000001} {
		f.Add(c, int64(64<<20), int64(64))
	}
	f.Fuzz(func(t *testing.T, cpus float64, mem, pids int64) {
		sp := validSpec()
		sp.Resources = sandbox.Resources{CPUs: cpus, MemoryBytes: mem, Pids: pids}
		if sp.Validate() != nil {
			return
		}
		oci, err := runtime.BuildSpec(&runtime.Spec{Resources: sp.Resources, Rootfs: "/r",
			IDMap: runtime.IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536}})
		if err != nil {
			t.Fatalf("accepted %+v, BuildSpec: %v", sp.Resources, err)
		}
		q := *oci.Linux.Resources.CPU.Quota
		if q < sandbox.MinCPUQuota || q > sandbox.MaxCPUs*sandbox.CPUPeriod || *oci.Linux.Resources.CPU.Period != sandbox.CPUPeriod {
			t.Fatalf("accepted cpus %g: quota %d", cpus, q)
		}
	})
}

// FuzzCheckText: accepted text has no control character.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"", "a", "a\x00", "\u0085", "é", "\xc2", "a\tb", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sandbox.CheckText("f", s) == nil {
			for _, r := range s {
				if r < 0x20 || r >= 0x7f && r <= 0x9f {
					t.Fatalf("accepted %q", s)
				}
			}
		}
		if sandbox.CheckEnvValue("k", s) == nil && strings.ContainsRune(s, 0) {
			t.Fatalf("env accepted NUL in %q", s)
		}
	})
}

// Every count and size limit of a request's text refuses past its value
// with limit_exceeded naming it (docs/limits.md), and takes the value
// itself.
func TestLimitsNamed(t *testing.T) {
	many := func(n int, val string) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("K_%d", i)] = val
		}
		return m
	}
	rules := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)
		}
		return out
	}
	for _, tc := range []struct {
		limit    string
		at, past func() error
	}{
		{"max_env", func() error { return sandbox.CheckEnv(many(sandbox.MaxEnv, "v")) },
			func() error { return sandbox.CheckEnv(many(sandbox.MaxEnv+1, "v")) }},
		{"env_value_bytes", func() error { return sandbox.CheckEnv(many(1, strings.Repeat("v", sandbox.MaxEnvValueBytes))) },
			func() error { return sandbox.CheckEnv(many(1, strings.Repeat("v", sandbox.MaxEnvValueBytes+1))) }},
		{"max_labels", func() error { return sandbox.CheckLabels(many(sandbox.MaxLabels, "v")) },
			func() error { return sandbox.CheckLabels(many(sandbox.MaxLabels+1, "v")) }},
		{"label_value_bytes", func() error { return sandbox.CheckLabels(many(1, strings.Repeat("v", sandbox.MaxLabelValueBytes))) },
			func() error { return sandbox.CheckLabels(many(1, strings.Repeat("v", sandbox.MaxLabelValueBytes+1))) }},
		{"max_allow_rules", func() error { return sandbox.CheckAllow(rules(sandbox.MaxAllowRules)) },
			func() error { return sandbox.CheckAllow(rules(sandbox.MaxAllowRules + 1)) }},
	} {
		if err := tc.at(); err != nil {
			t.Errorf("%s: at the limit: %v", tc.limit, err)
		}
		err := tc.past()
		if !errors.Is(err, errdefs.ErrLimit) || errdefs.LimitName(err) != tc.limit ||
			!strings.Contains(errdefs.Message(err), "limit "+tc.limit+" is ") {
			t.Errorf("%s: past the limit: %v (limit %q)", tc.limit, err, errdefs.LimitName(err))
		}
	}
}
