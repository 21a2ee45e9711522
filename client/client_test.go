package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-sh/berth/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestClient starts h on an httptest server and returns a client for it.
func newTestClient(t *testing.T, h http.Handler, key string) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestNewHost(t *testing.T) {
	for _, tc := range []struct {
		host, wantBase string
		wantErr        bool
	}{
		{"", unixBaseURL, false},
		{"unix:///tmp/x.sock", unixBaseURL, false},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", false},
		{"https://berth.example.com/", "https://berth.example.com", false},
		{"tcp://10.0.0.1:2375", "http://10.0.0.1:2375", false},
		{"ftp://x", "", true},
		{"http://", "", true},
		{"unix://", "", true},
	} {
		t.Run(tc.host, func(t *testing.T) {
			c, err := New(tc.host, "")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("New(%q) succeeded, want error", tc.host)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.base.String(); got != tc.wantBase {
				t.Errorf("base = %q, want %q", got, tc.wantBase)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "missing":
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: `sandbox "missing" not found`}})
		case "busy":
			writeJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "conflict", Message: "sandbox is paused"}})
		case "proxy":
			http.Error(w, "Bad Gateway", http.StatusBadGateway)
		case "limited":
			writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "limit_exceeded", Limit: "max_labels", Message: "70 labels given (limit max_labels is 64)"}})
		default:
			writeJSON(w, 200, api.Sandbox{ID: r.PathValue("id"), State: "running"})
		}
	})
	c := newTestClient(t, mux, "")
	ctx := context.Background()

	_, err := c.GetSandbox(ctx, "missing")
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != "not_found" {
		t.Fatalf("err = %#v, want 404 not_found", err)
	}
	if err.Error() != `sandbox "missing" not found` {
		t.Errorf("Error() = %q", err.Error())
	}
	if !IsNotFound(err) || IsConflict(err) {
		t.Error("IsNotFound/IsConflict wrong for 404")
	}

	_, err = c.GetSandbox(ctx, "busy")
	if !IsConflict(err) || IsNotFound(err) {
		t.Errorf("err = %v, want conflict", err)
	}

	_, err = c.GetSandbox(ctx, "limited")
	if limit, ok := IsLimitExceeded(err); !ok || limit != "max_labels" {
		t.Errorf("limit_exceeded: %q %v (%v)", limit, ok, err)
	}
	if _, ok := IsLimitExceeded(errors.New("x")); ok {
		t.Error("a plain error is a limit")
	}

	_, err = c.GetSandbox(ctx, "proxy")
	if !errors.As(err, &e) || e.Status != 502 || e.Message != "Bad Gateway" {
		t.Errorf("non-JSON error = %#v", err)
	}

	sb, err := c.GetSandbox(ctx, "a b")
	if err != nil || sb.ID != "a b" {
		t.Errorf("escaped id: %v %+v", err, sb)
	}
	if IsNotFound(errors.New("x")) || IsNotFound(nil) {
		t.Error("IsNotFound on a plain error")
	}
}

func TestAuthHeader(t *testing.T) {
	var got atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		writeJSON(w, 200, api.Version{Version: "1"})
	})
	for _, key := range []string{"", "s3cret"} {
		c := newTestClient(t, h, key)
		if _, err := c.Version(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := ""
		if key != "" {
			want = "Bearer " + key
		}
		if got.Load() != want {
			t.Errorf("key %q: Authorization = %q, want %q", key, got.Load(), want)
		}
	}
}

