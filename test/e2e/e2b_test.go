package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/testenv"
)

// e2bDaemon starts a daemon with the E2B door on a loopback port and
// returns it, the door's base URL and the admin key.
func e2bDaemon(t *testing.T, extra ...string) (*daemon, string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, append([]string{"--e2b-listen", addr}, extra...)...)
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	return d, "http://" + addr, strings.TrimSpace(string(key))
}

// runE2BScript runs test/e2b/NAME (the unmodified e2b SDK) against the
// door at url with key and decodes what it prints.
func runE2BScript(t *testing.T, name, url, key string, out any, env ...string) {
	t.Helper()
	// Only the SDK's documented settings: the API and sandbox URLs, the key.
	runNode(t, nil, append([]string{"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + key}, env...), out, name)
}

// npmMu makes one npm install at a time: parallel tests would otherwise
// run npm ci in the same directory together.
var npmMu sync.Mutex

// npmInstall runs npm ci in dir unless every one of the files (relative
// to dir) is there already.
func npmInstall(t *testing.T, ctx context.Context, dir string, files ...string) {
	t.Helper()
	npmMu.Lock()
	defer npmMu.Unlock()
	var missing []error
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			missing = append(missing, err)
		}
	}
	if len(missing) == 0 {
		return
	}
	ci := exec.CommandContext(ctx, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
	ci.Dir = dir
	if b, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s (%v): %v\n%s", dir, errors.Join(missing...), err, b)
	}
}

// runNode runs node on args in test/e2b, after the prefix (nsenter) if
// any, with env added to the test's own minus the SDK's settings, and
// decodes what it prints into out.
func runNode(t *testing.T, prefix, env []string, out any, args ...string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", "e2b")
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the E2B test needs %s: run scripts/install-deps.sh (make deps)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npmInstall(t, ctx, dir, filepath.Join("node_modules", "e2b", "package.json"),
		filepath.Join("node_modules", "@e2b", "code-interpreter", "package.json"))
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(slices.Clone(prefix), node), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	t.Logf("node %v took %s", args, time.Since(start).Round(time.Millisecond))
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("%v printed %q: %v\nstderr: %s", args, stdout.String(), err, stderr.String())
	}
}

type e2bEvent struct{ Name, Type string }

