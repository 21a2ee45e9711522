package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// forkState is what the fake daemon's fork, snapshot, copy, export, pool
// and apply routes were sent.
type forkState struct {
	fork    api.ForkRequest
	forkOf  string
	snap    api.CreateSnapshotRequest
	snapOf  string
	listOf  string
	deleted []string
	copyReq api.CopyRequest
	export  api.ExportRequest
	pool    *api.PoolRequest
	apply   api.ApplyRequest
}

func (f *fakeDaemon) addForkRoutes(mux *http.ServeMux) {
	created := time.Now().Add(-2 * time.Hour).UTC()
	expires := time.Now().Add(49 * time.Hour).UTC()
	snaps := map[string]api.Snapshot{
		"snap1": {ID: "snap1", Name: "before", SandboxID: "sb1", Template: "base", SizeBytes: 3 << 20, CreatedAt: created, ExpiresAt: &expires},
		"snap2": {ID: "snap2", SandboxID: "sb2", Template: "base", SizeBytes: 512, Parent: "snap1", CreatedAt: created},
	}
	notFound := func(w http.ResponseWriter, what string) {
		writeTestJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: what + " not found"}})
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fork.forkOf = r.PathValue("id")
		f.fork.fork = api.ForkRequest{}
		_ = json.NewDecoder(r.Body).Decode(&f.fork.fork)
		resp := api.ForkResponse{FreezeMS: 2}
		for i := range max(f.fork.fork.Count, 1) {
			resp.Children = append(resp.Children, api.Sandbox{ID: "kid" + string(rune('1'+i)), State: "running"})
		}
		writeTestJSON(w, 201, resp)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fork.snapOf = r.PathValue("id")
		_ = json.NewDecoder(r.Body).Decode(&f.fork.snap)
		writeTestJSON(w, 201, api.Snapshot{ID: "snapnew", Name: f.fork.snap.Name, SandboxID: f.fork.snapOf})
	})
	list := func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fork.listOf = r.PathValue("id")
		var out []api.Snapshot
		for _, id := range []string{"snap1", "snap2"} {
			if f.fork.listOf == "" || snaps[id].SandboxID == f.fork.listOf {
				out = append(out, snaps[id])
			}
		}
		writeTestJSON(w, 200, out)
	}
	mux.HandleFunc("GET /v1/snapshots", list)
	mux.HandleFunc("GET /v1/sandboxes/{id}/snapshots", list)
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := snaps[r.PathValue("id")]
		if !ok {
			notFound(w, "snapshot "+r.PathValue("id"))
			return
		}
		writeTestJSON(w, 200, s)
	})
	mux.HandleFunc("DELETE /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := snaps[r.PathValue("id")]; !ok {
			notFound(w, "snapshot "+r.PathValue("id"))
			return
		}
		f.mu.Lock()
		f.fork.deleted = append(f.fork.deleted, r.PathValue("id"))
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/snapshots/{id}/restore", func(w http.ResponseWriter, r *http.Request) {
		s, ok := snaps[r.PathValue("id")]
		if !ok {
			notFound(w, "snapshot "+r.PathValue("id"))
			return
		}
		writeTestJSON(w, 200, api.Sandbox{ID: s.SandboxID, State: "running"})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/export", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.PathValue("id") == "nope" {
			notFound(w, "sandbox nope")
			return
		}
		f.fork.export = api.ExportRequest{}
		_ = json.NewDecoder(r.Body).Decode(&f.fork.export)
		w.Header().Set("Content-Type", "application/x-tar")
		tw := tar.NewWriter(w)
		for _, p := range f.fork.export.Paths {
			body := "content of " + p
			_ = tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: 0o644, Size: int64(len(body))})
			_, _ = io.WriteString(tw, body)
		}
		_ = tw.Close()
	})
	mux.HandleFunc("POST /v1/copy", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewDecoder(r.Body).Decode(&f.fork.copyReq)
		w.WriteHeader(204)
	})
	pools := map[string]api.Pool{"py": {Template: "py", Min: 4, Ready: 3, Starting: 1, Hits: 10, Misses: 2}}
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, []api.Pool{pools["py"]})
	})
	mux.HandleFunc("GET /v1/templates/{name}/pool", func(w http.ResponseWriter, r *http.Request) {
		p, ok := pools[r.PathValue("name")]
		if !ok {
			notFound(w, "template "+r.PathValue("name"))
			return
		}
		writeTestJSON(w, 200, p)
	})
	mux.HandleFunc("PUT /v1/templates/{name}/pool", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fork.pool = &api.PoolRequest{Min: -1}
		_ = json.NewDecoder(r.Body).Decode(f.fork.pool)
		writeTestJSON(w, 200, api.Pool{Template: r.PathValue("name"), Min: f.fork.pool.Min})
	})
	mux.HandleFunc("POST /v1/apply", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fork.apply = api.ApplyRequest{}
		_ = json.NewDecoder(r.Body).Decode(&f.fork.apply)
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.BuildEvent{Step: 1, Stream: "stdout", Data: []byte("[1/2] cached\n")})
		_ = enc.Encode(api.BuildEvent{Template: &api.Template{Name: "py"}})
	})
	mux.HandleFunc("GET /v1/sandboxes/kid1", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, api.Sandbox{ID: "kid1", Template: "base", State: "running",
			Lineage: &api.Lineage{Parent: "sb1", FromSnapshot: "snap1", Children: []string{"kid7", "kid8"}}})
	})
}

