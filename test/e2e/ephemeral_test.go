package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
)

func TestRunPrintsAndExitsWithCode(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	out, errOut, code := d.cli("run", "--", "sh", "-c", "echo hi; echo err >&2; exit 3")
	if out != "hi\n" || code != 3 || !strings.Contains(errOut, "err") {
		t.Fatalf("run: stdout %q stderr %q code %d", out, errOut, code)
	}
	// The one-shot sandbox is gone and left a tombstone.
	sbs, err := d.c.ListSandboxes(context.Background(), true)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("want one sandbox record, got %+v %v", sbs, err)
	}
	waitState(t, d, sbs[0].ID, "deleted", 5*time.Second)
	if sb, _ := d.c.GetSandbox(context.Background(), sbs[0].ID); sb.Cause != "client" {
		t.Fatalf("tombstone cause %q", sb.Cause)
	}
}

func TestCreateExecFilesDelete(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	id, errOut, code := d.cli("create", "--name", "work", "--env", "GREETING=hello", "--label", "team=ml")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id = strings.TrimSpace(id)
	sb, err := d.c.GetSandbox(ctx, "work")
	if err != nil || sb.ID != id || sb.State != "running" || sb.Labels["team"] != "ml" {
		t.Fatalf("get by name: %+v %v", sb, err)
	}
	if !sb.Isolation.UserNamespace || sb.Isolation.Seccomp == "" {
		t.Fatalf("isolation not reported: %+v", sb.Isolation)
	}
	// Sandbox root is not host root; env and hostname are set.
	out, _, code := d.cli("exec", id, "--", "sh", "-c", "id -u; cat /proc/self/uid_map; echo $GREETING; hostname")
	f := strings.Fields(out)
	if code != 0 || len(f) < 6 || f[0] != "0" || f[2] == "0" || f[4] != "hello" {
		t.Fatalf("exec: %q code %d", out, code)
	}
	// The host's /usr reaches its chosen commands through
	// /etc/alternatives, which the built-in template mirrors.
	if out, e, code := d.cli("exec", id, "--", "sh", "-c", "which sh && echo 'a b' | awk '{print $2}'"); code != 0 || out != "/usr/bin/sh\nb\n" {
		t.Fatalf("which and awk in the base template: %q %q code %d", out, e, code)
	}
	// Files round trip through the CLI.
	local := t.TempDir()
	os.WriteFile(local+"/in.txt", []byte("payload"), 0o644)
	if _, e, c := d.cli("cp", local+"/in.txt", id+":/tmp/in.txt"); c != 0 {
		t.Fatalf("cp in: %s", e)
	}
	out, _, _ = d.cli("exec", id, "--", "cat", "/tmp/in.txt")
	if out != "payload" {
		t.Fatalf("file content %q", out)
	}
	d.cli("exec", id, "--", "sh", "-c", "mkdir -p /tmp/d/e && echo x > /tmp/d/e/f")
	if _, e, c := d.cli("cp", id+":/tmp/d", local+"/d"); c != 0 {
		t.Fatalf("cp out: %s", e)
	}
	if b, err := os.ReadFile(local + "/d/e/f"); err != nil || string(b) != "x\n" {
		t.Fatalf("copied dir: %q %v", b, err)
	}
	// Interactive exec streams stdin.
	out, e, code := d.cliIn("line one\nline two\n", "exec", "-i", id, "--", "cat")
	if code != 0 || out != "line one\nline two\n" {
		t.Fatalf("exec -i: %q %q %d", out, e, code)
	}
	// ls shows it in JSON with the fields the surface promises.
	out, _, _ = d.cli("ls", "-o", "json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 {
		t.Fatalf("ls -o json: %q %v", out, err)
	}
	for _, k := range []string{"id", "name", "state", "template", "persistent"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("ls -o json lacks %q", k)
		}
	}
	if _, e, c := d.cli("rm", id); c != 0 {
		t.Fatalf("rm: %s", e)
	}
	sb, err = d.c.GetSandbox(ctx, id)
	if err != nil || sb.State != "deleted" || sb.DeletedAt == nil {
		t.Fatalf("tombstone: %+v %v", sb, err)
	}
	// Exec in a deleted sandbox is a 409 naming the state, via the CLI too.
	_, e, code = d.cli("exec", id, "--", "true")
	if code == 0 || !strings.Contains(e, "deleted") {
		t.Fatalf("exec after rm: code %d stderr %q", code, e)
	}
	evs, err := d.c.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for _, ev := range evs {
		if ev.Type == "state" {
			seq = append(seq, ev.To)
		}
	}
	if strings.Join(seq, ",") != "creating,running,deleting,deleted" {
		t.Fatalf("state events: %v", seq)
	}
}

