package runtime

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/sandbox"
)

func testSpec() *Spec {
	return &Spec{
		ID: "t", Bundle: "/b", Rootfs: "/r", Hostname: "h", Args: []string{"/init"},
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 256 << 20, Pids: 64},
		IDMap:     IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536},
		Mounts:    []Mount{{Source: "/usr", Destination: "/usr", ReadOnly: true}, {Source: "/x", Destination: "/y"}},
	}
}

func TestBuildSpecIsolationDefaults(t *testing.T) {
	s, err := BuildSpec(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process
	if !p.NoNewPrivileges {
		t.Error("no_new_privs not set")
	}
	if p.User.UID != 0 || s.Linux.UIDMappings[0].HostID == 0 || s.Linux.GIDMappings[0].HostID == 0 {
		t.Errorf("sandbox root maps to host root: %+v", s.Linux.UIDMappings)
	}
	for _, set := range [][]string{p.Capabilities.Bounding, p.Capabilities.Effective, p.Capabilities.Permitted} {
		if !slices.Equal(set, Capabilities) {
			t.Errorf("capabilities %v, want %v", set, Capabilities)
		}
		for _, bad := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_MKNOD", "CAP_SYS_MODULE"} {
			if slices.Contains(set, bad) {
				t.Errorf("%s granted", bad)
			}
		}
	}
	if len(p.Capabilities.Ambient) > 0 || len(p.Capabilities.Inheritable) > 0 {
		t.Error("ambient or inheritable capabilities set")
	}
	want := []specs.LinuxNamespaceType{specs.UserNamespace, specs.PIDNamespace, specs.MountNamespace,
		specs.IPCNamespace, specs.UTSNamespace, specs.NetworkNamespace, specs.CgroupNamespace}
	for _, ns := range want {
		if !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == ns && n.Path == "" }) {
			t.Errorf("no new %s namespace", ns)
		}
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno {
		t.Fatalf("seccomp must deny by default: %+v", sc)
	}
	allowed := map[string]bool{}
	for _, r := range sc.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	// Unconditionally allowed would be an escape hatch: these need
	// capabilities the sandbox does not have, or are never allowed.
	for _, n := range []string{"mount", "umount2", "pivot_root", "kexec_load", "init_module", "bpf", "keyctl", "add_key", "request_key", "open_by_handle_at", "unshare", "setns"} {
		if allowed[n] {
			t.Errorf("seccomp allows %s unconditionally", n)
		}
	}
	if !allowed["read"] || !allowed["openat2"] {
		t.Error("seccomp profile lacks basic syscalls")
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("masked/readonly paths missing")
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 256<<20 || *r.Pids.Limit != 64 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 {
		t.Errorf("limits: mem %d pids %d cpu %d/%d", *r.Memory.Limit, *r.Pids.Limit, *r.CPU.Quota, *r.CPU.Period)
	}
	if len(r.Devices) != 1 || r.Devices[0].Allow {
		t.Error("device cgroup must deny all by default")
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" && !slices.Contains(m.Options, "ro") {
			t.Error("/sys is writable")
		}
		if m.Destination == "/usr" && !slices.Contains(m.Options, "ro") {
			t.Error("read-only bind mount is writable")
		}
		if m.Type == "bind" && (!slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev")) {
			t.Errorf("bind mount %s without nosuid,nodev", m.Destination)
		}
	}
	if *p.OOMScoreAdj <= 0 {
		t.Error("sandboxes must be the OOM killer's first choice")
	}
}

func TestBuildSpecRefusesUnsafeInput(t *testing.T) {
	for name, mut := range map[string]func(*Spec){
		"host root uid": func(s *Spec) { s.IDMap.HostUID = 0 },
		"host root gid": func(s *Spec) { s.IDMap.HostGID = 0 },
		"no id map":     func(s *Spec) { s.IDMap.Size = 0 },
		"no memory":     func(s *Spec) { s.Resources.MemoryBytes = 0 },
		"no pids":       func(s *Spec) { s.Resources.Pids = 0 },
	} {
		s := testSpec()
		mut(s)
		if _, err := BuildSpec(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A sandbox's own user namespace is joined by path with the mappings kept
// (runc needs them, and they must be the namespace's); runsc makes its own.
func TestBuildSpecJoinsUserns(t *testing.T) {
	in := testSpec()
	in.IDMap = IDMap{HostUID: 100065536, HostGID: 100065536, Size: 65536}
	in.UsernsPath = "/data/sandboxes/t/userns"
	s, err := BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	ns := s.Linux.Namespaces[0]
	if ns.Type != specs.UserNamespace || ns.Path != in.UsernsPath {
		t.Errorf("user namespace entry %+v", ns)
	}
	if m := s.Linux.UIDMappings; len(m) != 1 || m[0] != (specs.LinuxIDMapping{ContainerID: 0, HostID: 100065536, Size: 65536}) {
		t.Errorf("uid mappings %+v", m)
	}
	if inheritRlimits() != (s.Process.Rlimits == nil) {
		t.Errorf("rlimits %+v with inheritRlimits %v", s.Process.Rlimits, inheritRlimits())
	}
	rs, err := RunscSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if p := rs.Linux.Namespaces[0].Path; p != "" {
		t.Errorf("runsc spec joins user namespace %q", p)
	}
}
