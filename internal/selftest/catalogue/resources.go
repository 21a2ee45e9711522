package catalogue

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// Resource limits: what one sandbox can take from the host and from the
// other sandboxes.
const (
	pidsLimit   = 64
	memoryLimit = 128 << 20
	diskCap     = 64 << 20  // asked for with resources.disk_bytes
	diskAttempt = 256 << 20 // written against it
	inodeTry    = 50000
	floodBytes  = 512 << 20
	rssSlack    = 64 << 20
)

// diskField is the JSON name of the per-sandbox disk cap (the API's
// Resources, beside memory_bytes; `berth create --disk`).
const diskField = "disk_bytes"

func resourceAttacks() []*attack.Attack {
	r := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome, classes ...string) *attack.Attack {
		return &attack.Attack{ID: "res." + id, Category: attack.CatResource, Description: desc, Expected: expected, Run: run, Classes: classes}
	}
	return []*attack.Attack{
		r("pids-flood", fmt.Sprintf("fork until refused in a sandbox created with pids %d", pidsLimit), fmt.Sprintf("fork fails with EAGAIN at <= %d processes; the sandbox lives on", pidsLimit),
			attack.Fresh(api.CreateSandboxRequest{Resources: api.Resources{Pids: pidsLimit}}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Py(ctx, sb.ID, `n = 0; kids = []; err = ""
for i in range(400):
    try: pid = os.fork()
    except OSError as ex:
        err = ename(ex.errno); break
    if pid == 0:
        time.sleep(20); os._exit(0)
    kids.append(pid); n += 1
for k in kids: os.kill(k, 9)
for k in kids: os.waitpid(k, 0)
report(("ok forked all %d" % n) if not err else "err forked %d then %s" % (n, err))`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				res, _ := attack.Reported(out)
				var n int
				fmt.Sscanf(strings.TrimPrefix(strings.TrimPrefix(res, "err "), "ok "), "forked %d", &n)
				if ok, why := e.Alive(ctx, sb.ID); !ok {
					return attack.Escaped("%s; the sandbox died: %s", orExit(res, out, exit), why)
				}
				return attack.Judged(strings.HasPrefix(res, "err") && n <= pidsLimit, "%s", orExit(res, out, exit))
			})),
		r("memory-hog", "allocate 512 MiB in a sandbox with memory 128 MiB", "the process is OOM-killed and the exit says oom_killed; the sandbox lives on (gVisor: that sandbox alone ends)",
			attack.Fresh(api.CreateSandboxRequest{Resources: api.Resources{MemoryBytes: memoryLimit}}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				out, exit, err := e.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", `b = b"x" * (512 << 20); print("RESULT ok allocated", len(b))`}, TimeoutSeconds: 60})
				if err != nil && e.Class == attack.Runsc {
					// The host's OOM killer sees one process, the Sentry,
					// and gVisor has no OOM killer of its own: the limit
					// ends the whole sandbox, and only it.
					if ok, _ := e.Alive(ctx, sb.ID); !ok {
						return endedAlone(ctx, e, "the memory limit ended the whole gVisor sandbox (%v), as the host kernel cannot kill one process inside it; nothing else was affected", err)
					}
				}
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				got := fmt.Sprintf("exit %d signal %q oom_killed %v", exit.Code, exit.Signal, exit.OOMKilled)
				if ok, why := e.Alive(ctx, sb.ID); !ok {
					return attack.Escaped("%s; the sandbox died: %s", got, why)
				}
				_, allocated := attack.Reported(out)
				return attack.Judged(!allocated && exit.OOMKilled, "%s", got)
			})),
		r("oom-score-adj", "oom_score_adj of every host process of the sandbox (its cgroup)", ">= 500: sandboxes die before host services",
			attack.InGroup("resources", func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				if e.DataDir() == "" || !e.Local() {
					return attack.NotApplicable("needs the daemon's data dir on this host")
				}
				pids := cgroupPids(local.InstanceName(e.DataDir()), sb.ID)
				if len(pids) == 0 {
					return attack.Escaped("no process found in the sandbox's cgroup /%s/%s", local.InstanceName(e.DataDir()), sb.ID)
				}
				var low []string
				for _, p := range pids {
					b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", p))
					if err != nil {
						continue
					}
					if v, _ := strconv.Atoi(strings.TrimSpace(string(b))); v < 500 {
						low = append(low, fmt.Sprintf("%d(%s)=%d", p, procComm(p), v))
					}
				}
				if len(low) > 0 {
					return attack.Escaped("%d of %d host processes below 500: %s", len(low), len(pids), attack.Clip(strings.Join(low, " "), 120))
				}
				return attack.Contained("all %d host processes >= 500", len(pids))
			})),
		r("oom-score-adj-lower", "echo -1000 > /proc/self/oom_score_adj (make the sandbox the OOM killer's last choice)", "EACCES (lowering needs CAP_SYS_RESOURCE), or no host process of the sandbox lowered",
			attack.InGroup("resources", func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				var pids []int
				before := map[int]int{}
				if e.DataDir() != "" && e.Local() {
					pids = cgroupPids(local.InstanceName(e.DataDir()), sb.ID)
					for _, p := range pids {
						before[p] = oomScoreAdj(p)
					}
				}
				out, exit, err := e.Py(ctx, sb.ID, `def w():
    with open("/proc/self/oom_score_adj", "w") as f: f.write("-1000")
    return open("/proc/self/oom_score_adj").read().strip()
r = oserr(w)
if r.startswith("ok") and int(r.split()[1]) >= 500: r = "err kept at " + r.split()[1]
report(r)`)
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				o := attack.SysCheck(out, exit, "*")
				if o.Contained || len(pids) == 0 {
					return o
				}
				// Accepted inside: it matters only if a host process of
				// the sandbox now has a lower score (runc: the process
				// itself; gVisor: emulated, the host's stay as they were).
				for _, p := range cgroupPids(local.InstanceName(e.DataDir()), sb.ID) {
					if b, ok := before[p]; ok && oomScoreAdj(p) < b {
						return attack.Escaped("%s: host pid %d lowered %d -> %d", o.Observed, p, b, oomScoreAdj(p))
					}
				}
				return attack.Contained("%s inside, but no host process of the sandbox was lowered (emulated)", strings.TrimPrefix(o.Observed, "succeeded: "))
			})),
		r("disk-fill-root", "write 256 MiB to / in a sandbox created with a 64 MiB disk cap", "ENOSPC/EDQUOT at the cap", diskFill("/st-fill")),
		r("disk-fill-tmp", "write 256 MiB to /tmp in a sandbox created with a 64 MiB disk cap", "ENOSPC/EDQUOT at the cap", diskFill("/tmp/st-fill")),
		r("inode-fill", fmt.Sprintf("create %d empty files in a sandbox created with a 64 MiB disk cap", inodeTry), "ENOSPC/EDQUOT before the flood ends",
			withDiskCap(func(ctx ctxT, e *attack.Env, sb *sandboxT, capErr error) attack.Outcome {
				n := inodeTry
				if capErr != nil {
					n = 20000
				}
				out, exit, err := e.Py(ctx, sb.ID, fmt.Sprintf(`os.makedirs("/st-inodes", exist_ok=True); n = 0; err = ""
for i in range(%d):
    try: os.close(os.open("/st-inodes/%%d" %% i, os.O_CREAT | os.O_WRONLY, 0o600)); n += 1
    except OSError as ex:
        err = ename(ex.errno); break
report(("err created %%d then %%s" %% (n, err)) if err else "ok created all %%d" %% n)`, n))
				if err != nil {
					return attack.Escaped("exec failed: %v", err)
				}
				res, _ := attack.Reported(out)
				if capErr != nil {
					return attack.Escaped("no disk cap: %v; %s unopposed", capErr, orExit(res, out, exit))
				}
				return attack.Judged(strings.Contains(res, "ENOSPC") || strings.Contains(res, "EDQUOT"), "%s", orExit(res, out, exit))
			})),
		r("stdout-flood", "512 MiB to stdout of one exec, read through the SDK", "the daemon's RSS grows by < 64 MiB (backpressure, nothing buffered)",
			attack.InGroup("resources", func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				pid := e.Target.DaemonPID
				if pid == 0 {
					return attack.NotApplicable("the daemon's pid is unknown (not on a local unix socket)")
				}
				base, err := rssOf(pid)
				if err != nil {
					return attack.Escaped("daemon rss: %v", err)
				}
				var peak atomic.Int64
				peak.Store(base)
				done := make(chan struct{})
				go func() {
					t := time.NewTicker(50 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-done:
							return
						case <-t.C:
							if v, err := rssOf(pid); err == nil && v > peak.Load() {
								peak.Store(v)
							}
						}
					}
				}()
				var n countWriter
				exit, err := e.C.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"head", "-c", strconv.Itoa(floodBytes), "/dev/zero"}, TimeoutSeconds: 170}, &n, io.Discard)
				close(done)
				grow := peak.Load() - base
				got := fmt.Sprintf("%d MiB read, daemon RSS %d -> peak %d MiB (+%d MiB)", n.n.Load()>>20, base>>20, peak.Load()>>20, grow>>20)
				if err != nil || exit.Code != 0 {
					return attack.Escaped("%s; exec: %v exit %d", got, errText(err), exit.Code)
				}
				return attack.Judged(grow < rssSlack && n.n.Load() == floodBytes, "%s", got)
			})),
		r("inotify-per-uid", "sandbox A holds every inotify instance it can; sandbox B then creates one", "B succeeds: per-uid kernel limits are not shared between sandboxes",
			perUID(`note = open("/tmp/st-held.tmp", "w")  # opened first: EMFILE may be the fd limit
fds = []
while len(fds) < 100000:
    r = libc.inotify_init1(0)
    if r < 0: break
    fds.append(r)
note.write("A holds %d inotify instances, then %s" % (len(fds), ename(ctypes.get_errno()))); note.close()
os.rename("/tmp/st-held.tmp", "/tmp/st-held")
time.sleep(120)`, `r = libc.inotify_init1(0)
report(("ok fd %d" % r) if r >= 0 else "err " + ename(ctypes.get_errno()))`,
				func(res string) bool { return strings.HasPrefix(res, "ok") })),
		r("pipe-buffers-per-uid", "sandbox A grows pipes to 1 MiB until refused (pipe-user-pages-soft); sandbox B then makes a pipe", "B's pipe still gets 64 KiB",
			perUID(`import fcntl
ps = []; n = 0; err = "none"
for i in range(300):
    r, w = os.pipe(); ps.append((r, w))
    try:
        fcntl.fcntl(w, 1031, 1 << 20); n += 1
    except OSError as ex:
        err = ename(ex.errno); break
# Past the soft limit with default pipes: A's own new pipes shrink to
# one page once the uid is over pipe-user-pages-soft.
small = 0
for i in range(400):
    r, w = os.pipe(); ps.append((r, w))
    if fcntl.fcntl(w, 1032) < 65536:
        small = fcntl.fcntl(w, 1032); break
open("/tmp/st-held", "w").write("A holds %d MiB of pipe buffers (then %s) and %d pipes; A's newest pipe: %s" % (n, err, len(ps), small or "64 KiB"))
time.sleep(120)`, `import fcntl
r, w = os.pipe()
report("ok %d" % fcntl.fcntl(w, 1032))`,
				func(res string) bool { return res == "ok 65536" })),
	}
}