// TestE2BSDK drives the E2B door with the real e2b SDK: create, commands
// (output, exit codes, a background command listed, connected to, fed
// stdin and killed), files (write, read, makeDir, rename, list, remove,
// watchDir), setTimeout, pause and connect with a file and a process
// kept, list by metadata, an unknown template, kill. Then berth itself
// shows nothing left.
func TestE2BSDK(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t)
	var got struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
		ID    string `json:"id"`
		Run   struct {
			Stdout, Stderr string
			ExitCode       int
		} `json:"run"`
		Fail struct {
			Thrown           bool
			CommandExitError bool
			ExitCode         int
			Stdout           string
		} `json:"fail"`
		BG struct {
			PID    int
			Listed bool
			Seen   string
			Killed bool
			Ended  string
			Gone   bool
		} `json:"bg"`
		Files struct {
			Read               string
			MadeDir, MadeAgain bool
			Names              []string
			ExistsA, ExistsB   bool
			Events             []e2bEvent
		} `json:"files"`
		Timeout struct {
			SecondsLeft int
			State       string
		} `json:"timeout"`
		Pause struct {
			Paused     bool
			State      string
			Kept       string
			Sleeper    bool
			StateAfter string
		} `json:"pause"`
		List struct {
			IDs      []string
			Metadata map[string]string
			None     int
		} `json:"list"`
		Fork struct {
			ID             string
			Kept           string
			ParentHasChild bool
			Killed         bool
		} `json:"fork"`
		Env string `json:"env"`
		PTY struct {
			PID          int
			Seen, Killed bool
		} `json:"pty"`
		Snapshot struct {
			ID                            string
			Listed                        bool
			Kept                          string
			Killed, Deleted, DeletedAgain bool
		} `json:"snapshot"`
		UnknownTemplate string `json:"unknownTemplate"`
		Killed          bool   `json:"killed"`
		KilledAgain     bool   `json:"killedAgain"`
		AfterKill       string `json:"afterKill"`
	}
	runE2BScript(t, "sdk.mjs", url, key, &got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s\nwhat it saw: %+v", got.Error, got)
	}
	if got.Run.Stdout != "hello\n" || got.Run.Stderr != "oops\n" || got.Run.ExitCode != 0 {
		t.Errorf("commands.run: %+v", got.Run)
	}
	if got.PTY.PID <= 0 || !got.PTY.Seen || !got.PTY.Killed {
		t.Errorf("pty: %+v", got.PTY)
	}
	if got.Env != "c1 r1\n/tmp\n0\n" {
		t.Errorf("create envs, run envs, cwd and user root: %q", got.Env)
	}
	if !got.Fail.Thrown || !got.Fail.CommandExitError || got.Fail.ExitCode != 3 || got.Fail.Stdout != "partial\n" {
		t.Errorf("a failing command: %+v", got.Fail)
	}
	if got.BG.PID <= 0 || !got.BG.Listed || !strings.Contains(got.BG.Seen, "got:ping") || !got.BG.Killed || !got.BG.Gone {
		t.Errorf("background command: %+v", got.BG)
	}
	f := got.Files
	if f.Read != "content of a" || !f.MadeDir || f.MadeAgain || f.ExistsA || f.ExistsB ||
		!slices.Equal(f.Names, []string{"b.txt:file", "sub:dir"}) {
		t.Errorf("files: %+v", f)
	}
	for _, want := range []e2bEvent{{"a.txt", "write"}, {"b.txt", "remove"}} {
		if !slices.Contains(f.Events, want) {
			t.Errorf("watchDir saw %+v, not %+v", f.Events, want)
		}
	}
	if got.Timeout.SecondsLeft < 80 || got.Timeout.SecondsLeft > 95 || got.Timeout.State != "running" {
		t.Errorf("setTimeout(90 s) then getInfo: %+v", got.Timeout)
	}
	if p := got.Pause; !p.Paused || p.State != "paused" || p.Kept != "kept" || !p.Sleeper || p.StateAfter != "running" {
		t.Errorf("pause and connect: %+v", p)
	}
	if f := got.Fork; f.ID == "" || f.ID == got.ID || f.Kept != "kept" || f.ParentHasChild || !f.Killed {
		t.Errorf("fork: %+v", f)
	}
	if sn := got.Snapshot; sn.ID == "" || !sn.Listed || sn.Kept != "kept" || !sn.Killed || !sn.Deleted || sn.DeletedAgain {
		t.Errorf("snapshots: %+v", sn)
	}
	if !slices.Contains(got.List.IDs, got.ID) || got.List.Metadata["suite"] != "berth-e2e" || got.List.None != 0 {
		t.Errorf("Sandbox.list: %+v (want %s)", got.List, got.ID)
	}
	if !strings.Contains(got.UnknownTemplate, "404") || !strings.Contains(got.UnknownTemplate, "no-such-template") {
		t.Errorf("an unknown template: %q", got.UnknownTemplate)
	}
	if !got.Killed || got.KilledAgain || got.AfterKill != "SandboxNotFoundError" {
		t.Errorf("kill: %v, again %v, getInfo after: %s", got.Killed, got.KilledAgain, got.AfterKill)
	}

	// berth saw it all: the sandbox is deleted, nothing is left, and the
	// door's calls are in its events and audit log.
	out, _, code := d.cli("ls", "-o", "json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("berth ls after the SDK's kill: %d %s", code, out)
	}
	out, _, code = d.cli("events", got.ID)
	if code != 0 || !strings.Contains(out, "timeout") || !strings.Contains(out, "paused") {
		t.Errorf("berth events %s: %d %s", got.ID, code, out)
	}
	out, _, code = d.cli("audit", "ls", "-o", "json")
	// The create and the kill are REST's operations (internal/access),
	// recorded as REST records them; the pause is E2B's own.
	if code != 0 || !strings.Contains(out, `"POST /v1/sandboxes"`) || !strings.Contains(out, `"DELETE /v1/sandboxes/{id}"`) ||
		!strings.Contains(out, "e2b POST /sandboxes/{sandboxID}/pause") {
		t.Errorf("berth audit ls: %d %s", code, tail(out, 2000))
	}
	out, _, code = d.cli("doctor")
	if code != 0 {
		t.Errorf("berth doctor: %d %s", code, out)
	}
}