func TestSandboxCalls(t *testing.T) {
	var created api.CreateSandboxRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&created)
		writeJSON(w, 201, api.Sandbox{ID: "sb1", Name: created.Name, State: "running"})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("all") == "true" {
			writeJSON(w, 200, []api.Sandbox{{ID: "sb1"}, {ID: "sb0", State: "deleted"}})
			return
		}
		w.Write([]byte("null"))
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Sandbox{ID: r.PathValue("id"), State: "deleted", Reason: r.URL.Query().Get("force")})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []api.Event{{ID: 1, Type: "state", To: "running"}})
	})
	c := newTestClient(t, mux, "")
	ctx := context.Background()

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "n", Resources: api.Resources{MemoryBytes: 1 << 20}})
	if err != nil || sb.ID != "sb1" || sb.Name != "n" || created.Resources.MemoryBytes != 1<<20 {
		t.Fatalf("create: %v %+v %+v", err, sb, created)
	}
	list, err := c.ListSandboxes(ctx, false)
	if err != nil || list == nil || len(list) != 0 {
		t.Errorf("list null body: %v %#v", err, list)
	}
	list, err = c.ListSandboxes(ctx, true)
	if err != nil || len(list) != 2 {
		t.Errorf("list all: %v %+v", err, list)
	}
	sb, err = c.DeleteSandbox(ctx, "sb1", true)
	if err != nil || sb.State != "deleted" || sb.Reason != "true" {
		t.Errorf("delete: %v %+v", err, sb)
	}
	evs, err := c.Events(ctx, "sb1")
	if err != nil || len(evs) != 1 || evs[0].To != "running" {
		t.Errorf("events: %v %+v", err, evs)
	}
}

// lockedBuffer records writes from the client in order.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan string // each write, for the server to wait on
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.ch != nil {
		b.ch <- string(p)
	}
	return len(p), nil
}

func TestExecStreamsAsItArrives(t *testing.T) {
	// The handler sends one event, then waits until the client has
	// written it out before sending the next: this only completes if the
	// client hands data over as each line arrives.
	seen := make(chan string, 1)
	var gotReq api.ExecRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&gotReq)
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		f := w.(http.Flusher)
		for i, ev := range []api.ExecEvent{
			{Stream: "stdout", Data: []byte("one\n")},
			{Stream: "stderr", Data: []byte("two\n")},
			{Stream: "stdout", Data: []byte("three\n")},
		} {
			_ = enc.Encode(ev)
			f.Flush()
			select {
			case <-seen:
			case <-time.After(5 * time.Second):
				t.Errorf("event %d not delivered while the stream was open", i)
				return
			}
		}
		_ = enc.Encode(api.ExecEvent{Exit: &api.ExecExit{Code: 7}})
	})
	c := newTestClient(t, mux, "")
	out := &lockedBuffer{ch: seen}
	exit, err := c.Exec(context.Background(), "sb1", api.ExecRequest{Cmd: []string{"sh", "-c", "x"}, Stdin: []byte("in")}, out, out)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 7 {
		t.Errorf("exit code = %d, want 7", exit.Code)
	}
	if got := out.buf.String(); got != "one\ntwo\nthree\n" {
		t.Errorf("output = %q", got)
	}
	if string(gotReq.Stdin) != "in" || gotReq.Cmd[0] != "sh" {
		t.Errorf("request = %+v", gotReq)
	}
}

func TestExecStreamEnds(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.ExecEvent{Stream: "stdout", Data: []byte("partial")})
		switch r.PathValue("id") {
		case "err":
			_ = enc.Encode(api.ExecEvent{Error: &api.Error{Code: "unavailable", Message: "agent went away"}})
		case "cut":
			w.Write([]byte(`{"stream":"std`))
		}
	})
	c := newTestClient(t, mux, "")
	for _, tc := range []struct {
		id   string
		want func(error) bool
	}{
		{"eof", func(err error) bool { return errors.Is(err, ErrNoExit) }},
		{"cut", func(err error) bool { return errors.Is(err, ErrNoExit) }},
		{"err", func(err error) bool {
			var e *Error
			return errors.As(err, &e) && e.Code == "unavailable" && e.Message == "agent went away"
		}},
	} {
		var out bytes.Buffer
		_, err := c.Exec(context.Background(), tc.id, api.ExecRequest{Cmd: []string{"x"}}, &out, nil)
		if !tc.want(err) {
			t.Errorf("%s: err = %v", tc.id, err)
		}
		if out.String() != "partial" {
			t.Errorf("%s: output = %q", tc.id, out.String())
		}
	}
}

