package catalogue

import (
	"fmt"
	"strings"

	"github.com/berth-sh/berth/internal/selftest/attack"
)

// /proc and /sys: host knobs must not be writable, host memory and logs
// not readable, and the host's paths (the daemon's data dir) must not
// show anywhere a sandbox can look. Writes put back the value just read,
// so an uncontained write changes nothing on the host.
func procAttacks() []*attack.Attack {
	const g = "proc"
	p := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "proc." + id, Category: attack.CatProcSys, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	rewrite := func(file string) func(ctxT, *attack.Env) attack.Outcome {
		return attack.Py(g, fmt.Sprintf(`f = %q
try:
    v = open(f, "rb").read()
except OSError as ex:
    report("err read " + ename(ex.errno)); sys.exit()
if b"[" in v: v = v.split(b"[")[1].split(b"]")[0]
def w():
    fd = os.open(f, os.O_WRONLY)
    try: os.write(fd, v if v else b"\n")
    finally: os.close(fd)
report(oserr(w))`, file), "EROFS", "EACCES", "EPERM", "ENOENT", "read")
	}
	hostPath := func(id, desc string, script string) *attack.Attack {
		return p(id, desc, "the host data dir path does not appear", attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			if e.DataDir() == "" {
				return attack.NotApplicable("the daemon's data dir is unknown (--data-dir)")
			}
			out, exit, err := e.Sh(ctx, sb.ID, script)
			if err != nil {
				return attack.Escaped("exec failed: %v", err)
			}
			var hits []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, e.DataDir()) {
					hits = append(hits, strings.TrimSpace(l))
				}
			}
			if len(hits) > 0 {
				return attack.Escaped("%d line(s) show %s: %s", len(hits), e.DataDir(), attack.Clip(hits[0], 120))
			}
			return attack.Contained("no host path in %d bytes (%s)", len(out), attack.DescribeExit("", exit))
		}))
	}
	return []*attack.Attack{
		p("sysctl-core-pattern", "write /proc/sys/kernel/core_pattern (a host-wide escape via a core handler)", "EROFS/EACCES", rewrite("/proc/sys/kernel/core_pattern")),
		p("sysctl-modprobe", "write /proc/sys/kernel/modprobe", "refused", rewrite("/proc/sys/kernel/modprobe")),
		p("sysctl-panic", "write /proc/sys/kernel/panic", "refused", rewrite("/proc/sys/kernel/panic")),
		p("sysrq-trigger", "write 'h' to /proc/sysrq-trigger", "refused (read-only, or /dev/null)",
			attack.Py(g, `f = "/proc/sysrq-trigger"
def w():
    fd = os.open(f, os.O_WRONLY)
    try: os.write(fd, b"h")
    finally: os.close(fd)
r = oserr(w)
if r.startswith("ok"):
    st = os.stat(f)
    if (st.st_mode & 0o170000) == 0o020000 and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3:
        r = "err masked by /dev/null"
report(r)`, "*")),
		p("kcore", "read /proc/kcore (host physical memory)", "nothing readable",
			attack.Py(g, `def rd():
    fd = os.open("/proc/kcore", os.O_RDONLY)
    try: return len(os.read(fd, 4096))
    finally: os.close(fd)
r = oserr(rd)
if r == "ok 0": r = "err empty (masked)"
report(r)`, "*")),
		p("kallsyms", "read kernel symbol addresses from /proc/kallsyms", "no non-zero address",
			attack.Py(g, `try:
    ls = open("/proc/kallsyms").read().splitlines()
except OSError as ex:
    report("err " + ename(ex.errno)); sys.exit()
nz = [l for l in ls if l.split()[0].strip("0")]
report(("ok %d non-zero addresses, e.g. %s" % (len(nz), nz[0])) if nz else "err %d symbols, all addresses zero" % len(ls))`, "*")),
		p("sys-uevent-helper", "write /sys/kernel/uevent_helper (runs a host program on uevents)", "EROFS", rewrite("/sys/kernel/uevent_helper")),
		p("sys-write", "write /sys/kernel/mm/transparent_hugepage/enabled", "EROFS", rewrite("/sys/kernel/mm/transparent_hugepage/enabled")),
		p("cgroup-mount", "mount a cgroup v1 hierarchy (release_agent escape, CVE-2022-0492)", "EPERM",
			attack.Py(g, `os.makedirs("/tmp/st-cg", exist_ok=True); report(sc(165, b"cgroup", b"/tmp/st-cg", b"cgroup", 0, b"rdma"))`)),
		// gVisor shows its own cgroupfs, where the container's cgroup is
		// named after the sandbox's id (which the sandbox knows anyway:
		// BERTH_SANDBOX_ID); no host layout appears.
		p("cgroup-path", "/proc/self/cgroup names the host cgroup path", "cgroup namespace: only / (gVisor: its own id)",
			attack.Py(g, `ls = open("/proc/self/cgroup").read().split()
own = ":/" + os.environ.get("BERTH_SANDBOX_ID", "-")
bad = [l for l in ls if not l.endswith(":/") and not l.endswith(own)]
report(("ok " + " ".join(bad)) if bad else "err all /")`, "*")),
		hostPath("mountinfo-self", "grep the host data dir in /proc/self/mountinfo", `cat /proc/self/mountinfo`),
		hostPath("mountinfo-pid1", "grep the host data dir in /proc/1/mountinfo", `cat /proc/1/mountinfo`),
		hostPath("fd-pid1", "readlink /proc/1/fd/* (the agent's open files)", `for f in /proc/1/fd/*; do echo "$f -> $(readlink $f)"; done`),
		hostPath("fd-self", "readlink /proc/self/fd/* of an exec'd process", `ls -l /proc/self/fd/ /proc/$$/fd/`),
		hostPath("maps-pid1", "grep the host data dir in /proc/1/maps", `cat /proc/1/maps`),
	}
}