func TestForkFlags(t *testing.T) {
	lookup := func(k string) (string, bool) { return map[string]string{"TOKEN": "t"}[k], k == "TOKEN" }
	ff := forkFlags{count: 3, persistent: true, timeout: durationValue(90 * time.Second),
		labels: []string{"a=1", "b=x=y"}, env: []string{"X=1", "TOKEN"}, namePrefix: "try"}
	req, err := ff.request(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if req.Count != 3 || !req.Persistent || req.TimeoutSeconds != 90 || req.NamePrefix != "try" ||
		req.Labels["a"] != "1" || req.Labels["b"] != "x=y" || req.Env["X"] != "1" || req.Env["TOKEN"] != "t" {
		t.Errorf("request = %+v", req)
	}
	for _, tc := range []struct {
		ff   forkFlags
		want string
	}{
		{forkFlags{count: 0}, "want 1 to 64"},
		{forkFlags{count: 65}, "want 1 to 64"},
		{forkFlags{count: 1, labels: []string{"nokey"}}, "invalid label"},
		{forkFlags{count: 1, env: []string{"UNSET_HERE"}}, "not set locally"},
	} {
		if _, err := tc.ff.request(lookup); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.ff, err, tc.want)
		}
	}
}

func TestForkCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "fork", "dev", "--count", "3", "--persistent", "--timeout", "10m",
		"--label", "task=eval", "-e", "A=1", "--name-prefix", "try")
	if code != 0 || out != "kid1\nkid2\nkid3\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	r := f.fork.fork
	if f.fork.forkOf != "dev" || r.Count != 3 || !r.Persistent || r.TimeoutSeconds != 600 || r.Labels["task"] != "eval" ||
		r.Env["A"] != "1" || r.NamePrefix != "try" {
		t.Errorf("fork %s %+v", f.fork.forkOf, r)
	}
	out, _, code = runCLI(t, host, "", "fork", "dev", "-o", "json")
	var fr api.ForkResponse
	if code != 0 || json.Unmarshal([]byte(out), &fr) != nil || len(fr.Children) != 1 || fr.FreezeMS != 2 || f.fork.fork.Count != 1 {
		t.Errorf("fork -o json: exit %d, %s", code, out)
	}
	if _, errs, code := runCLI(t, host, "", "fork", "dev", "--count", "0"); code != 1 || !strings.Contains(errs, "want 1 to 64") {
		t.Errorf("--count 0: exit %d, %q", code, errs)
	}
	if _, errs, code := runCLI(t, host, "", "fork"); code != 1 || !strings.Contains(errs, "needs a parent sandbox") {
		t.Errorf("no parent: exit %d, %q", code, errs)
	}
}