func TestTimeoutKillsAndDestroys(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A command that would outlive the timeout is cut off.
	start := time.Now()
	_, err = d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("exec outlived the sandbox timeout")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "deleted" {
			if got.Cause != "policy" || !strings.Contains(got.Reason, "timeout") {
				t.Fatalf("deleted with cause %q reason %q", got.Cause, got.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox not destroyed after its timeout: %s", got.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("timeout of 1s acted on after %s", el)
	}
	if cgroups.Exists("/" + local.InstanceName(d.dataDir) + "/" + sb.ID) {
		t.Fatal("cgroup left after timeout")
	}
}

func TestForkFloodStoppedAtPidsLimit(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	// Try to start 5,000 sleeping processes; the kernel refuses past 64.
	var stderr bytes.Buffer
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{
		Cmd:            []string{"sh", "-c", `i=0; while [ $i -lt 5000 ]; do sleep 30 & i=$((i+1)); done; echo all-started`},
		TimeoutSeconds: 20,
	}, io.Discard, &stderr)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if exit.Code == 0 || !strings.Contains(stderr.String(), "fork") {
		t.Fatalf("flood was not stopped: %+v stderr %q", exit, stderr.String())
	}
	procs := cgroups.Procs("/" + local.InstanceName(d.dataDir) + "/" + sb.ID)
	if len(procs) > 64 || len(procs) < 32 {
		t.Errorf("flood left %d processes in the sandbox; limit 64", len(procs))
	}
	// The host stays responsive while the sandbox sits at its limit.
	t0 := time.Now()
	if err := exec.Command("true").Run(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > time.Second {
		t.Errorf("host process start took %s during the flood", el)
	}
	// And the flood is removable: delete kills every process.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := len(cgroups.Procs("/" + local.InstanceName(d.dataDir) + "/" + sb.ID)); n != 0 {
		t.Fatalf("%d processes survive delete", n)
	}
}

func TestMemoryHogIsOOMKilled(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	// Allocate and touch 2 GiB: bounded, so a missing limit fails the
	// test (the host has far more) instead of taking the machine down.
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{
		Cmd: []string{"python3", "-c", "b = bytearray(2 << 30)"}, TimeoutSeconds: 60,
	}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !exit.OOMKilled || exit.Signal != "SIGKILL" {
		t.Fatalf("want oom_killed by SIGKILL, got %+v", exit)
	}
	// The sandbox itself survives its process's OOM kill.
	if _, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); err != nil {
		t.Fatalf("sandbox unusable after OOM kill: %v", err)
	}
}

func daemonRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// slowWriter reads like a slow client: the flood must wait for it, not
// pile up in the daemon.
type slowWriter struct{ n int64 }

func (w *slowWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	time.Sleep(50 * time.Microsecond)
	return len(p), nil
}

func TestStdoutFloodDoesNotGrowDaemon(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	before := daemonRSS(t, d.pid())
	var peak int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				peak = max(peak, daemonRSS(t, d.pid()))
			}
		}
	}()
	w := &slowWriter{}
	// 256 MiB: four times the growth allowed, so a daemon that buffered
	// what its slow reader has not taken would fail.
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"head", "-c", "268435456", "/dev/zero"}}, w, io.Discard)
	close(stop)
	wg.Wait()
	if err != nil || exit.Code != 0 {
		t.Fatalf("flood: %+v %v", exit, err)
	}
	if w.n != 256<<20 {
		t.Fatalf("received %d bytes, want %d", w.n, 256<<20)
	}
	if growth := peak - before; growth > 64<<20 {
		t.Fatalf("daemon RSS grew by %d MiB during a 256 MiB flood", growth>>20)
	}
}