func TestRun(t *testing.T) {
	var got api.RunRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/run", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set(SandboxIDHeader, "sb42")
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.ExecEvent{Stream: "stdout", Data: []byte("hi\n")})
		_ = enc.Encode(api.ExecEvent{Exit: &api.ExecExit{Code: 0}})
	})
	c := newTestClient(t, mux, "")
	var out bytes.Buffer
	id, exit, err := c.Run(context.Background(), api.RunRequest{
		Sandbox: api.CreateSandboxRequest{Template: "base"},
		Exec:    api.ExecRequest{Cmd: []string{"echo", "hi"}},
	}, &out, io.Discard)
	if err != nil || id != "sb42" || exit.Code != 0 || out.String() != "hi\n" {
		t.Fatalf("Run = %q %+v %v, out %q", id, exit, err, out.String())
	}
	if got.Sandbox.Template != "base" || got.Exec.Cmd[1] != "hi" {
		t.Errorf("request = %+v", got)
	}
}

func TestRunCancelDropsConnection(t *testing.T) {
	gone := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/run", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(SandboxIDHeader, "sb1")
		_ = json.NewEncoder(w).Encode(api.ExecEvent{Stream: "stdout", Data: []byte("started\n")})
		w.(http.Flusher).Flush()
		<-r.Context().Done() // what the daemon watches to destroy the sandbox
		close(gone)
	})
	c := newTestClient(t, mux, "")
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{ch: make(chan string, 1)}
	go func() {
		<-out.ch
		cancel()
	}()
	_, _, err := c.Run(ctx, api.RunRequest{}, out, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("server did not see the client go away")
	}
}

func TestFiles(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("format") == "tar" {
			w.Write([]byte("TAR:" + q.Get("path")))
			return
		}
		if q.Get("path") != "/etc/hostname" {
			writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "no such file"}})
			return
		}
		w.Header().Set(FileModeHeader, "0640")
		w.Write([]byte("box\n"))
	})
	var put struct {
		path, mode, format, body string
		length                   int64
	}
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		q := r.URL.Query()
		put.path, put.mode, put.format, put.body, put.length = q.Get("path"), q.Get("mode"), q.Get("format"), string(b), r.ContentLength
		if put.format == "tar" {
			w.WriteHeader(204)
			return
		}
		writeJSON(w, 200, api.FileInfo{Path: put.path, Size: int64(len(b)), Mode: 0o755})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.FileInfo{Path: r.URL.Query().Get("path"), IsDir: true})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []api.FileInfo{{Name: "a"}, {Name: "b"}})
	})
	var calls []string
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, "mkdir "+r.URL.RawQuery)
		w.WriteHeader(204)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, "rm "+r.URL.RawQuery)
		w.WriteHeader(204)
	})
	c := newTestClient(t, mux, "")
	ctx := context.Background()

	var buf bytes.Buffer
	mode, n, err := c.ReadFile(ctx, "sb", "/etc/hostname", &buf)
	if err != nil || mode != 0o640 || n != 4 || buf.String() != "box\n" {
		t.Errorf("ReadFile = %o %d %v %q", mode, n, err, buf.String())
	}
	if _, _, err := c.ReadFile(ctx, "sb", "/nope", &buf); !IsNotFound(err) {
		t.Errorf("ReadFile missing: %v", err)
	}
	fi, err := c.WriteFile(ctx, "sb", "/tmp/a b", 0o755, strings.NewReader("#!/bin/sh\n"))
	if err != nil || fi.Size != 10 || put.path != "/tmp/a b" || put.mode != "0755" || put.length != 10 {
		t.Errorf("WriteFile = %+v %v; server saw %+v", fi, err, put)
	}
	buf.Reset()
	if err := c.ReadTar(ctx, "sb", "/work", &buf); err != nil || buf.String() != "TAR:/work" {
		t.Errorf("ReadTar = %v %q", err, buf.String())
	}
	if err := c.WriteTar(ctx, "sb", "/work", strings.NewReader("tarbytes")); err != nil || put.format != "tar" || put.body != "tarbytes" {
		t.Errorf("WriteTar = %v; server saw %+v", err, put)
	}
	st, err := c.Stat(ctx, "sb", "/work")
	if err != nil || !st.IsDir || st.Path != "/work" {
		t.Errorf("Stat = %+v %v", st, err)
	}
	ls, err := c.List(ctx, "sb", "/work")
	if err != nil || len(ls) != 2 {
		t.Errorf("List = %+v %v", ls, err)
	}
	if err := c.Mkdir(ctx, "sb", "/a/b", true); err != nil {
		t.Error(err)
	}
	if err := c.Remove(ctx, "sb", "/a", true); err != nil {
		t.Error(err)
	}
	want := []string{"mkdir parents=true&path=%2Fa%2Fb", "rm path=%2Fa&recursive=true"}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls = %q, want %q", calls, want)
	}
}

