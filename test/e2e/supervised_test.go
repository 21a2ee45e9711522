package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

// Supervised processes come back (#36 item 2): a background process
// with a restart policy is running again after stop/start, after a port
// request wakes its stopped auto_resume sandbox (which answers 200 from
// it, its ready port awaited), after a daemon restart and after a host
// reboot; a process without a policy does not come back, and a killed
// supervised one stays gone. On runc and runsc (where a hibernate's wake
// restores the processes, and none is started twice).
func TestSupervisedProcessesRunc(t *testing.T) {
	parallel(t)
	supervisedScenario(t, startDaemon(t), "")
}

func TestSupervisedProcessesRunsc(t *testing.T) {
	parallel(t)
	supervisedScenario(t, startRunscDaemon(t), "runsc")
}

// webCmd serves /tmp/www on :8000, its page naming the env it was given
// and the run (a fresh number per start).
var webCmd = []string{"sh", "-c", `mkdir -p /tmp/www && cd /tmp/www && echo "$GREETING run-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') $GH_TOKEN" > index.html && exec python3 -u -m http.server 8000`}

func supervisedScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	// A secret as env: each start resolves it again; the store never
	// holds its value with the process.
	const token = "tok-s3cr3t-91c7"
	if _, e, code := d.cliIn(token, "secret", "set", "TOKEN"); code != 0 {
		t.Fatalf("secret set: %s", e)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: runtime, Persistent: true, Policy: api.Policy{AutoResume: true},
		Secrets: []api.SecretRef{{Name: "TOKEN", Env: "GH_TOKEN"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	hc := unixHTTP(d)
	hc.Timeout = 2 * time.Minute // the waits inside are the daemon's, bounded at 30 s
	// once makes one request, no retry: an answer other than the page
	// fails.
	once := func(what string) string {
		t.Helper()
		resp, err := hc.Get("http://berth/v1/sandboxes/" + id + "/ports/8000/index.html")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "hello run-") {
			t.Fatalf("%s: %d %q, want 200 and the page", what, resp.StatusCode, b)
		}
		return string(b)
	}
	running := func(tag string) []api.Process {
		var out []api.Process
		for _, p := range procList(t, d, id) {
			if (p.Tag == tag || tag == "ticker" && p.Tag == "" && slices.Contains(p.Argv, "ticker")) &&
				(p.State == "running" || p.State == "restarting") {
				out = append(out, p)
			}
		}
		return out
	}
	// back waits until the supervised processes run again after a
	// transition, as processes other than those of before, and checks
	// that the unsupervised and the killed ones do not.
	back := func(when string, before map[string]string) map[string]string {
		t.Helper()
		now := map[string]string{}
		waitFor(t, "the supervised processes "+when, func() bool {
			for _, tag := range []string{"web", "ticker"} {
				r := running(tag)
				if len(r) != 1 {
					return false
				}
				now[tag] = r[0].ID
			}
			return true
		})
		for tag, id := range before {
			if now[tag] == id {
				t.Fatalf("%s: %s is still process %s, not a new run", when, tag, id)
			}
		}
		gone := []string{"plain", "doomed"}
		if before == nil {
			gone = gone[1:] // the first boot's: the unsupervised one runs
		}
		for _, tag := range gone {
			if r := running(tag); len(r) != 0 {
				t.Fatalf("%s: %s came back: %+v", when, tag, r)
			}
		}
		return now
	}

	// A supervised web server, with its own env and a ready port: the
	// start answers once it accepts.
	web, err := d.c.StartProcess(ctx, id, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: webCmd, Env: map[string]string{"GREETING": "hello"}},
		Tag: "web", Restart: "always", ReadyPort: 8000})
	if err != nil {
		t.Fatal(err)
	}
	first := once("right after the start with a ready port")
	// An untagged supervised loop, an unsupervised process, and a
	// supervised one that is killed.
	if _, e, code := d.cli("exec", "-d", "--restart", "on-failure", id, "--", "sh", "-c",
		"while :; do date > /tmp/tick; sleep 1; done", "ticker"); code != 0 {
		t.Fatalf("exec -d --restart on-failure: %s", e)
	}
	if _, e, code := d.cli("exec", "-d", "--tag", "plain", id, "--", "sleep", "600"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := d.cli("exec", "-d", "--tag", "doomed", "--restart", "always", id, "--", "sleep", "600"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := d.cli("kill", id, "doomed"); code != 0 {
		t.Fatalf("kill doomed: %s", e)
	}
	// An on-failure process that succeeds is done: it does not come back.
	if _, e, code := d.cli("exec", "-d", "--tag", "once", "--restart", "on-failure", id, "--", "true"); code != 0 {
		t.Fatal(e)
	}
	waitFor(t, "the on-failure process's success", func() bool {
		p, ok := procNamed(procList(t, d, id), "once")
		return ok && p.State == "exited" && p.Exit != nil && p.Exit.Code == 0
	})
	runs := back("after start", nil)
	if runs["web"] != web.ID {
		t.Fatalf("web runs as %s, started as %s", runs["web"], web.ID)
	}

	// Stop and start: a new boot. The stopped run's output stays
	// readable by its id, stopped and after the start.
	prev := runs["web"]
	logsOf := func(when, pid string) {
		t.Helper()
		out, e, code := d.cli("logs", id, pid)
		if code != 0 || !strings.Contains(out, "Serving HTTP on") {
			t.Fatalf("logs of %s %s: %d %q %q", pid, when, code, out, e)
		}
	}
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	logsOf("while stopped", prev)
	if _, err := d.c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The start waited for the ready port.
	page := once("right after the start")
	runs = back("after stop/start", runs)
	logsOf("after the start", prev)
	for _, p := range procList(t, d, id) {
		if p.Tag == "once" && strings.HasPrefix(p.ID, runs["web"][:7]) {
			t.Fatalf("an on-failure process that had succeeded ran again: %+v", p)
		}
	}
	if page == first || !strings.HasSuffix(page, " "+token+"\n") {
		t.Fatalf("after stop/start the page is %q (first run's %q): not a new run with its env and secret", page, first)
	}
	for _, f := range []string{"berth.db", "berth.db-wal"} {
		b, err := os.ReadFile(filepath.Join(d.dataDir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(token)) {
			t.Fatalf("the secret's value is in the store (%s)", f)
		}
	}

	// A port request wakes the stopped sandbox and answers from the
	// process started again, not 502.
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if woken := once("a port request to the stopped sandbox"); woken == page {
		t.Fatalf("the woken sandbox answers the page of the run before: %q", woken)
	}
	if cur, err := d.c.GetSandbox(ctx, id); err != nil || cur.State != "running" {
		t.Fatalf("after the port request: %+v %v", cur, err)
	}
	runs = back("after the wake by a port request", runs)
	// Paused and resumed by a port request: the same processes.
	if _, err := d.c.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	once("a port request to the paused sandbox")
	time.Sleep(time.Second) // the Running hook of the resume has run: nothing is started twice
	if r := running("web"); len(r) != 1 || r[0].ID != runs["web"] {
		t.Fatalf("after resume web runs as %+v, before %s", r, runs["web"])
	}

	if runtime == "runsc" {
		// A hibernate's wake restores the processes: none starts twice.
		if _, err := d.c.Hibernate(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.Wake(ctx, id); err != nil {
			t.Fatal(err)
		}
		once("after the wake of a hibernate")
		time.Sleep(time.Second)
		for _, tag := range []string{"web", "ticker"} {
			if r := running(tag); len(r) != 1 || r[0].ID != runs[tag] {
				t.Fatalf("after the wake of a hibernate %s runs as %+v, before %s", tag, r, runs[tag])
			}
		}
	} else {
		// A daemon restart keeps the sandbox and its processes: none
		// starts twice.
		d.stop()
		d.start()
		once("after a daemon restart")
		time.Sleep(time.Second)
		for _, tag := range []string{"web", "ticker"} {
			if r := running(tag); len(r) != 1 || r[0].ID != runs[tag] {
				t.Fatalf("after a daemon restart %s runs as %+v, before %s", tag, r, runs[tag])
			}
		}
		// A host reboot while the daemon is down: the daemon brings the
		// persistent sandbox back, and its supervised processes with it.
		d.stop()
		simulateReboot(t, d, id)
		d.start()
		back("after a host reboot", runs)
		// Running is not yet listening: the server binds its port a moment
		// after it starts (on a loaded host, a moment too late for one ask).
		waitFor(t, "the page after a host reboot", func() bool {
			resp, err := hc.Get("http://berth/v1/sandboxes/" + id + "/ports/8000/index.html")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode != http.StatusBadGateway
		})
		once("after a host reboot")
	}

	// A fork's child starts the parent's supervised processes at its first
	// boot, as any boot of the parent would; the unsupervised ones stay
	// the parent's.
	fr, err := d.c.Fork(ctx, id, api.ForkRequest{Count: 1})
	if err != nil || len(fr.Children) != 1 {
		t.Fatalf("fork: %+v %v", fr, err)
	}
	child := fr.Children[0].ID
	waitFor(t, "the child's supervised processes", func() bool {
		tags := map[string]int{}
		for _, p := range procList(t, d, child) {
			if p.State == "running" || p.State == "restarting" {
				tags[p.Tag]++
			}
		}
		return tags["web"] == 1 && tags["plain"] == 0 && len(tags) >= 2
	})
	if _, err := d.c.DeleteSandbox(ctx, child, true); err != nil {
		t.Fatal(err)
	}

	// Killed, it stays gone across a stop/start.
	if _, e, code := d.cli("kill", id, "web"); code != 0 {
		t.Fatalf("kill web: %s", e)
	}
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ticker after the last start", func() bool { return len(running("ticker")) == 1 })
	time.Sleep(time.Second)
	if r := running("web"); len(r) != 0 {
		t.Fatalf("a killed supervised process came back: %+v", r)
	}
	if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
}

// simulateReboot does to the stopped daemon d's sandboxes ids what a
// host reboot does: every process killed, every mount (roots, volumes,
// the storage pool) gone, cgroups gone, runc's state left stale.
func simulateReboot(t *testing.T, d *daemon, ids ...string) {
	t.Helper()
	parent := "/" + local.InstanceName(d.dataDir)
	for _, id := range ids {
		if err := cgroups.Destroy(parent + "/" + id); err != nil {
			t.Fatal(err)
		}
	}
	ms, _ := overlay.MountsUnder(d.dataDir)
	slices.Reverse(ms)
	for _, m := range ms {
		if err := overlay.Unmount(m); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := overlay.MountsUnder(d.dataDir); len(left) > 0 {
		t.Fatalf("mounts left after the simulated reboot: %v", left)
	}
}
