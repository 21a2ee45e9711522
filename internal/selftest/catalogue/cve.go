package catalogue

import (
	"fmt"
	"strings"
	"sync"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// escapeProbe prints whether walking up from the working directory leaves
// the sandbox's root.
const escapeProbe = `import os
a = os.stat("/")
try:
    b = os.stat("/".join([".."] * 40))
    try: cwd = os.getcwd()
    except OSError as ex: cwd = "unreachable"
    print("RESULT", ("ok ESCAPED cwd=" + cwd) if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) else "err confined cwd=" + cwd)
except OSError as ex:
    print("RESULT err", ex)`

// runc CVE classes: CVE-2019-5736 (overwrite the runtime binary through
// /proc/PID/exe) and CVE-2024-21626 (a leaked host directory fd, reached
// as /proc/self/fd/N or set as the working directory).
func cveAttacks() []*attack.Attack {
	const g = "cve"
	c := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "cve." + id, Category: attack.CatRuncCVE, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	return []*attack.Attack{
		c("2019-5736-self-exe", "open /proc/self/exe for writing (the binary being run)", "refused (ETXTBSY/EROFS/EACCES)",
			attack.Py(g, `report(oserr(lambda: os.close(os.open("/proc/self/exe", os.O_WRONLY))))`, "*")),
		c("2019-5736-pid-exe", "open every /proc/PID/exe for writing", "none opens",
			attack.Py(g, `ok = []; n = 0
for d in os.listdir("/proc"):
    if not d.isdigit(): continue
    p = "/proc/%s/exe" % d
    try: l = os.readlink(p)
    except OSError: continue
    n += 1
    try:
        os.close(os.open(p, os.O_WRONLY)); ok.append(d + "=" + l)
    except OSError: pass
report(("ok writable: " + " ".join(ok)) if ok else "err %d exe links, none writable" % n)`, "*")),
		c("2019-5736-exec-watch", "watch /proc for a runtime process entering during execs; open its exe for writing", "no host runtime binary enters; nothing writable",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				var wg sync.WaitGroup
				var out string
				var exit api.ExecExit
				var werr error
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, exit, werr = e.Py(ctx, sb.ID, `seen = {}; opened = []; me = os.getpid(); end = time.time() + 4
open("/tmp/st-watch", "w").close()
while time.time() < end:
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me or d in seen: continue
        try: l = os.readlink("/proc/%s/exe" % d)
        except OSError: continue
        seen[d] = l
        try:
            os.close(os.open("/proc/%s/exe" % d, os.O_WRONLY)); opened.append(l)
        except OSError: pass
rt = sorted(set(l for l in seen.values() if any(x in l for x in ("runc", "runsc", "containerd", "kata", "shim"))))
if opened: report("ok opened for writing: %s" % opened)
elif rt: report("ok host runtime binary entered: %s" % rt)
else: report("err %d processes seen, none writable, no runtime binary" % len(seen))`)
				}()
				// The execs an exec-by-runtime design would enter for.
				for i := 0; i < 8; i++ {
					_, _, _ = e.Sh(ctx, sb.ID, "test -e /tmp/st-watch; sleep 0.2")
				}
				wg.Wait()
				if werr != nil {
					return attack.Escaped("exec failed: %v", werr)
				}
				return attack.SysCheck(out, exit, "*")
			})),
		c("host-usr-write", "write into the host's /usr (bind-mounted read-only)", "EROFS",
			attack.ShFails(g, `touch /usr/bin/berth-selftest-was-here || touch /usr/lib/berth-selftest-was-here`)),
		c("2024-21626-leaked-fd", "every directory fd of pid 1 and of an exec'd process, walked up with .. x40", "no fd leads outside the sandbox's root",
			attack.Py(g, `root = os.stat("/"); found = []
for pid in ("self", "1"):
    try: fds = os.listdir("/proc/%s/fd" % pid)
    except OSError: continue
    for fd in fds:
        p = "/proc/%s/fd/%s" % (pid, fd)
        try:
            if not os.path.isdir(p): continue
            top = os.stat(p + "/.." * 40)
        except OSError: continue
        if (top.st_dev, top.st_ino) != (root.st_dev, root.st_ino):
            found.append("%s -> %s" % (p, os.readlink(p)))
report(("ok " + "; ".join(found)) if found else "err no fd leads outside the sandbox's root")`, "*")),
		c("2024-21626-workdir", "exec with workdir /proc/self/fd/N and /proc/1/fd/N (N=3..9), then walk up", "refused, or confined to the sandbox's root",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				var refused, confined int
				var esc []string
				for _, pid := range []string{"self", "1"} {
					for n := 3; n <= 9; n++ {
						wd := fmt.Sprintf("/proc/%s/fd/%d", pid, n)
						out, _, err := e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", escapeProbe}, Workdir: wd, TimeoutSeconds: 20})
						r, ok := attack.Reported(out)
						switch {
						case err != nil || !ok:
							refused++
						case strings.HasPrefix(r, "ok"):
							esc = append(esc, wd+": "+r)
						default:
							confined++
						}
					}
				}
				if len(esc) > 0 {
					return attack.Escaped("%s", strings.Join(esc, "; "))
				}
				return attack.Contained("%d refused, %d confined", refused, confined)
			})),
		c("workdir-dotdot", "exec with workdir /../../../../..", "confined to the sandbox's root",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, _, err := e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", escapeProbe}, Workdir: "/../../../../..", TimeoutSeconds: 20})
				if err != nil {
					return attack.Contained("refused: %v", err)
				}
				r, _ := attack.Reported(out)
				return attack.Judged(!strings.HasPrefix(r, "ok"), "%s", r)
			})),
	}
}
