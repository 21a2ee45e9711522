package runtime

import (
	"fmt"
	"os"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Capabilities is the documented set root inside a sandbox keeps: enough
// for package managers and servers (chown files, switch users, bind low
// ports), nothing that reaches the kernel's wider surface. Dropped relative
// to Docker's default: NET_RAW (raw sockets, spoofing), MKNOD (device nodes),
// SETFCAP (file capabilities).
var Capabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FOWNER",
	"CAP_FSETID",
	"CAP_KILL",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_AUDIT_WRITE",
}

// maskedPaths hide host information and kernel knobs (as Docker does).
var maskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap",
	"/sys/firmware",
}

var readonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// cpuPeriod is the CFS period the CPU quota is expressed in.
const cpuPeriod = 100000

// oomScoreAdj makes sandbox processes the kernel's first choice when the
// host runs out of memory. Raising the score needs no privilege.
const oomScoreAdj = 500

// BuildSpec returns the OCI runtime spec for s with berth's isolation
// defaults: user, pid, mount, ipc, uts, network and cgroup namespaces;
// every capability dropped but Capabilities; Docker's default seccomp
// profile; no_new_privs; masked and read-only /proc and /sys paths;
// cgroup limits on memory, CPU and pids.
func BuildSpec(s *Spec) (*specs.Spec, error) {
	if s.IDMap.Size == 0 || s.IDMap.HostUID == 0 || s.IDMap.HostGID == 0 {
		return nil, fmt.Errorf("runtime: refusing an id map that includes host root: %+v", s.IDMap)
	}
	r := s.Resources
	if r.MemoryBytes <= 0 || r.Pids <= 0 || r.CPUs <= 0 {
		return nil, fmt.Errorf("runtime: resources must be set: %+v", r)
	}
	caps := append([]string(nil), Capabilities...)
	mem := r.MemoryBytes
	swap := r.MemoryBytes // memory+swap equal to memory: no swap
	quota := int64(r.CPUs * cpuPeriod)
	period := uint64(cpuPeriod)
	pids := r.Pids
	disableOOMKiller := false
	score := oomScoreAdj
	nofile := nofileLimit()

	spec := &specs.Spec{
		Version:  specs.Version,
		Hostname: s.Hostname,
		Root:     &specs.Root{Path: s.Rootfs, Readonly: false},
		Process: &specs.Process{
			Args:            s.Args,
			Env:             s.Env,
			Cwd:             "/",
			User:            specs.User{UID: 0, GID: 0},
			NoNewPrivileges: true,
			OOMScoreAdj:     &score,
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  caps,
				Effective: caps,
				Permitted: caps,
			},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile},
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: s.IDMap.HostUID, Size: s.IDMap.Size}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: s.IDMap.HostGID, Size: s.IDMap.Size}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace},
				{Type: specs.PIDNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.CgroupNamespace},
			},
			CgroupsPath: s.CgroupsPath,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory: &specs.LinuxMemory{
					Limit:            &mem,
					Swap:             swapIfAccounted(&swap),
					DisableOOMKiller: &disableOOMKiller,
				},
				CPU:  &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids: &specs.LinuxPids{Limit: &pids},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if s.UsernsPath != "" {
		// runc 1.1 joins the namespace and writes no maps; the mappings
		// stay in the spec (they must equal the namespace's) for runc's
		// own use (ownership of /dev and the like).
		spec.Linux.Namespaces[0].Path = s.UsernsPath
		if inheritRlimits() {
			// runc sets rlimits on init with prlimit(2) from outside its
			// user namespace, which needs CAP_SYS_RESOURCE there: a
			// namespace host root does not own gives it that only if it
			// has the capability on the host, which some hosts' root
			// lacks. init then inherits the daemon's (inheritRlimits).
			spec.Process.Rlimits = nil
		}
	}
	if s.NetnsPath != "" {
		for i := range spec.Linux.Namespaces {
			if spec.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				spec.Linux.Namespaces[i].Path = s.NetnsPath
			}
		}
	}
	for _, m := range s.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts,
		})
	}
	if s.SecretsTmpfs {
		spec.Mounts = append(spec.Mounts, secretsMount())
	}
	prof, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("runtime: seccomp profile: %w", err)
	}
	spec.Linux.Seccomp = prof
	return spec, nil
}

// nofileLimit is the open-files limit for sandboxes: 65536, or the daemon's
// own hard limit when that is lower (raising a hard limit needs
// CAP_SYS_RESOURCE, which some hosts' root lacks).
func nofileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Max < 65536 {
		return rl.Max
	}
	return 65536
}

// swapIfAccounted returns v when the kernel accounts swap in cgroups (v1
// memory.memsw files exist, or cgroup v2); runc fails otherwise.
func swapIfAccounted(v *int64) *int64 {
	if cgroup2() {
		return v
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
		return v
	}
	return nil
}

// cgroup2 reports whether the host runs the unified cgroup hierarchy only.
func cgroup2() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// capNames returns the capabilities without their CAP_ prefix, lower case,
// for display.
func capNames() []string {
	out := make([]string, len(Capabilities))
	for i, c := range Capabilities {
		out[i] = strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return out
}