// orExit is res, or the output and exit when there is no result.
func orExit(res, out string, exit api.ExecExit) string {
	if res != "" {
		return res
	}
	return attack.DescribeExit(out, exit)
}

// withDiskCap creates a sandbox with a disk cap through the raw API (the
// field may not exist yet). When the daemon refuses it, f gets a default
// sandbox and the refusal, and must report the attack not contained.
func withDiskCap(f func(ctx ctxT, e *attack.Env, sb *sandboxT, capErr error) attack.Outcome) func(ctxT, *attack.Env) attack.Outcome {
	return func(ctx ctxT, e *attack.Env) attack.Outcome {
		sb, capErr := createRaw(ctx, e, map[string]any{"runtime": e.Class, "resources": map[string]any{diskField: diskCap}})
		if capErr != nil {
			var err error
			if sb, err = e.Create(ctx, api.CreateSandboxRequest{}); err != nil {
				return attack.Escaped("no disk cap (%v), and create: %v", capErr, err)
			}
		}
		defer e.Delete(context.WithoutCancel(ctx), sb.ID)
		return f(ctx, e, sb, capErr)
	}
}

func diskFill(path string) func(ctxT, *attack.Env) attack.Outcome {
	return withDiskCap(func(ctx ctxT, e *attack.Env, sb *sandboxT, capErr error) attack.Outcome {
		out, _, err := e.Sh(ctx, sb.ID, fmt.Sprintf(`dd if=/dev/zero of=%s bs=1M count=%d 2>/tmp/st-dd.err; rc=$?; sz=$(stat -c %%s %s 2>/dev/null || echo 0); rm -f %s; echo "RESULT rc=$rc bytes=$sz $(tail -c 120 /tmp/st-dd.err | tr '\n' ' ')"`, path, diskAttempt>>20, path, path))
		if err != nil {
			return attack.Escaped("exec failed: %v", err)
		}
		res, _ := attack.Reported(out)
		var rc int
		var sz int64
		fmt.Sscanf(res, "rc=%d bytes=%d", &rc, &sz)
		if capErr != nil {
			return attack.Escaped("no disk cap: %v; wrote %d MiB to %s unopposed", capErr, sz>>20, path)
		}
		stopped := rc != 0 && (strings.Contains(res, "No space") || strings.Contains(res, "quota"))
		return attack.Judged(stopped && sz <= diskCap+16<<20, "wrote %d MiB, dd rc %d: %s", sz>>20, rc, attack.Clip(res, 80))
	})
}

