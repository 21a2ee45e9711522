package selftest

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

func TestCatalogue(t *testing.T) {
	all := Catalogue()
	if len(all) < 60 {
		t.Fatalf("%d attacks, want at least 60", len(all))
	}
	ids := map[string]bool{}
	idRE := regexp.MustCompile(`^[a-z]+(-[a-z]+)?\.[a-z0-9_-]+$`)
	known := []string{Runc, Runsc, Kata}
	for _, a := range all {
		if ids[a.ID] {
			t.Errorf("duplicate id %s", a.ID)
		}
		ids[a.ID] = true
		if !idRE.MatchString(a.ID) {
			t.Errorf("id %q: want category-prefix.name", a.ID)
		}
		if !slices.Contains(Categories, a.Category) {
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
		if !a.AppliesTo(Runc) && !a.AppliesTo(Runsc) && !a.AppliesTo(Kata) {
			t.Errorf("%s applies to no class", a.ID)
		}
	}
	counts := Counts(all)
	for _, c := range Categories {
		if counts[c] == 0 {
			t.Errorf("category %s has no attack", c)
		}
	}
	// Report order is category order.
	last := -1
	for _, a := range all {
		i := slices.Index(Categories, a.Category)
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
		"net.none-interfaces", "net.none-routes", "net.egress-default-deny", "net.egress-dns-disallowed",
		"cross.processes", "cross.files", "cross.sockets",
		"files.tar-slip-dotdot", "files.read-symlink-abs", "files.write-symlink", "files.dotdot-read",
		"api.lease-other-get", "api.lease-release-quarantine", "api.lease-network-rules", "api.lease-fork",
		"api.lease-snapshot", "api.lease-create", "api.encoded-slash", "api.bad-key",
	}
	have := map[string]bool{}
	for _, a := range Catalogue() {
		have[a.ID] = true
	}
	for _, id := range want {
		if !have[id] {
			t.Errorf("missing attack %s", id)
		}
	}
}

func TestSelect(t *testing.T) {
	if n := len(Select(nil)); n != len(Catalogue()) {
		t.Errorf("Select(nil) = %d attacks, want all %d", n, len(Catalogue()))
	}
	for _, tc := range []struct {
		only []string
		want func(*Attack) bool
	}{
		{[]string{"kernel"}, func(a *Attack) bool { return a.Category == CatKernel }},
		{[]string{"agent.*"}, func(a *Attack) bool { return strings.HasPrefix(a.ID, "agent.") }},
		{[]string{"api.lease"}, func(a *Attack) bool { return strings.HasPrefix(a.ID, "api.lease") }},
		{[]string{"kernel.bpf", "files"}, func(a *Attack) bool { return a.ID == "kernel.bpf" || strings.Contains(a.ID, "files") }},
	} {
		got := Select(tc.only)
		if len(got) == 0 {
			t.Errorf("%v selects nothing", tc.only)
		}
		for _, a := range got {
			if !tc.want(a) {
				t.Errorf("%v selected %s", tc.only, a.ID)
			}
		}
	}
	if len(Select([]string{"no-such-attack"})) != 0 {
		t.Error("a pattern matching nothing selected something")
	}
}

func TestSysCheck(t *testing.T) {
	for _, tc := range []struct {
		out    string
		exit   api.ExecExit
		accept []string
		want   bool
	}{
		{"RESULT err EPERM\n", api.ExecExit{}, nil, true},
		{"RESULT err ENOSYS\n", api.ExecExit{}, []string{"ENOSYS"}, true},
		{"RESULT err EINVAL\n", api.ExecExit{}, nil, false}, // past the permission check
		{"RESULT err EPERM\n", api.ExecExit{}, []string{"ENOSYS"}, false},
		{"RESULT ok 3\n", api.ExecExit{}, nil, false},
		{"noise\nRESULT err confined\n", api.ExecExit{}, []string{"*"}, true},
		{"", api.ExecExit{Code: 159, Signal: "SIGSYS"}, nil, true},
		{"Traceback", api.ExecExit{Code: 1}, nil, false},
	} {
		if got := sysCheck(tc.out, tc.exit, tc.accept...); got.Contained != tc.want {
			t.Errorf("sysCheck(%q, %+v, %v) = %+v, want contained %v", tc.out, tc.exit, tc.accept, got, tc.want)
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

func testReport() *Report {
	return &Report{Runtimes: []string{"runc", "runsc"}, Seconds: 12,
		Results: []Result{
			{ID: "kernel.bpf", Category: CatKernel, Runtime: "runc", Expected: "EPERM", Observed: "refused: EPERM", Contained: true},
			{ID: "agent.impostor", Category: CatAgent, Runtime: "runc", Expected: "never reached", Observed: strings.Repeat("x", 200)},
			{ID: "api.bad-key", Category: CatAPI, Runtime: "runsc", Expected: "401", Observed: "n/a: needs TCP", NA: true},
		},
		Totals: []Total{{Runtime: "runc", Attacks: 2, Contained: 1, Uncontained: 1}, {Runtime: "runsc", Attacks: 1, NA: 1}},
	}
}

func TestWriteTable(t *testing.T) {
	rep := testReport()
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"RUNTIME", "ATTACK", "EXPECTED", "OBSERVED", "CONTAINED",
		"kernel.bpf", "refused: EPERM", " yes\n", " NO\n", " n/a\n",
		"total runc: 2 attacks, 1 contained, 1 not contained, 0 n/a\n",
		"total runsc: 1 attacks, 0 contained, 0 not contained, 1 n/a\n",
		"cleanup: every sandbox deleted, doctor healthy",
		"FAIL: 3 attack runs on runc,runsc in 12s, 1 not contained",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 220 {
			t.Errorf("line not clipped (%d runes): %s", len([]rune(l)), l)
		}
	}
	if !rep.Failed() || rep.Uncontained() != 1 {
		t.Errorf("Failed %v Uncontained %d", rep.Failed(), rep.Uncontained())
	}
	rep.Results[1].Contained = true
	if rep.Failed() {
		t.Error("n/a rows must not fail the run")
	}
	rep.Cleanup = []string{"sandbox x left"}
	if !rep.Failed() {
		t.Error("a cleanup problem must fail the run")
	}
	b.Reset()
	WriteTable(&b, rep)
	if !strings.Contains(b.String(), "cleanup: 1 problem(s):\n  sandbox x left") {
		t.Errorf("cleanup not shown:\n%s", b.String())
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, testReport()); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 3 || back.Results[2].NA != true || back.Totals[0].Uncontained != 1 {
		t.Errorf("round trip: %+v", back)
	}
}

func TestResultAndClip(t *testing.T) {
	if r, ok := result("a\nRESULT first\nb\nRESULT err EPERM\n"); !ok || r != "err EPERM" {
		t.Errorf("result = %q %v", r, ok)
	}
	if _, ok := result("no result"); ok {
		t.Error("result found in nothing")
	}
	if got := clip("abcdef", 4); got != "abc…" {
		t.Errorf("clip = %q", got)
	}
	if got := oneLine(" a\n b\t c "); got != "a b c" {
		t.Errorf("oneLine = %q", got)
	}
}

func TestMakeTar(t *testing.T) {
	b := makeTar([]tarEntry{{name: "../x", body: "hi"}, {name: "l", link: "/", sym: true}, {name: "h", link: "/etc/passwd", hard: true}})
	if len(b) < 512*4 {
		t.Errorf("tar of %d bytes", len(b))
	}
}

func TestWriteCatalogue(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCatalogue(&b, Catalogue()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "\n| `"); n != len(Catalogue()) {
		t.Errorf("%d rows, want %d", n, len(Catalogue()))
	}
	if !strings.Contains(out, "| `kernel.clone3` | runc, kata |") {
		t.Errorf("classes not shown:\n%s", out[:500])
	}
}