func TestCpBetweenSandboxes(t *testing.T) {
	f, host := newFakeDaemon(t)
	if _, errs, code := runCLI(t, host, "", "cp", "kid1:/workspace/out", "dev:/workspace/in"); code != 0 {
		t.Fatalf("exit %d, %s", code, errs)
	}
	want := api.CopyRequest{From: "kid1", FromPath: "/workspace/out", To: "dev", ToPath: "/workspace/in"}
	if f.fork.copyReq != want {
		t.Errorf("copy request = %+v, want %+v", f.fork.copyReq, want)
	}
}

func TestExportCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "export", "kid1", "/work/a", "/work/b")
	if code != 0 || !slices.Equal(f.fork.export.Paths, []string{"/work/a", "/work/b"}) {
		t.Fatalf("exit %d, %s, paths %v", code, errs, f.fork.export.Paths)
	}
	if got := tarNames(t, strings.NewReader(out)); !slices.Equal(got, []string{"work/a", "work/b"}) {
		t.Errorf("stdout archive has %v", got)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "out.tar")
	if out, errs, code := runCLI(t, host, "", "export", "kid1", "/x", "-o", file); code != 0 || out != "" {
		t.Fatalf("export -o: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if got := tarNames(t, fh); !slices.Equal(got, []string{"x"}) {
		t.Errorf("file archive has %v", got)
	}
	if _, errs, code := runCLI(t, host, "", "export", "nope", "/x", "-o", filepath.Join(dir, "bad.tar")); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("export of unknown sandbox: exit %d, %q", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if _, errs, code := runCLI(t, host, "", "export", "kid1"); code != 1 || !strings.Contains(errs, "at least one path") {
		t.Errorf("export without paths: exit %d, %q", code, errs)
	}
}

func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
}

func TestSnapshotCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	out, errs, code := runCLI(t, host, "", "snapshot", "create", "dev", "--name", "before", "--retention", "7d")
	if code != 0 || out != "snapnew\n" || f.fork.snapOf != "dev" || f.fork.snap.Name != "before" || f.fork.snap.RetentionSeconds != 7*86400 {
		t.Fatalf("create: exit %d, %q, %q, %+v", code, out, errs, f.fork.snap)
	}

	out, _, code = runCLI(t, host, "", "snapshot", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || f.fork.listOf != "" {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "ID NAME SANDBOX TEMPLATE SIZE AGE EXPIRES" {
		t.Errorf("header = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "snap1 before sb1 base 3MiB 2h in 2d" {
		t.Errorf("row = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "snap2 - sb2 base 512B 2h -" {
		t.Errorf("row = %q", got)
	}
	out, _, code = runCLI(t, host, "", "snapshot", "ls", "sb2", "-o", "json")
	var ss []api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &ss) != nil || len(ss) != 1 || ss[0].ID != "snap2" || f.fork.listOf != "sb2" {
		t.Errorf("ls sb2 -o json: exit %d, %s", code, out)
	}

	out, _, code = runCLI(t, host, "", "snapshot", "inspect", "snap2")
	if code != 0 || !strings.Contains(out, "Parent:") || !strings.Contains(out, "snap1") || !strings.Contains(out, "512B") {
		t.Errorf("inspect:\n%s", out)
	}
	out, _, code = runCLI(t, host, "", "snapshot", "inspect", "snap1", "-o", "json")
	var s api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.SizeBytes != 3<<20 || s.ExpiresAt == nil {
		t.Errorf("inspect -o json: exit %d, %s", code, out)
	}

	out, errs, code = runCLI(t, host, "", "snapshot", "rm", "snap1", "nope", "snap2")
	if code != 1 || out != "snap1\nsnap2\n" || errs != "berth: snapshot nope not found\n" || !slices.Equal(f.fork.deleted, []string{"snap1", "snap2"}) {
		t.Errorf("rm: exit %d, %q, %q, %v", code, out, errs, f.fork.deleted)
	}
	if out, _, code := runCLI(t, host, "", "snapshot", "restore", "snap2"); code != 0 || out != "sb2\n" {
		t.Errorf("restore: exit %d, %q", code, out)
	}
}

func TestCreateFromSnapshot(t *testing.T) {
	f, host := newFakeDaemon(t)
	if out, errs, code := runCLI(t, host, "", "create", "--snapshot", "before", "--name", "dev2"); code != 0 || out != "sbnew\n" {
		t.Fatalf("exit %d, %q, %q", code, out, errs)
	}
	if f.lastCreate.Snapshot != "before" || f.lastCreate.Template != "" || f.lastCreate.Name != "dev2" {
		t.Errorf("request = %+v", f.lastCreate)
	}
	if _, errs, code := runCLI(t, host, "", "create", "--snapshot", "s", "--template", "py"); code != 1 || !strings.Contains(errs, "snapshot") {
		t.Errorf("--snapshot with --template: exit %d, %q", code, errs)
	}
}

func TestInspectLineage(t *testing.T) {
	_, host := newFakeDaemon(t)
	out, _, code := runCLI(t, host, "", "inspect", "kid1")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Parent:", "sb1", "From snapshot:", "snap1", "Children:", "kid7, kid8"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
}

func TestPoolCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	_, errs, code := runCLI(t, host, "", "template", "pool", "py", "--min", "0")
	if code != 0 || f.fork.pool == nil || f.fork.pool.Min != 0 {
		t.Fatalf("set min 0: exit %d, %q, sent %+v", code, errs, f.fork.pool)
	}
	f.fork.pool = nil
	out, errs, code := runCLI(t, host, "", "template", "pool", "py")
	if code != 0 || f.fork.pool != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "py - 4 3 1 10 2") {
		t.Fatalf("show: exit %d, %q, %q", code, out, errs)
	}
	out, _, code = runCLI(t, host, "", "template", "pool", "py", "--min", "6", "-o", "json")
	var p api.Pool
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.Min != 6 || f.fork.pool.Min != 6 {
		t.Errorf("set -o json: exit %d, %s", code, out)
	}
	if _, errs, code := runCLI(t, host, "", "template", "pool", "py", "--min", "-1"); code != 1 || !strings.Contains(errs, "negative") {
		t.Errorf("--min -1: exit %d, %q", code, errs)
	}
	out, _, code = runCLI(t, host, "", "pool", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "TEMPLATE OWNER MIN READY STARTING HITS MISSES REASON" ||
		strings.Join(strings.Fields(lines[1]), " ") != "py - 4 3 1 10 2 -" {
		t.Errorf("pool ls: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, host, "", "template", "ls")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "POOL") || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "NAME OWNER ") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "base - ") {
		t.Errorf("template ls: exit %d\n%s", code, out)
	}
}

func TestPoolColumn(t *testing.T) {
	for _, tc := range []struct {
		p    *api.Pool
		want string
	}{
		{nil, "-"},
		{&api.Pool{}, "-"},
		{&api.Pool{Min: 4, Ready: 3}, "3/4"},
		{&api.Pool{Min: 0, Ready: 1}, "1/0"}, // draining after min was lowered
	} {
		if got := poolColumn(tc.p); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// readPacked returns the archive's entries as name -> body ("<dir>" for a
// directory, "-> target" for a symlink).
func readPacked(t *testing.T, b []byte) map[string]string {
	t.Helper()
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || !hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner or time kept: %+v", hdr.Name, hdr)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			got[hdr.Name] = "<dir>"
		case tar.TypeSymlink:
			got[hdr.Name] = "-> " + hdr.Linkname
		default:
			body, _ := io.ReadAll(tr)
			got[hdr.Name] = string(body)
		}
	}
}

func TestPackCopySources(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"requirements.txt": "numpy\n",
		"app/main.py":      "print(1)\n",
		"app/lib/util.py":  "x = 1\n",
		"other/secret":     "not asked for\n",
	})
	if err := os.Symlink("main.py", filepath.Join(dir, "app", "entry")); err != nil {
		t.Fatal(err)
	}
	b, err := packCopySources(dir, []string{"./app/", "requirements.txt", "app/lib/util.py"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app/": "<dir>", "app/main.py": "print(1)\n", "app/entry": "-> main.py", "app/lib/": "<dir>",
		"app/lib/util.py": "x = 1\n", "requirements.txt": "numpy\n",
	}
	got := readPacked(t, b)
	if len(got) != len(want) {
		t.Errorf("archive = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// The same tree packs to the same bytes, whatever the times.
	later := time.Now().Add(time.Hour)
	_ = os.Chtimes(filepath.Join(dir, "requirements.txt"), later, later)
	b2, err := packCopySources(dir, []string{"./app/", "requirements.txt", "app/lib/util.py"})
	if err != nil || !bytes.Equal(b, b2) {
		t.Errorf("repacking differs (%v)", err)
	}
	if b, err := packCopySources(dir, nil); err != nil || b != nil {
		t.Errorf("no sources: %v, %v", b, err)
	}
}

func TestPackCopySourcesRefuses(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"passwd": "secret"})
	dir := filepath.Join(t.TempDir(), "ctx")
	writeFiles(t, dir, map[string]string{"ok.txt": "ok", "sub/x": "x"})
	if err := os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(dir, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(dir, "sub", "up")); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"/etc/passwd":       "must be relative",
		"../outside":        "leads out of",
		"..":                "leads out of",
		"sub/../../x":       "leads out of",
		"./missing":         "does not exist",
		"abs-link":          "escapes",
		"sub/up/ctx/ok.txt": "escapes",
	} {
		_, err := packCopySources(dir, []string{"ok.txt", src})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
	// A symlink leading out, met inside a copied directory, is kept as a
	// link: nothing outside is read.
	b, err := packCopySources(dir, []string{"sub"})
	if err != nil {
		t.Fatal(err)
	}
	if got := readPacked(t, b); got["sub/up"] != "-> ../.." || len(got) != 3 {
		t.Errorf("archive = %v", got)
	}
}

func TestApplyCLI(t *testing.T) {
	f, host := newFakeDaemon(t)
	dir := t.TempDir()
	spec := "name: py\nfrom: base\nsteps:\n  - copy: {src: ./app, dst: /app}\n"
	writeFiles(t, dir, map[string]string{"py.yaml": spec, "app/main.py": "print(1)\n"})
	out, errs, code := runCLI(t, host, "", "apply", "-f", filepath.Join(dir, "py.yaml"))
	if code != 0 || out != "py\n" || errs != "[1/2] cached\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if f.fork.apply.Spec != spec {
		t.Errorf("spec sent = %q", f.fork.apply.Spec)
	}
	if got := readPacked(t, f.fork.apply.Files); got["app/main.py"] != "print(1)\n" || len(got) != 2 {
		t.Errorf("files sent = %v", got)
	}
	// From stdin, sources are relative to the current directory.
	t.Chdir(dir)
	if out, errs, code := runCLI(t, host, spec, "apply", "-f", "-", "-o", "json"); code != 0 || !strings.Contains(out, `"name": "py"`) {
		t.Errorf("apply -f -: exit %d, %q, %q", code, out, errs)
	}
	writeFiles(t, dir, map[string]string{"bad.yaml": "steps:\n  - copy: {src: ../x, dst: /x}\n"})
	if _, errs, code := runCLI(t, host, "", "apply", "-f", "bad.yaml"); code != 1 || !strings.Contains(errs, "leads out of") {
		t.Errorf("bad src: exit %d, %q", code, errs)
	}
	if _, errs, code := runCLI(t, host, "", "apply"); code != 1 || !strings.Contains(errs, "file") {
		t.Errorf("no -f: exit %d, %q", code, errs)
	}
}
