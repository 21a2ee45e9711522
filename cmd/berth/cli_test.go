package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/daemon"
	"github.com/berth-sh/berth/internal/engine"
)

// fakeDaemon is just enough of the API to drive the CLI end to end.
type fakeDaemon struct {
	mu         sync.Mutex
	sandboxes  map[string]api.Sandbox
	files      map[string][]byte // "id:path" -> contents
	lastCreate api.CreateSandboxRequest
	lastRun    api.RunRequest
	lastExec   api.ExecRequest
	volumes    map[string]api.Volume
	afterQuery string // the after parameter of the last events request
	fork       forkState
}

func newFakeDaemon(t *testing.T) (*fakeDaemon, string) {
	f := &fakeDaemon{
		sandboxes: map[string]api.Sandbox{},
		files:     map[string][]byte{},
	}
	created := time.Now().Add(-5 * time.Minute).UTC()
	f.sandboxes["sb1"] = api.Sandbox{ID: "sb1", Name: "dev", Template: "base", State: "running", Persistent: true, CreatedAt: created,
		Resources: api.Resources{MemoryBytes: 256 << 20}, Isolation: api.Isolation{Runtime: "runc", UserNamespace: true},
		Storage: &api.Volume{Name: "sb1-workspace", SizeBytes: 1 << 30, UsedBytes: 12 << 20, Inodes: 65536, UsedInodes: 120}}
	f.sandboxes["sb2"] = api.Sandbox{ID: "sb2", Template: "base", State: "paused", CreatedAt: created}

	notFound := func(w http.ResponseWriter, what string) {
		writeTestJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: what + " not found"}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := []api.Sandbox{f.sandboxes["sb1"], f.sandboxes["sb2"]}
		if r.URL.Query().Get("empty") != "" {
			list = nil
		}
		writeTestJSON(w, 200, list)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.sandboxes[r.PathValue("id")]
		if !ok {
			notFound(w, `sandbox "`+r.PathValue("id")+`"`)
			return
		}
		writeTestJSON(w, 200, sb)
	})
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.lastCreate = api.CreateSandboxRequest{}
		_ = json.NewDecoder(r.Body).Decode(&f.lastCreate)
		writeTestJSON(w, 201, api.Sandbox{ID: "sbnew", Name: f.lastCreate.Name, State: "running", Template: "base"})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.sandboxes[r.PathValue("id")]
		if !ok {
			notFound(w, `sandbox "`+r.PathValue("id")+`"`)
			return
		}
		sb.State = "deleted"
		writeTestJSON(w, 200, sb)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.afterQuery = r.URL.Query().Get("after")
		f.mu.Unlock()
		writeTestJSON(w, 200, []api.Event{{ID: 1, SandboxID: r.PathValue("id"), Type: "state", From: "creating", To: "running", Actor: "user"}})
	})
	execStream := func(w http.ResponseWriter, cmd []string) {
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.ExecEvent{Stream: "stdout", Data: []byte(strings.Join(cmd, " ") + "\n")})
		_ = enc.Encode(api.ExecEvent{Stream: "stderr", Data: []byte("warn\n")})
		code := 0
		if cmd[0] == "false" {
			code = 3
		}
		_ = enc.Encode(api.ExecEvent{Exit: &api.ExecExit{Code: code}})
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.lastExec)
		cmd := f.lastExec.Cmd
		f.mu.Unlock()
		execStream(w, cmd)
	})
	mux.HandleFunc("POST /v1/run", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.lastRun)
		cmd := f.lastRun.Exec.Cmd
		f.mu.Unlock()
		w.Header().Set("X-Berth-Sandbox-Id", "sbrun")
		execStream(w, cmd)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		p := r.URL.Query().Get("path")
		if p == "/work" {
			writeTestJSON(w, 200, api.FileInfo{Name: "work", Path: p, IsDir: true})
			return
		}
		b, ok := f.files[r.PathValue("id")+":"+p]
		if !ok {
			notFound(w, "file "+p)
			return
		}
		writeTestJSON(w, 200, api.FileInfo{Name: filepath.Base(p), Path: p, Size: int64(len(b)), Mode: 0o640})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		p := r.URL.Query().Get("path")
		b, ok := f.files[r.PathValue("id")+":"+p]
		if !ok {
			notFound(w, "file "+p)
			return
		}
		w.Header().Set("X-Berth-File-Mode", "0640")
		w.Write(b)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		p := r.URL.Query().Get("path")
		f.files[r.PathValue("id")+":"+p] = b
		writeTestJSON(w, 200, api.FileInfo{Path: p, Size: int64(len(b))})
	})
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, []api.Template{{Name: "base", Builtin: true, Layers: []string{"sha256:x"}}})
	})
	mux.HandleFunc("GET /v1/doctor", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, api.DoctorReport{Runtime: "runc", Findings: []api.DoctorFinding{{Kind: "mount", Detail: "/x"}}})
	})
	mux.HandleFunc("POST /v1/doctor/fix", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, api.DoctorReport{Runtime: "runc", Healthy: true, Findings: []api.DoctorFinding{{Kind: "mount", Detail: "/x", Fixed: true}}})
	})
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, api.Version{Version: "v0.1.0", Go: "go1.26", Runtime: "runc,pod", Classes: []api.RuntimeClass{
			{Name: "runc", Capabilities: api.RuntimeCaps{Freeze: true, Capture: true, RootLayer: true, Egress: true, Pool: true, Rename: true}},
			{Name: "pod\x1b[2J", Capabilities: api.RuntimeCaps{}}}})
	})
	f.addPersistRoutes(mux)
	f.addForkRoutes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// runCLI runs the CLI against host and returns stdout, stderr and the exit