func TestPathEscapeAndTarSlipRejected(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A symlink to / and one to .. inside the sandbox point at its own
	// root, never the host's.
	d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "ln -s / /tmp/root; ln -s ../../.. /tmp/up; echo sandbox > /etc/marker"}}, io.Discard, io.Discard)
	var buf bytes.Buffer
	for _, p := range []string{"/tmp/root/etc/marker", "/../../../etc/marker", "/tmp/up/etc/marker"} {
		buf.Reset()
		if _, _, err := d.c.ReadFile(ctx, sb.ID, p, &buf); err != nil || buf.String() != "sandbox\n" {
			t.Errorf("read %s: %q %v (must resolve inside the sandbox)", p, buf.String(), err)
		}
	}
	// Host files are never reachable: the data dir's admin key is not visible.
	buf.Reset()
	if _, _, err := d.c.ReadFile(ctx, sb.ID, d.dataDir+"/admin.key", &buf); !client.IsNotFound(err) {
		t.Errorf("host path read: %v %q", err, buf.String())
	}
	// Magic links are refused.
	if _, _, err := d.c.ReadFile(ctx, sb.ID, "/proc/self/root/etc/hostname", io.Discard); err == nil {
		t.Error("magic link /proc/self/root was followed")
	}
	// Tar slip entries fail with 400 and write nothing.
	sentinel := "/tmp/sentinel-" + sb.ID
	os.Remove(sentinel)
	for _, name := range []string{"../../../../../../tmp/sentinel-" + sb.ID, "/tmp/sentinel-" + sb.ID} {
		tb := tarOf(t, name, "x")
		err := d.c.WriteTar(ctx, sb.ID, "/workspace", bytes.NewReader(tb))
		var ce *client.Error
		if !asClientError(err, &ce) || ce.Status != 400 {
			t.Errorf("tar entry %q: want 400, got %v", name, err)
		}
	}
	if _, err := os.Stat(sentinel); err == nil {
		t.Fatal("tar slip wrote to the host")
	}
	// Through a symlink planted in the destination.
	d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"ln", "-s", "/etc", "/workspace/link"}}, io.Discard, io.Discard)
	err = d.c.WriteTar(ctx, sb.ID, "/workspace", bytes.NewReader(tarOf(t, "link/passwd", "pwned")))
	var ce *client.Error
	if !asClientError(err, &ce) || ce.Status != 400 {
		t.Errorf("tar through symlink: want 400, got %v", err)
	}
	buf.Reset()
	d.c.ReadFile(ctx, sb.ID, "/etc/passwd", &buf)
	if strings.Contains(buf.String(), "pwned") {
		t.Fatal("tar wrote through a symlink")
	}
}

func TestBadInputGetsStableErrors(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/sandboxes", `{"resources":{"memory_bytes":1}}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{"bogus":1}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{"template":"nope"}`, 404, "not_found"},
		{"POST", "/v1/sandboxes", `{"name":"../x"}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{"env":{"A=B":"c"}}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{"timeout_seconds":-1}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "too_large"},
		{"GET", "/v1/sandboxes/doesnotexist", ``, 404, "not_found"},
		{"DELETE", "/v1/sandboxes/doesnotexist", ``, 404, "not_found"},
		{"POST", "/v1/sandboxes/doesnotexist/exec", `{"cmd":["true"]}`, 404, "not_found"},
		// No command runs the template's CMD, as docker run does (base's is
		// /bin/sh): a template naming none is refused before anything is
		// made (TestDockerfileBuilds).
		{"POST", "/v1/run", `{"sandbox":{"template":"no-such-template"},"exec":{"cmd":[]}}`, 404, "not_found"},
		{"GET", "/v1/nothing", ``, 404, "not_found"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://berth"+c.path, strings.NewReader(c.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.status || body.Error.Code != c.code || body.Error.Message == "" {
			t.Errorf("%s %s %.40s: got %d %+v, want %d %s", c.method, c.path, c.body, resp.StatusCode, body.Error, c.status, c.code)
		}
	}
	// Nothing partial was left: no sandbox exists.
	sbs, err := d.c.ListSandboxes(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State != "deleted" {
			t.Errorf("bad input left a live sandbox: %+v", sb)
		}
	}
}

func TestTCPNeedsAPIKey(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	// Restart with a TCP listener on loopback.
	d.stop()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d.startWith("--insecure-listen", addr)
	resp, err := http.Get("http://" + addr + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no key: status %d", resp.StatusCode)
	}
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(d.dataDir + "/admin.key"); st.Mode().Perm() != 0o600 {
		t.Fatalf("admin key mode %v", st.Mode())
	}
	c, err := client.New("http://"+addr, strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(context.Background(), false); err != nil {
		t.Fatalf("with key: %v", err)
	}
	bad, _ := client.New("http://"+addr, "berth_wrong")
	if _, err := bad.ListSandboxes(context.Background(), false); err == nil {
		t.Fatal("wrong key accepted")
	}
}

func TestRunClientDeathDestroysSandbox(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	cmd := exec.Command(berthBin, "run", "--", "sleep", "300")
	cmd.Env = append(os.Environ(), "BERTH_HOST=unix://"+d.socket)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var id string
	deadline := time.Now().Add(20 * time.Second)
	for id == "" {
		sbs, _ := d.c.ListSandboxes(ctx, false)
		for _, sb := range sbs {
			if sb.State == "running" {
				id = sb.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("run did not create a sandbox")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The client dies without a chance to clean up.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for {
		sb, err := d.c.GetSandbox(ctx, id)
		if err == nil && sb.State == "deleted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox of a dead client still %s", sb.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