// perUID runs holder in the background of a fresh sandbox A, waits until
// it wrote /tmp/st-held, then runs probe in a fresh sandbox B.
func perUID(holder, probe string, ok func(res string) bool) func(ctxT, *attack.Env) attack.Outcome {
	return func(ctx ctxT, e *attack.Env) attack.Outcome {
		a, err := e.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return attack.Escaped("create: %v", err)
		}
		defer e.Delete(context.WithoutCancel(ctx), a.ID)
		b, err := e.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return attack.Escaped("create: %v", err)
		}
		defer e.Delete(context.WithoutCancel(ctx), b.ID)
		if err := writeFileIn(ctx, e, a.ID, "/tmp/st-holder.py", attack.PyPrelude+holder); err != nil {
			return attack.Escaped("staging the holder: %v", err)
		}
		out, exit, err := e.Sh(ctx, a.ID, `(setsid python3 /tmp/st-holder.py >/tmp/st-holder.log 2>&1 &); for i in $(seq 200); do test -s /tmp/st-held && cat /tmp/st-held && exit 0; sleep 0.05; done; cat /tmp/st-holder.log; exit 1`)
		if err != nil || exit.Code != 0 {
			return attack.Escaped("the holder in A did not start: %v %s", errText(err), attack.DescribeExit(out, exit))
		}
		held := strings.TrimSpace(out)
		pout, pexit, err := e.Py(ctx, b.ID, probe)
		if err != nil {
			return attack.Escaped("exec in B failed: %v", err)
		}
		res, _ := attack.Reported(pout)
		return attack.Judged(ok(res), "%s; B: %s", held, orExit(res, pout, pexit))
	}
}