// code.
func runCLI(t *testing.T, host, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	code := execute(context.Background(), root, append([]string{"--host", host}, args...), &errb)
	return out.String(), errb.String(), code
}

func TestListJSONShape(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "ls", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("ls -o json is not a JSON array: %v\n%s", err, out)
	}
	if len(list) != 2 {
		t.Fatalf("got %d objects", len(list))
	}
	for _, obj := range list {
		for _, k := range []string{"id", "name", "state", "template", "persistent"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("object %v lacks %q", obj, k)
			}
		}
	}
	if list[0]["persistent"] != true || list[0]["id"] != "sb1" {
		t.Errorf("first = %v", list[0])
	}
}

func TestListTable(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, _, code := runCLI(t, host, "", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "ID NAME TEMPLATE STATE PERSISTENT STORAGE AGE" {
		t.Errorf("header = %q", lines[0])
	}
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "sb1 dev base running yes 12MiB/1GiB 5m" {
		t.Errorf("row = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "sb2 - base paused no - 5m" {
		t.Errorf("row = %q", lines[2])
	}
}

func TestInspectAndEvents(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, _, code := runCLI(t, host, "", "inspect", "sb1", "-o", "json")
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != "sb1" || sb.Resources.MemoryBytes != 256<<20 {
		t.Fatalf("inspect -o json: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, host, "", "inspect", "sb1")
	if code != 0 || !strings.Contains(out, "memory=256MiB") || !strings.Contains(out, "user_namespace=true") {
		t.Errorf("inspect:\n%s", out)
	}
	out, _, code = runCLI(t, host, "", "events", "sb1", "-o", "json")
	var evs []api.Event
	if code != 0 || json.Unmarshal([]byte(out), &evs) != nil || len(evs) != 1 || evs[0].To != "running" {
		t.Errorf("events -o json: exit %d\n%s", code, out)
	}
}

func TestNotFoundIsOneLine(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "inspect", "nope")
	if code != 1 || out != "" || errs != "berth: sandbox \"nope\" not found\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestCreateMapsFlags(t *testing.T) {
	f, host := newFakeDaemon(t)
	t.Setenv("BERTH_TEST_TOKEN", "tok")
	out, errs, code := runCLI(t, host, "", "create", "--name", "job", "--template", "py", "--persistent",
		"--timeout", "90", "--env", "A=1", "--env", "BERTH_TEST_TOKEN", "--label", "team=ml",
		"--cpus", "1.5", "--memory", "256m", "--pids", "64", "--disk", "2g", "--network", "none", "--workdir", "/work")
	if code != 0 || out != "sbnew\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	req := f.lastCreate
	if req.Name != "job" || req.Template != "py" || !req.Persistent || req.TimeoutSeconds != 90 ||
		req.Env["A"] != "1" || req.Env["BERTH_TEST_TOKEN"] != "tok" || req.Labels["team"] != "ml" ||
		req.Resources.CPUs != 1.5 || req.Resources.MemoryBytes != 256<<20 || req.Resources.Pids != 64 ||
		req.Resources.DiskBytes != 2<<30 || req.Network != "none" || req.Workdir != "/work" {
		t.Errorf("request = %+v", req)
	}
	if _, errs, code := runCLI(t, host, "", "create", "--network", "host"); code != 1 || !strings.Contains(errs, "want none or egress") {
		t.Errorf("bad network: exit %d, %q", code, errs)
	}
}

func TestExecExitCode(t *testing.T) {
	f, host := newFakeDaemon(t)
	for _, tc := range []struct {
		args     []string
		wantCmd  string
		wantCode int
	}{
		{[]string{"exec", "sb1", "--", "echo", "hi"}, "echo hi", 0},
		{[]string{"exec", "sb1", "ls", "-la", "--", "x"}, "ls -la -- x", 0},
		{[]string{"exec", "-e", "A=1", "-w", "/tmp", "sb1", "false"}, "false", 3},
	} {
		out, errs, code := runCLI(t, host, "", tc.args...)
		if code != tc.wantCode || out != tc.wantCmd+"\n" || errs != "warn\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errs)
		}
		if got := strings.Join(f.lastExec.Cmd, " "); got != tc.wantCmd {
			t.Errorf("%v: cmd = %q", tc.args, got)
		}
	}
	if f.lastExec.Env["A"] != "1" || f.lastExec.Workdir != "/tmp" {
		t.Errorf("exec request = %+v", f.lastExec)
	}
	if _, errs, code := runCLI(t, host, "", "exec", "sb1", "--"); code != 1 || !strings.Contains(errs, "needs a sandbox id and a command") {
		t.Errorf("exec without command: exit %d, %q", code, errs)
	}
}

func TestRunExitCodeAndRequest(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "some input", "run", "-i", "--memory", "1g", "--timeout", "5s", "--", "false", "-x")
	if code != 3 || out != "false -x\n" || errs != "warn\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	r := f.lastRun
	if r.Sandbox.Resources.MemoryBytes != 1<<30 || r.Exec.TimeoutSeconds != 5 || r.Sandbox.TimeoutSeconds <= 5 ||
		string(r.Exec.Stdin) != "some input" {
		t.Errorf("run request = %+v", r)
	}
	if out, _, code := runCLI(t, host, "", "run", "echo", "ok"); code != 0 || out != "echo ok\n" {
		t.Errorf("run without --: exit %d, %q", code, out)
	}
}

func TestRm(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "rm", "-f", "sb1", "nope", "sb2")
	if code != 1 || out != "sb1\nsb2\n" || errs != "berth: sandbox \"nope\" not found\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, _, code = runCLI(t, host, "", "rm", "sb1", "-o", "json")
	var list []api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].State != "deleted" {
		t.Errorf("rm -o json: exit %d, %s", code, out)
	}
}