// TestE2BDoorAttacks: what the door's credentials must refuse. A lease
// token of sandbox A naming sandbox B (header or host), a lease token on
// the control API, an API key on envd, a tenant's key on another
// tenant's sandbox, a forged token, a malformed target.
func TestE2BDoorAttacks(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t, "--e2b-domain", "e2b.test")
	do := func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	type created struct {
		SandboxID, EnvdAccessToken string
	}
	mk := func(k string) created {
		t.Helper()
		// Ports that need the token: E2B's allowPublicTraffic false.
		st, body := do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":120,"network":{"allowPublicTraffic":false}}`, map[string]string{"X-API-Key": k})
		var c created
		if st != 201 || json.Unmarshal([]byte(body), &c) != nil || c.EnvdAccessToken == "" {
			t.Fatalf("create: %d %s", st, body)
		}
		return c
	}
	a, b := mk(key), mk(key)
	defer do("DELETE", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": key})
	defer do("DELETE", "/sandboxes/"+b.SandboxID, "", map[string]string{"X-API-Key": key})
	list := `{}`
	envd := func(sb, tok string, extra map[string]string) (int, string) {
		h := map[string]string{"E2b-Sandbox-Id": sb, "E2b-Sandbox-Port": "49983", "X-Access-Token": tok, "Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return do("POST", "/process.Process/List", list, h)
	}
	if st, body := envd(a.SandboxID, a.EnvdAccessToken, nil); st != 200 {
		t.Fatalf("A's token on A: %d %s", st, body)
	}
	if st, body := envd(b.SandboxID, a.EnvdAccessToken, nil); st != 403 && st != 401 {
		t.Errorf("A's token with E2b-Sandbox-Id of B: %d %s", st, body)
	}
	if st, body := envd(b.SandboxID, key, nil); st != 403 && st != 401 {
		t.Errorf("an API key on envd: %d %s", st, body)
	}
	forged := "berth_lease_" + b.SandboxID + "_" + strings.Repeat("0", 40)
	if st, body := envd(b.SandboxID, forged, nil); st != 401 {
		t.Errorf("a forged token: %d %s", st, body)
	}
	if st, body := envd("../"+b.SandboxID, a.EnvdAccessToken, nil); st != 400 {
		t.Errorf("a malformed sandbox id: %d %s", st, body)
	}
	if st, body := do("GET", "/v2/sandboxes", "", map[string]string{"X-API-Key": a.EnvdAccessToken}); st != 403 {
		t.Errorf("a lease token listing sandboxes: %d %s", st, body)
	}
	if st, body := do("DELETE", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": a.EnvdAccessToken}); st != 403 {
		t.Errorf("a lease token killing its own sandbox: %d %s", st, body)
	}
	// The metrics route: a lease is refused, a bad window is a 400.
	if st, body := do("GET", "/sandboxes/"+a.SandboxID+"/metrics", "", map[string]string{"X-API-Key": a.EnvdAccessToken}); st != 403 {
		t.Errorf("a lease token reading metrics: %d %s", st, body)
	}
	if st, body := do("GET", "/sandboxes/"+a.SandboxID+"/metrics?start=-1", "", map[string]string{"X-API-Key": key}); st != 400 {
		t.Errorf("metrics with a negative start: %d %s", st, body)
	}
	if st, body := do("GET", "/v2/sandboxes", "", nil); st != 401 || !strings.Contains(body, `"code":401`) {
		t.Errorf("no key: %d %s", st, body)
	}
	// A spoofed Host header under no configured domain is a control-plane
	// request: it needs the API key like any other.
	if st, body := do("POST", "/process.Process/List", list, map[string]string{"Host": "49983-" + b.SandboxID + ".e2b.app",
		"X-Access-Token": a.EnvdAccessToken, "Content-Type": "application/json"}); st != 401 {
		t.Errorf("a spoofed host: %d %s", st, body)
	}
	// The polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher)
	// over Connect's JSON: A's watcher sees A's write and is A's alone.
	rpc := func(sb, tok, method, body string) (int, string) {
		return do("POST", "/filesystem.Filesystem/"+method, body, map[string]string{"E2b-Sandbox-Id": sb,
			"E2b-Sandbox-Port": "49983", "X-Access-Token": tok, "Content-Type": "application/json"})
	}
	st, body := rpc(a.SandboxID, a.EnvdAccessToken, "CreateWatcher", `{"path":"/tmp"}`)
	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	if st != 200 || json.Unmarshal([]byte(body), &cw) != nil || cw.WatcherID == "" {
		t.Fatalf("CreateWatcher: %d %s", st, body)
	}
	if st, body := do("POST", "/files?path=/tmp/polled.txt", "x", map[string]string{"E2b-Sandbox-Id": a.SandboxID,
		"E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken, "Content-Type": "application/octet-stream"}); st != 200 {
		t.Fatalf("upload: %d %s", st, body)
	}
	if st, body := rpc(b.SandboxID, b.EnvdAccessToken, "GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`); st != 404 {
		t.Errorf("B reading A's watcher: %d %s", st, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	var events string
	for !strings.Contains(events, "polled.txt") {
		st, body := rpc(a.SandboxID, a.EnvdAccessToken, "GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`)
		if st != 200 {
			t.Fatalf("GetWatcherEvents: %d %s", st, body)
		}
		events += body
		if time.Now().After(deadline) {
			t.Fatalf("the polling watcher saw %s", events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, body := rpc(a.SandboxID, a.EnvdAccessToken, "RemoveWatcher", `{"watcherId":"`+cw.WatcherID+`"}`); st != 200 {
		t.Errorf("RemoveWatcher: %d %s", st, body)
	}
	if st, body := rpc(a.SandboxID, a.EnvdAccessToken, "GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`); st != 404 {
		t.Errorf("a removed watcher: %d %s", st, body)
	}

	// An oversized Connect message is refused, not buffered.
	big := `{"process":{"pid":1},"input":{"stdin":"` + strings.Repeat("A", 6<<20) + `"}}`
	if st, body := do("POST", "/process.Process/SendInput", big, map[string]string{"E2b-Sandbox-Id": a.SandboxID,
		"E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken, "Content-Type": "application/json"}); !strings.Contains(body, "resource_exhausted") {
		t.Errorf("a 6 MiB SendInput: %d %s", st, tail(body, 300))
	}

	// Host routing: {port}-{id}.{domain} names the target, and a token
	// still acts on its own sandbox only.
	hostList := func(host, tok string) (int, string) {
		return do("POST", "/process.Process/List", list, map[string]string{"Host": host, "X-Access-Token": tok, "Content-Type": "application/json"})
	}
	if st, body := hostList("49983-"+a.SandboxID+".e2b.test", a.EnvdAccessToken); st != 200 {
		t.Errorf("A's token on A's host: %d %s", st, body)
	}
	if st, body := hostList("49983-"+b.SandboxID+".e2b.test", a.EnvdAccessToken); st != 403 && st != 401 {
		t.Errorf("A's token on B's host: %d %s", st, body)
	}
	// The host wins over the headers: headers naming A cannot lift a
	// request for B's host onto A's token.
	if st, body := do("POST", "/process.Process/List", list, map[string]string{"Host": "49983-" + b.SandboxID + ".e2b.test",
		"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken,
		"Content-Type": "application/json"}); st != 403 && st != 401 {
		t.Errorf("B's host with A's headers and token: %d %s", st, body)
	}
	if st, body := hostList("www.e2b.test", a.EnvdAccessToken); st != 400 {
		t.Errorf("a host under the domain that names no target: %d %s", st, body)
	}
	// api.DOMAIN is the control API (the SDK's URL under E2B_DOMAIN):
	// an envd token is no credential there.
	if st, body := hostList("api.e2b.test", a.EnvdAccessToken); st != 401 && st != 404 {
		t.Errorf("envd's call on the control host: %d %s", st, body)
	}
	// Another port of the sandbox goes through the port proxy, with the
	// sandbox's token only.
	if out, errOut, code := d.cli("exec", "-d", a.SandboxID, "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("starting a web server in A: %s %s", out, errOut)
	}
	port := func(host, sb, tok string) (int, string) {
		h := map[string]string{"X-Access-Token": tok}
		if host != "" {
			h["Host"] = host
		} else {
			h["E2b-Sandbox-Id"], h["E2b-Sandbox-Port"] = sb, "8000"
		}
		return do("GET", "/", "", h)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		st, body := port("", a.SandboxID, a.EnvdAccessToken)
		if st == 200 && strings.Contains(body, "Directory listing") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's port 8000 through the door: %d %s", st, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, body := port("8000-"+a.SandboxID+".e2b.test", "", a.EnvdAccessToken); st != 200 || !strings.Contains(body, "Directory listing") {
		t.Errorf("A's port 8000 by host: %d %s", st, body)
	}
	if st, body := port("", a.SandboxID, b.EnvdAccessToken); st != 403 && st != 401 {
		t.Errorf("B's token on A's port: %d %s", st, body)
	}
	if st, body := port("", a.SandboxID, ""); st != 403 {
		t.Errorf("no token on A's port: %d %s", st, body)
	}
	// The same answer for an id that names nothing: no oracle.
	if st, body := port("", "nosuchsandbox000", ""); st != 403 {
		t.Errorf("no token on a port of no sandbox: %d %s", st, body)
	}

	// A tenant's key on another tenant's sandbox: 404, nothing changed.
	if out, errOut, code := d.cli("tenant", "create", "other"); code != 0 {
		t.Fatalf("tenant create: %s %s", out, errOut)
	}
	out, errOut, code := d.cli("key", "create", "--tenant", "other", "--role", "member")
	if code != 0 {
		t.Fatalf("key create: %s %s", out, errOut)
	}
	other := strings.TrimSpace(out)
	if i := strings.LastIndex(other, "berth_"); i >= 0 {
		other = strings.Fields(other[i:])[0]
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + a.SandboxID}, {"DELETE", "/sandboxes/" + a.SandboxID},
		{"POST", "/sandboxes/" + a.SandboxID + "/pause"}, {"POST", "/sandboxes/" + a.SandboxID + "/timeout"},
		{"POST", "/v2/sandboxes/" + a.SandboxID + "/connect"}, {"POST", "/sandboxes/" + a.SandboxID + "/fork"},
		{"POST", "/sandboxes/" + a.SandboxID + "/snapshots"}, {"GET", "/snapshots?sandboxID=" + a.SandboxID},
		{"GET", "/sandboxes/" + a.SandboxID + "/metrics"}, {"POST", "/sandboxes/" + a.SandboxID + "/resume"},
	} {
		body := ""
		if c.method == "POST" {
			body = `{"timeout":30,"memory":false}`
		}
		if st, resp := do(c.method, c.path, body, map[string]string{"X-API-Key": other}); st != 404 {
			t.Errorf("tenant other's key: %s %s = %d %s", c.method, c.path, st, resp)
		}
	}
	// A viewer key reads but never creates or kills.
	out, errOut, code = d.cli("key", "create", "--tenant", "other", "--role", "viewer")
	if code != 0 {
		t.Fatalf("key create: %s %s", out, errOut)
	}
	viewer := strings.Fields(out[strings.LastIndex(out, "berth_"):])[0]
	if st, body := do("POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-Key": viewer}); st != 403 {
		t.Errorf("a viewer key creating: %d %s", st, body)
	}
	if st, body := do("GET", "/v2/sandboxes", "", map[string]string{"X-API-Key": viewer}); st != 200 {
		t.Errorf("a viewer key listing: %d %s", st, body)
	}
	if st, body := do("GET", "/v2/sandboxes", "", map[string]string{"X-API-Key": other}); st != 200 || strings.Contains(body, a.SandboxID) {
		t.Errorf("tenant other lists: %d %s", st, body)
	}
	if st, body := do("GET", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": key}); st != 200 || !strings.Contains(body, `"state":"running"`) {
		t.Errorf("A after the other tenant's tries: %d %s", st, body)
	}
}

// TestE2BTLS: with --e2b-cert/--e2b-key the door is TLS only: the SDK,
// trusting the test's CA, works end to end; plain HTTP gets no answer
// from the door.
func TestE2BTLS(t *testing.T) {
	parallel(t)
	certFile, keyFile, caFile := makeCA(t, t.TempDir())
	addr := freeAddr(t)
	d := startDaemonWith(t, "--e2b-listen", addr, "--e2b-cert", certFile, "--e2b-key", keyFile)
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK           bool
		Error        string
		Stdout, Read string
		Killed       bool
	}
	runE2BScript(t, "tls.mjs", "https://"+addr, strings.TrimSpace(string(key)), &got, "NODE_EXTRA_CA_CERTS="+caFile)
	if !got.OK || got.Stdout != "over tls\n" || got.Read != "tls file" || !got.Killed {
		t.Fatalf("the SDK over TLS: %+v", got)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if resp, err := c.Get("http://" + addr + "/v2/sandboxes"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP to the TLS door answered %d", resp.StatusCode)
		}
	}
	if out, _, code := d.cli("ls", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("berth ls after the TLS run: %d %s", code, out)
	}
}

// TestE2BDomainRouting: the unmodified SDK with only E2B_DOMAIN set
// reaches the control API at https://api.DOMAIN and envd at
// https://49983-ID.DOMAIN, both on port 443 of the door (--e2b-domain):
// the daemon and node run in a network namespace the test made, holding
// only loopback, and a test preload (test/e2b/resolve.mjs) resolves the
// domain's names to 127.0.0.1 there.
func TestE2BDomainRouting(t *testing.T) {
	parallel(t)
	const domain = "e2b.test"
	b := make([]byte, 3)
	rand.Read(b)
	ns := "bt-d-" + hex.EncodeToString(b)
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	certFile, keyFile, caFile := makeCA(t, t.TempDir(), "api."+domain, "*."+domain)
	d := newDaemon(t, &daemon{netns: ns, extra: []string{"--e2b-listen", "127.0.0.1:443",
		"--e2b-domain", domain, "--e2b-cert", certFile, "--e2b-key", keyFile}})
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK              bool
		Error, Host, ID string
		Stdout, Read    string
		Listed, InList  bool
		Killed          bool
	}
	runNode(t, []string{"nsenter", "--net=/run/netns/" + ns},
		[]string{"E2B_DOMAIN=" + domain, "E2B_API_KEY=" + strings.TrimSpace(string(key)),
			"NODE_EXTRA_CA_CERTS=" + caFile, "BERTH_TEST_DOMAIN=" + domain},
		&got, "--import", "./resolve.mjs", "domain.mjs")
	if !got.OK {
		t.Fatalf("the SDK under E2B_DOMAIN: %s\nwhat it saw: %+v", got.Error, got)
	}
	if got.Host != "8080-"+got.ID+"."+domain || got.Stdout != "routed by host\n" || got.Read != "domain file" ||
		!got.Listed || !got.InList || !got.Killed {
		t.Fatalf("the SDK under E2B_DOMAIN: %+v", got)
	}
	if out, _, code := d.cli("ls", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("berth ls after the domain run: %d %s", code, out)
	}
}

// TestE2BPauseWithoutMemory: the SDK's pause({keepMemory: false}) is
// berth's stop for a sandbox made to pause without memory (its root on
// its own volume): getInfo and list say paused, berth says stopped, a
// second pause is the SDK's false, connect starts it with its files and
// without its old processes; connect with onResume 'reboot' restarts a
// paused one; the access token from before the stop works again after it
// (the SDK's own resume path: the handle it had), refused while stopped,
// and still ends with its key and with the sandbox; a default sandbox is
// paused with memory instead. getMetrics reads berth's accounting of a
// running sandbox (none while paused).
func TestE2BPauseWithoutMemory(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t)
	var got struct {
		OK, Paused, Listed, PausedAgain, Sleeper, Killed  bool
		Error, ID, State, Kept, StateAfter, Ran, OldToken string
		InstanceResume                                    string
		Reboot                                            struct {
			Kept    string
			Sleeper bool
		}
		Ephemeral struct{ Sleeper, Killed bool }
		Metrics   struct {
			N, CPUCount, AfterPause    int
			MemUsed, MemTotal, DiskCap float64
			CPUPct                     float64
		}
	}
	runE2BScript(t, "pause.mjs", url, key, &got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s\nwhat it saw: %+v", got.Error, got)
	}
	if !got.Paused || got.State != "paused" || !got.Listed || got.PausedAgain {
		t.Errorf("pause without memory: paused %v, state %q, listed %v, again %v", got.Paused, got.State, got.Listed, got.PausedAgain)
	}
	if got.Kept != "kept" || got.Sleeper || got.StateAfter != "running" || got.Ran != "back\n" {
		t.Errorf("connect after a pause without memory: %+v", got)
	}
	if got.OldToken != "accepted" || got.InstanceResume != "kept" {
		t.Errorf("the access token from before the stop, after connect: %s; the handle paused and connected again: %q", got.OldToken, got.InstanceResume)
	}
	if got.Reboot.Kept != "kept" || got.Reboot.Sleeper {
		t.Errorf("connect with onResume reboot: %+v", got.Reboot)
	}
	if m := got.Metrics; m.N != 1 || m.CPUCount != 1 || m.MemUsed <= 0 || m.MemUsed > m.MemTotal ||
		m.MemTotal != 512<<20 || m.DiskCap <= 0 || m.CPUPct < 0 || m.CPUPct > 100 || m.AfterPause != 0 {
		t.Errorf("getMetrics: %+v", m)
	}
	if !got.Ephemeral.Sleeper || !got.Ephemeral.Killed {
		t.Errorf("a default sandbox paused without memory: %+v", got.Ephemeral)
	}
	// berth's events (kept after the kill) show the stop and the start.
	if out, _, code := d.cli("events", got.ID); code != 0 || !strings.Contains(out, "stopped") || !strings.Contains(out, "running") {
		t.Errorf("berth events %s: the pause was no berth stop and start: %s", got.ID, out)
	}
	if out, _, code := d.cli("ls", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("berth ls after the kills: %d %s", code, out)
	}

	// The kept token still ends with its key and with its sandbox.
	if out, errOut, code := d.cli("tenant", "create", "acme"); code != 0 {
		t.Fatalf("tenant create: %s %s", out, errOut)
	}
	member, other := roleKey(t, d, "acme", "member"), roleKey(t, d, "acme", "member")
	do := e2bCaller(t, url)
	mk := func(key string) (string, string) {
		st, body := do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"autoPause":true,"autoPauseMemory":false}`, map[string]string{"X-API-Key": key})
		var sb struct{ SandboxID, EnvdAccessToken string }
		if st != 201 || json.Unmarshal([]byte(body), &sb) != nil || sb.EnvdAccessToken == "" {
			t.Fatalf("create: %d %s", st, body)
		}
		return sb.SandboxID, sb.EnvdAccessToken
	}
	health := func(id, tok string) int {
		st, _ := do("GET", "/health", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": tok})
		return st
	}
	stopStart := func(id, tok, key string) {
		if st, body := do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, map[string]string{"X-API-Key": key}); st != 204 {
			t.Fatalf("pause without memory: %d %s", st, body)
		}
		if st := health(id, tok); st != 502 {
			t.Errorf("the kept token while its sandbox is stopped: %d, want 502", st)
		}
		if st, body := do("POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`, map[string]string{"X-API-Key": key}); st >= 300 {
			t.Fatalf("connect: %d %s", st, body)
		}
	}
	a, ta := mk(member)
	stopStart(a, ta, member)
	if st := health(a, ta); st != 204 {
		t.Errorf("the create-time token after the stop and start: %d, want 204", st)
	}
	if out, errOut, code := d.cli("key", "revoke", member[:len("berth_")+12]); code != 0 {
		t.Fatalf("key revoke: %s %s", out, errOut)
	}
	if st := health(a, ta); st != 502 {
		t.Errorf("the kept token after its key's revocation: %d, want 502", st)
	}
	b, tb := mk(other)
	stopStart(b, tb, other)
	for _, id := range []string{a, b} {
		if st, body := do("DELETE", "/sandboxes/"+id, "", map[string]string{"X-API-Key": other}); st != 204 {
			t.Errorf("kill %s: %d %s", id, st, body)
		}
	}
	if st := health(b, tb); st != 502 {
		t.Errorf("the kept token after its sandbox's deletion: %d, want 502", st)
	}
	assertDoctorClean(t, d)
}