func TestTemplatesAndDoctor(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/templates/build", func(w http.ResponseWriter, r *http.Request) {
		var req api.BuildTemplateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.BuildEvent{Step: 1, Stream: "stdout", Data: []byte("step1\n")})
		if req.Name == "bad" {
			_ = enc.Encode(api.BuildEvent{Step: 2, Error: &api.Error{Code: "invalid_argument", Message: "exit status 1"}})
			return
		}
		_ = enc.Encode(api.BuildEvent{Step: 2, Template: &api.Template{Name: req.Name, Source: "build:" + req.From}})
	})
	mux.HandleFunc("PUT /v1/templates/{name}/archive", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		writeJSON(w, 201, api.Template{Name: r.PathValue("name"), Size: int64(len(b))})
	})
	mux.HandleFunc("POST /v1/templates/import", func(w http.ResponseWriter, r *http.Request) {
		var req api.ImportTemplateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		writeJSON(w, 201, api.Template{Name: req.Name, Source: req.Ref})
	})
	mux.HandleFunc("DELETE /v1/templates/{name}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	mux.HandleFunc("GET /v1/doctor", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.DoctorReport{Findings: []api.DoctorFinding{{Kind: "mount"}}, Healthy: false})
	})
	mux.HandleFunc("POST /v1/doctor/fix", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.DoctorReport{Healthy: true})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	c := newTestClient(t, mux, "")
	ctx := context.Background()

	var progress bytes.Buffer
	tpl, err := c.BuildTemplate(ctx, api.BuildTemplateRequest{Name: "py", From: "base", Run: []string{"true"}}, &progress)
	if err != nil || tpl.Name != "py" || tpl.Source != "build:base" || progress.String() != "step1\n" {
		t.Errorf("BuildTemplate = %+v %v %q", tpl, err, progress.String())
	}
	_, err = c.BuildTemplate(ctx, api.BuildTemplateRequest{Name: "bad"}, nil)
	if err == nil || err.Error() != "step 2: exit status 1" || !IsInvalid(err) {
		t.Errorf("failing build: %v", err)
	}
	tpl, err = c.UploadTemplateArchive(ctx, "img", strings.NewReader("12345"))
	if err != nil || tpl.Name != "img" || tpl.Size != 5 {
		t.Errorf("Upload = %+v %v", tpl, err)
	}
	tpl, err = c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "alp", Ref: "alpine:3"})
	if err != nil || tpl.Source != "alpine:3" {
		t.Errorf("Import = %+v %v", tpl, err)
	}
	if err := c.DeleteTemplate(ctx, "alp"); err != nil {
		t.Error(err)
	}
	rep, err := c.Doctor(ctx, false)
	if err != nil || rep.Healthy || len(rep.Findings) != 1 {
		t.Errorf("Doctor = %+v %v", rep, err)
	}
	rep, err = c.Doctor(ctx, true)
	if err != nil || !rep.Healthy || rep.Findings == nil {
		t.Errorf("Doctor fix = %+v %v", rep, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Error(err)
	}
}

func TestUnixSocketReusesConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "berth.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.ExecEvent{Stream: "stdout", Data: []byte("x")})
		_ = enc.Encode(api.ExecEvent{Exit: &api.ExecExit{}})
	})
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c, err := New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	const n = 50
	for range n {
		if _, err := c.Exec(context.Background(), "sb", api.ExecRequest{Cmd: []string{"true"}}, io.Discard, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d sequential execs used %d connections, want 1", n, got)
	}
	t.Logf("%d exec round trips over the unix socket: %v each", n, time.Since(start)/n)
}

func TestConnectError(t *testing.T) {
	c, err := New("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Version(context.Background())
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %T %v, want *ConnectError", err, err)
	}
	if !strings.Contains(err.Error(), "berth serve") || strings.Contains(err.Error(), "http://berth") {
		t.Errorf("message = %q", err.Error())
	}
}