func TestTemplateDoctorVersion(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, _, code := runCLI(t, host, "", "template", "ls", "-o", "json")
	var ts []api.Template
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 1 || ts[0].Name != "base" {
		t.Errorf("template ls -o json: exit %d, %s", code, out)
	}
	out, errs, code := runCLI(t, host, "", "doctor")
	if code != 1 || !strings.Contains(out, "mount") || !strings.Contains(errs, "berth doctor --fix") {
		t.Errorf("doctor: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, errs, code = runCLI(t, host, "", "doctor", "--fix", "-o", "json")
	var rep api.DoctorReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.Healthy {
		t.Errorf("doctor --fix: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, _, code = runCLI(t, host, "", "version", "-o", "json")
	var v versionReport
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Server == nil || v.Server.Version != "v0.1.0" || v.Client.Version == "" {
		t.Errorf("version -o json: exit %d, %s", code, out)
	}
	out, _, code = runCLI(t, host, "", "version")
	if code != 0 || !strings.Contains(out, "Class runc: can freeze, capture, root_layer, egress, pool, rename; cannot checkpoint\n") ||
		!strings.Contains(out, "can -; cannot freeze, checkpoint, capture, root_layer, egress, pool, rename\n") || strings.Contains(out, "\x1b") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

func TestCpFile(t *testing.T) {
	f, host := newFakeDaemon(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(src, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Into an existing directory: keeps the base name.
	if _, errs, code := runCLI(t, host, "", "cp", src, "sb1:/work"); code != 0 {
		t.Fatalf("cp up: exit %d, %s", code, errs)
	}
	if string(f.files["sb1:/work/in.txt"]) != "hello" {
		t.Fatalf("files = %v", f.files)
	}
	// Down into a local directory and to a new name.
	if _, errs, code := runCLI(t, host, "", "cp", "sb1:/work/in.txt", dir+"/"); code != 0 {
		t.Fatalf("cp down: exit %d, %s", code, errs)
	}
	if _, errs, code := runCLI(t, host, "", "cp", "sb1:/work/in.txt", filepath.Join(dir, "out.txt")); code != 0 {
		t.Fatalf("cp down: exit %d, %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("out.txt = %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "out.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640 from the daemon", fi.Mode())
	}
	if _, errs, code := runCLI(t, host, "", "cp", "sb1:/missing", dir); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("missing: exit %d, %q", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestOutputFlagRejectsUnknown(t *testing.T) {
	_, host := newFakeDaemon(t)
	_, errs, code := runCLI(t, host, "", "ls", "-o", "yaml")
	if code != 1 || !strings.Contains(errs, "want table or json") || strings.Count(errs, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

func TestServeDiskDefaultFlag(t *testing.T) {
	serve := func(args ...string) daemon.Config {
		t.Helper()
		var got daemon.Config
		cmd := newServeCmdWith(func(_ context.Context, cfg daemon.Config) error { got = cfg; return nil })
		cmd.SetArgs(append(args, "--log-level", "error"))
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if c := serve(); c.DiskDefault != engine.DefaultDiskBytes {
		t.Errorf("no flag: DiskDefault %d, want %d", c.DiskDefault, engine.DefaultDiskBytes)
	}
	if c := serve("--disk-default", "2g"); c.DiskDefault != 2<<30 {
		t.Errorf("--disk-default 2g: %d", c.DiskDefault)
	}
	if c := serve("--disk-default", "0"); c.DiskDefault >= 0 {
		t.Errorf("--disk-default 0: %d, want negative (no cap)", c.DiskDefault)
	}
}

func TestServeRetentionFlag(t *testing.T) {
	serve := func(args ...string) (daemon.Config, error) {
		t.Helper()
		var got daemon.Config
		cmd := newServeCmdWith(func(_ context.Context, cfg daemon.Config) error { got = cfg; return nil })
		cmd.SetArgs(append(args, "--log-level", "error"))
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		return got, cmd.ExecuteContext(context.Background())
	}
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 7 * 24 * time.Hour},
		{[]string{"--retention", "36h"}, 36 * time.Hour},
		{[]string{"--retention", "1d"}, 24 * time.Hour},
		{[]string{"--retention", "0"}, 0},
	} {
		if c, err := serve(tc.args...); err != nil || c.Retention != tc.want {
			t.Errorf("%v: Retention %v (%v), want %v", tc.args, c.Retention, err, tc.want)
		}
	}
	if _, err := serve("--retention", "-1h"); err == nil {
		t.Error("a negative --retention is accepted")
	}
}

// TestTableIsTermSafe: a cell holding what sandbox code chose (a file
// name, an argv, an agent's message) reaches the terminal with its
// control characters written out, the table's own tabs and newlines kept.
func TestTableIsTermSafe(t *testing.T) {
	var buf bytes.Buffer
	tw := newTable(&buf)
	fmt.Fprintf(tw, "NAME\tSIZE\n")
	fmt.Fprintf(tw, "%s\t%d\n", "evil\x1b]0;owned\x07\x1b[2J\u009b31m\xffname", 3)
	fmt.Fprintf(tw, "%s\t%d\n", "héllo ✓", 4)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, c := range out {
		if (c < 0x20 && c != '\n') || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == utf8.RuneError {
			t.Fatalf("a control character %U reached the terminal:\n%q", c, out)
		}
	}
	for _, want := range []string{`evil\x1b]0;owned\x07\x1b[2J\u009b31m\xffname`, "héllo ✓", "NAME"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 {
		t.Errorf("%d lines:\n%s", len(lines), out)
	}
}
