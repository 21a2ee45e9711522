package catalogue

import (
	"regexp"
	"slices"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

func TestCatalogue(t *testing.T) {
	all := All()
	if len(all) < 60 {
		t.Fatalf("%d attacks, want at least 60", len(all))
	}
	ids := map[string]bool{}
	idRE := regexp.MustCompile(`^[a-z]+(-[a-z]+)?\.[a-z0-9_-]+$`)
	known := []string{attack.Runc, attack.Runsc, attack.Kata}
	for _, a := range all {
		if ids[a.ID] {
			t.Errorf("duplicate id %s", a.ID)
		}
		ids[a.ID] = true
		if !idRE.MatchString(a.ID) {
			t.Errorf("id %q: want category-prefix.name", a.ID)
		}
		if !slices.Contains(attack.Categories, a.Category) {
			t.Errorf("%s: unknown category %q", a.ID, a.Category)
		}
		if a.Description == "" || a.Expected == "" || a.Run == nil {
			t.Errorf("%s: description, expected and run are required", a.ID)
		}
		for _, c := range a.Classes {
			if !slices.Contains(known, c) {
				t.Errorf("%s: unknown runtime class %q", a.ID, c)
			}
		}
		if !a.AppliesTo(attack.Runc) && !a.AppliesTo(attack.Runsc) && !a.AppliesTo(attack.Kata) {
			t.Errorf("%s applies to no class", a.ID)
		}
	}
	counts := map[string]int{}
	for _, a := range all {
		counts[a.Category]++
	}
	for _, c := range attack.Categories {
		if counts[c] == 0 {
			t.Errorf("category %s has no attack", c)
		}
	}
	// Report order is category order.
	last := -1
	for _, a := range all {
		i := slices.Index(attack.Categories, a.Category)
		if i < last {
			t.Errorf("%s (%s) is out of category order", a.ID, a.Category)
		}
		last = i
	}
}

// The attacks the issue names must stay in the catalogue.
func TestCatalogueCoversTheIssue(t *testing.T) {
	want := []string{
		"kernel.mount-tmpfs", "kernel.umount-masked", "kernel.unshare-user", "kernel.unshare-mount", "kernel.unshare-net",
		"kernel.setns", "kernel.bpf", "kernel.perf_event_open", "kernel.keyctl", "kernel.add_key", "kernel.init_module",
		"kernel.finit_module", "kernel.kexec_load", "kernel.userfaultfd", "kernel.io_uring_setup", "kernel.clone3",
		"kernel.af-vsock", "kernel.af-packet", "kernel.raw-socket", "kernel.ptrace-unrelated", "kernel.personality",
		"kernel.i386-unshare", "kernel.x32-unshare", "kernel.mknod-block", "kernel.chroot-escape", "kernel.pivot_root",
		"proc.sysctl-core-pattern", "proc.sysrq-trigger", "proc.kcore", "proc.sys-write", "proc.mountinfo-self", "proc.fd-pid1",
		"caps.cap-eff", "caps.no-new-privs", "caps.seccomp", "caps.setuid-binary",
		"cve.2019-5736-self-exe", "cve.2019-5736-pid-exe", "cve.2024-21626-leaked-fd", "cve.2024-21626-workdir",
		"agent.socket-symlink-other", "agent.socket-symlink-host", "agent.impostor", "agent.ptrace-attach-pid1",
		"agent.ptrace-seize-pid1", "agent.proc1-mem", "agent.proc1-environ", "agent.proc1-fd", "agent.kill-term-pid1",
		"agent.kill-int-pid1", "agent.kill-hup-pid1", "agent.kill-kill-pid1", "agent.overwrite-binary", "agent.seccomp-fd",
		"res.pids-flood", "res.memory-hog", "res.disk-fill-root", "res.disk-fill-tmp", "res.inode-fill", "res.stdout-flood",
		"res.inotify-per-uid", "res.pipe-buffers-per-uid",
		"net.none-interfaces", "net.none-routes", "net.egress-default-deny", "net.egress-dns-disallowed", "net.egress-secret-proxy",
		"cross.processes", "cross.files", "cross.sockets",
		"files.tar-slip-dotdot", "files.read-symlink-abs", "files.write-symlink", "files.dotdot-read",
		"api.lease-other-get", "api.lease-release-quarantine", "api.lease-network-rules", "api.lease-fork",
		"api.lease-snapshot", "api.lease-create", "api.encoded-slash", "api.bad-key",
		"api.lease-quota", "api.quota-other-tenant",
	}
	have := map[string]bool{}
	for _, a := range All() {
		have[a.ID] = true
	}
	for _, id := range want {
		if !have[id] {
			t.Errorf("missing attack %s", id)
		}
	}
}

func TestDocumentedCapMask(t *testing.T) {
	// The mask /proc/self/status shows for the 11 documented caps.
	if got := DocumentedCapMask(); got != 0x200405fb {
		t.Errorf("mask %#x, want 0x200405fb", got)
	}
	if o := isolationOK(api.Isolation{UserNamespace: true, NoNewPrivs: true, Capabilities: []string{"chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap", "net_bind_service", "sys_chroot", "audit_write"}}); !o.Contained {
		t.Errorf("the documented set is not accepted: %s", o.Observed)
	}
	if o := isolationOK(api.Isolation{UserNamespace: true, NoNewPrivs: true, Capabilities: []string{"CAP_SYS_ADMIN"}}); o.Contained {
		t.Error("CAP_SYS_ADMIN accepted")
	}
}

func TestMakeTar(t *testing.T) {
	b := makeTar([]tarEntry{{name: "../x", body: "hi"}, {name: "l", link: "/", sym: true}, {name: "h", link: "/etc/passwd", hard: true}})
	if len(b) < 512*4 {
		t.Errorf("tar of %d bytes", len(b))
	}
}