// createRaw creates a sandbox from a raw JSON body (fields the SDK's
// types may not have yet) and registers it for cleanup.
func createRaw(ctx ctxT, e *attack.Env, body map[string]any) (*api.Sandbox, error) {
	body["labels"] = map[string]string{"berth-selftest": e.Tag}
	body["timeout_seconds"] = 900
	st, resp, err := e.Raw.Do(ctx, "POST", "/v1/sandboxes", "", body)
	if err != nil {
		return nil, err
	}
	if st/100 != 2 {
		return nil, fmt.Errorf("the daemon refuses resources.%s: %d %s", diskField, st, attack.Clip(attack.OneLine(resp), 100))
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(resp), &sb); err != nil {
		return nil, err
	}
	e.Track(sb.ID)
	return &sb, nil
}

// cgroupPids lists the host pids in the sandbox's cgroup, any hierarchy.
func cgroupPids(instance, id string) []int {
	seen := map[int]bool{}
	var out []int
	globs := []string{"/sys/fs/cgroup/*/" + instance + "/" + id + "/cgroup.procs", "/sys/fs/cgroup/" + instance + "/" + id + "/cgroup.procs"}
	for _, g := range globs {
		ms, _ := filepath.Glob(g)
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil && !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func oomScoreAdj(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		return 1000
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// rssOf is a process's resident set size in bytes.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v := statusField(string(b), "VmRSS")
	kb, err := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64)
	return kb << 10, err
}

type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }
