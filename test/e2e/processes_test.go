package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// Background processes (#14 item 1) and exec's shell exit codes (item 6),
// on runc and runsc.
func TestProcessesRunc(t *testing.T) {
	parallel(t)
	processesScenario(t, startDaemon(t), "")
}
func TestProcessesRunsc(t *testing.T) {
	parallel(t)
	processesScenario(t, startRunscDaemon(t), "runsc")
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func procList(t *testing.T, d *daemon, id string) []api.Process {
	t.Helper()
	out, errOut, code := d.cli("ps", id, "-o", "json")
	if code != 0 {
		t.Fatalf("ps: %s", errOut)
	}
	var ps []api.Process
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("ps -o json: %v: %q", err, out)
	}
	return ps
}

func procNamed(ps []api.Process, ref string) (api.Process, bool) {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].ID == ref || ps[i].Tag == ref {
			return ps[i], true
		}
	}
	return api.Process{}, false
}

func processesScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: runtime, Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID

	// One client starts a web server in the background and goes away.
	out, errOut, code := d.cli("exec", "-d", "--tag", "web", id, "--",
		"sh", "-c", "mkdir -p /tmp/www && cd /tmp/www && echo served > index.html && exec python3 -u -m http.server 8000")
	pid := strings.TrimSpace(out)
	if code != 0 || pid == "" {
		t.Fatalf("exec -d: %d %q %q", code, out, errOut)
	}
	if p, ok := procNamed(procList(t, d, id), pid); !ok || p.Tag != "web" || p.State != "running" || p.Argv[0] != "sh" {
		t.Fatalf("ps after exec -d: %+v", procList(t, d, id))
	}
	hc := unixHTTP(d)
	if code, body := getPort(t, hc, id, "8000", "index.html"); code != 200 || body != "served\n" {
		t.Fatalf("port proxy to the background server: %d %q", code, body)
	}
	// A second client sees its earlier output: the start banner and the
	// request just made.
	out, _, code = d.cli("logs", id, "web")
	if code != 0 || !strings.Contains(out, "Serving HTTP on") {
		t.Fatalf("logs (stdout): %d %q", code, out)
	}
	var stdout, stderr bytes.Buffer
	if ex, err := d.c.ProcessLogs(ctx, id, pid, false, &stdout, &stderr, nil); err != nil || ex != nil ||
		!strings.Contains(stderr.String(), "GET /index.html") {
		t.Fatalf("logs by id: %+v %v stdout %q stderr %q", ex, err, stdout.String(), stderr.String())
	}
	// A follower sees the signal's effect and the exit.
	follow := exec.Command(berthBin, "logs", "-f", id, "web")
	follow.Env = append(os.Environ(), "BERTH_HOST=unix://"+d.socket)
	var fout bytes.Buffer
	follow.Stdout, follow.Stderr = &fout, &fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, errOut, code := d.cli("kill", "-s", "TERM", id, "web"); code != 0 {
		t.Fatalf("kill -s TERM: %s", errOut)
	}
	_, _, code = d.cli("wait", id, pid)
	if code != 128+15 {
		t.Fatalf("wait: exit %d, want 143", code)
	}
	err = follow.Wait()
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 143 || !strings.Contains(fout.String(), "Serving HTTP") {
		t.Fatalf("logs -f: %v %q", err, fout.String())
	}
	if p, _ := procNamed(procList(t, d, id), pid); p.State != "killed" || p.Exit == nil || p.Exit.Code != 143 {
		t.Fatalf("ps after the signal: %+v", p)
	}

	// Stdin to a background cat.
	out, _, _ = d.cli("exec", "-d", "--tag", "cat", id, "--", "cat")
	catID := strings.TrimSpace(out)
	if err := d.c.ProcessStdin(ctx, id, "cat", strings.NewReader("to "), false); err != nil {
		t.Fatal(err)
	}
	if err := d.c.ProcessStdin(ctx, id, catID, strings.NewReader("cat\n"), true); err != nil {
		t.Fatal(err)
	}
	if ex, err := d.c.WaitProcess(ctx, id, catID); err != nil || ex.Code != 0 {
		t.Fatalf("cat: %+v %v", ex, err)
	}
	if out, _, _ := d.cli("logs", id, catID); out != "to cat\n" {
		t.Fatalf("cat's output %q", out)
	}

	// The table marks a supervised process by its restart policy.
	if out, e, code := d.cli("exec", "-d", "--restart", "on-failure", "--tag", "svc", id, "--", "sleep", "600"); code != 0 {
		t.Fatalf("exec -d --restart: %d %q %q", code, out, e)
	}
	table, _, _ := d.cli("ps", id)
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		f := strings.Fields(l)
		rows[f[1]] = f
	}
	if !strings.Contains(table, "RESTART") || len(rows["svc"]) < 4 || rows["svc"][3] != "on-failure" || len(rows["web"]) < 4 || rows["web"][3] != "-" {
		t.Fatalf("ps table: want svc's RESTART on-failure and web's -:\n%s", table)
	}
	if _, e, code := d.cli("kill", id, "svc"); code != 0 {
		t.Fatalf("kill svc: %q", e)
	}

	// A background process survives its client's SIGKILL.
	out, _, _ = d.cli("exec", "-d", "--tag", "sleeper", id, "--", "sleep", "600")
	sleeper := strings.TrimSpace(out)
	attach := exec.Command(berthBin, "logs", "-f", id, "sleeper")
	attach.Env = append(os.Environ(), "BERTH_HOST=unix://"+d.socket)
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(attach.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	attach.Wait()
	time.Sleep(300 * time.Millisecond)
	if p, _ := procNamed(procList(t, d, id), sleeper); p.State != "running" {
		t.Fatalf("the background process died with its client: %+v", p)
	}

	// A PTY process is reattached: TERM is set, input goes through.
	out, _, code = d.cli("exec", "-d", "-t", "--tag", "tty", id, "--", "sh", "-c", `echo "term=$TERM"; read x; echo "got $x"`)
	if code != 0 {
		t.Fatalf("exec -d -t: %q", out)
	}
	var ttyOut bytes.Buffer
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ex, err := d.c.AttachProcess(actx, id, "tty", strings.NewReader("ping\n"), &ttyOut, &ttyOut, nil)
	cancel()
	if err != nil || ex.Code != 0 || !strings.Contains(ttyOut.String(), "term=xterm-256color") || !strings.Contains(ttyOut.String(), "got ping") {
		t.Fatalf("PTY reattach: %+v %v %q", ex, err, ttyOut.String())
	}

	// Exit codes of commands that cannot run, as shells give them.
	if _, errOut, code := d.cli("exec", id, "--", "no-such-command-xyz"); code != 127 || !strings.Contains(errOut, "not found") {
		t.Errorf("missing command: exit %d %q, want 127", code, errOut)
	}
	if _, errOut, code := d.cli("exec", id, "--", "/etc/passwd"); code != 126 {
		t.Errorf("not executable: exit %d %q, want 126", code, errOut)
	}

	// Processes belong to the sandbox: a stop ends them and says so.
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if p, _ := procNamed(procList(t, d, id), sleeper); p.State != "stopped" || p.Reason == "" {
		t.Fatalf("ps after stop: %+v", p)
	}
	if _, err := d.c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if p, _ := procNamed(procList(t, d, id), sleeper); p.State != "stopped" {
		t.Fatalf("ps after start: %+v", p)
	}
	if _, errOut, code := d.cli("wait", id, sleeper); code == 0 || !strings.Contains(errOut, "stop") {
		t.Fatalf("wait for a process of the earlier run: %d %q", code, errOut)
	}
	// Delete kills what runs.
	out, _, _ = d.cli("exec", "-d", id, "--", "sleep", "600")
	if strings.TrimSpace(out) == "" {
		t.Fatal("no id")
	}
	if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
}

// A template's service (#14 item 4): up after create, after a restart by
// its policy, after stop/start and after an auto-resume from stop by a
// port request.
func TestServiceRunc(t *testing.T) {
	parallel(t)
	serviceScenario(t, startDaemon(t), "")
}
func TestServiceRunsc(t *testing.T) {
	parallel(t)
	serviceScenario(t, startRunscDaemon(t), "runsc")
}

func serviceScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "svc.yaml")
	spec := `name: websvc
from: base
policy: {auto_resume: true}
service:
  cmd: [sh, -c, "mkdir -p /tmp/www && cd /tmp/www && echo svc-$$ > index.html && exec python3 -u -m http.server 8000"]
  restart: always
`
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := d.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply: %q %q", out, errOut)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "websvc", Runtime: runtime, Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	hc := unixHTTP(d)
	get := func(when string) string {
		t.Helper()
		var code int
		var body string
		waitFor(t, "the service "+when, func() bool {
			code, body = getPort(t, hc, id, "8000", "index.html")
			return code == 200
		})
		if !strings.HasPrefix(body, "svc-") {
			t.Fatalf("service %s: %d %q", when, code, body)
		}
		return body
	}
	first := get("after create")
	svc, ok := procNamed(procList(t, d, id), "service")
	if !ok || svc.State != "running" || svc.Restart != "always" {
		t.Fatalf("service process: %+v", procList(t, d, id))
	}
	// It ends (a signal that is not kill's stop): always restarts it.
	if _, errOut, code := d.cli("kill", "-s", "KILL", id, "service"); code != 0 {
		t.Fatal(errOut)
	}
	waitFor(t, "the service's restart", func() bool {
		p, _ := procNamed(procList(t, d, id), "service")
		return p.Restarts >= 1 && p.State == "running"
	})
	if again := get("after its restart"); again == first {
		t.Fatalf("the same run answers after the restart: %q", again)
	}
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	get("after stop/start")
	// Auto-resume from stop by a port request.
	if _, err := d.c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	resumed := get("after auto-resume")
	if cur, err := d.c.GetSandbox(ctx, id); err != nil || cur.State != "running" {
		t.Fatalf("after the port request: %+v %v", cur, err)
	}
	if runtime == "runsc" {
		// Hibernate keeps the service (the checkpoint holds it); the
		// wake restores that one and starts no second.
		before, _ := procNamed(procList(t, d, id), "service")
		if _, err := d.c.Hibernate(ctx, id); err != nil {
			t.Fatal(err)
		}
		if p, _ := procNamed(procList(t, d, id), "service"); p.State != "hibernated" {
			t.Fatalf("service of a hibernated sandbox: %+v", p)
		}
		if _, err := d.c.Wake(ctx, id); err != nil {
			t.Fatal(err)
		}
		if again := get("after wake"); again != resumed {
			t.Fatalf("after wake the service answers %q, before %q: not the restored one", again, resumed)
		}
		time.Sleep(500 * time.Millisecond)
		n := 0
		for _, p := range procList(t, d, id) {
			if p.Tag == "service" && p.State == "running" {
				n++
				if p.ID != before.ID {
					t.Errorf("service after wake is %s, before %s", p.ID, before.ID)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d services run after wake: %+v", n, procList(t, d, id))
		}
	}
	// kill (stop) ends the supervision.
	if _, errOut, code := d.cli("kill", id, "service"); code != 0 {
		t.Fatal(errOut)
	}
	time.Sleep(1500 * time.Millisecond)
	if p, _ := procNamed(procList(t, d, id), "service"); p.State != "killed" {
		t.Fatalf("service after kill: %+v", p)
	}
	if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}
