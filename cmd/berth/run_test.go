package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// ttyDaemon is the part of the API run -t uses: create, the interactive
// exec route and delete. Its exec echoes stdin to stdout and exits with
// the code the command names ("exit N"), or when stdin ends.
type ttyDaemon struct {
	mu        sync.Mutex
	created   []api.CreateSandboxRequest
	execs     map[string]api.ExecRequest // sandbox id -> request
	deleted   []string
	failExec  bool
	failCreat bool
}

func newTTYDaemon(t *testing.T) (*ttyDaemon, string) {
	d := &ttyDaemon{execs: map[string]api.ExecRequest{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandboxRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.failCreat {
			writeTestJSON(w, 429, api.ErrorBody{Error: api.Error{Code: "quota_exceeded", Message: "sandbox quota reached"}})
			return
		}
		d.created = append(d.created, req)
		writeTestJSON(w, 201, api.Sandbox{ID: fmt.Sprintf("tty%d", len(d.created)), State: "running"})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if r.URL.Query().Get("force") != "true" {
			t.Errorf("delete of %s without force", r.PathValue("id"))
		}
		d.deleted = append(d.deleted, r.PathValue("id"))
		writeTestJSON(w, 200, api.Sandbox{ID: r.PathValue("id"), State: "deleted"})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec/ws", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		fail := d.failExec
		d.mu.Unlock()
		if fail {
			writeTestJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "conflict", Message: "sandbox is not running"}})
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		_, first, err := conn.Read(ctx)
		if err != nil {
			return
		}
		var req api.ExecRequest
		_ = json.Unmarshal(first, &req)
		d.mu.Lock()
		d.execs[r.PathValue("id")] = req
		d.mu.Unlock()
		send := func(kind byte, p []byte) { _ = conn.Write(ctx, websocket.MessageBinary, append([]byte{kind}, p...)) }
		exit := func(code int) {
			b, _ := json.Marshal(api.ExecExit{Code: code})
			send(api.WSExit, b)
			conn.Close(websocket.StatusNormalClosure, "")
		}
		send(api.WSStdout, fmt.Appendf(nil, "tty=%v\n", req.TTY))
		var code int
		if n, _ := fmt.Sscanf(strings.Join(req.Cmd, " "), "exit %d", &code); n == 1 {
			exit(code)
			return
		}
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch msg[0] {
			case api.WSStdin:
				send(api.WSStdout, msg[1:])
			case api.WSStdinEOF:
				exit(0)
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return d, srv.URL
}

// TestRunTTY: run -it creates a sandbox, runs the command in it with a
// terminal over the interactive route, exits with its code and deletes the
// sandbox, also when the exec fails; run -t alone sends no stdin.
func TestRunTTY(t *testing.T) {
	d, host := newTTYDaemon(t)

	out, errs, code := runCLI(t, host, "echo hi\n", "run", "-it", "--memory", "256m", "--", "sh")
	if code != 0 || out != "tty=true\necho hi\n" {
		t.Errorf("run -it: %d %q %q", code, out, errs)
	}
	d.mu.Lock()
	if len(d.created) != 1 || d.created[0].Resources.MemoryBytes != 256<<20 || d.created[0].OnIdle != "stop" ||
		d.created[0].IdleTimeoutSeconds != runTTYIdle.Seconds() || d.created[0].RetentionSeconds != runTTYRetention.Seconds() {
		t.Errorf("create: %+v", d.created)
	}
	if req := d.execs["tty1"]; !req.TTY || strings.Join(req.Cmd, " ") != "sh" {
		t.Errorf("exec request: %+v", req)
	}
	if len(d.deleted) != 1 || d.deleted[0] != "tty1" {
		t.Errorf("deleted %v, want tty1", d.deleted)
	}
	d.mu.Unlock()

	// -t alone: a terminal, no stdin; the command's exit code is ours.
	out, _, code = runCLI(t, host, "never sent\n", "run", "-t", "--", "exit", "7")
	if code != 7 || strings.Contains(out, "never sent") || !strings.HasPrefix(out, "tty=true\n") {
		t.Errorf("run -t: %d %q", code, out)
	}
	// Every run -t deletes its own sandbox.
	runCLI(t, host, "", "run", "-t", "--", "exit", "0")
	d.mu.Lock()
	if len(d.deleted) != 3 || d.deleted[1] != "tty2" || d.deleted[2] != "tty3" {
		t.Errorf("deleted %v, want tty1..3", d.deleted)
	}
	d.failExec = true
	d.mu.Unlock()

	// The exec fails: the error is reported and the sandbox still goes.
	_, errs, code = runCLI(t, host, "", "run", "-it", "--", "sh")
	if code != 1 || !strings.Contains(errs, "not running") {
		t.Errorf("failed exec: %d %q", code, errs)
	}
	d.mu.Lock()
	if len(d.deleted) != 4 || d.deleted[3] != "tty4" {
		t.Errorf("after a failed exec deleted %v, want tty4 last", d.deleted)
	}
	d.failExec, d.failCreat = false, true
	d.mu.Unlock()

	// The create fails: nothing to delete.
	_, errs, code = runCLI(t, host, "", "run", "-it", "--", "sh")
	if code != 1 || !strings.Contains(errs, "quota") {
		t.Errorf("failed create: %d %q", code, errs)
	}
	// No command: refused before anything is created.
	_, errs, code = runCLI(t, host, "", "run", "-it")
	if code != 1 || !strings.Contains(errs, "-t needs a command") {
		t.Errorf("run -it without a command: %d %q", code, errs)
	}
	d.mu.Lock()
	if len(d.deleted) != 4 || len(d.created) != 4 {
		t.Errorf("created %d, deleted %v after refused runs", len(d.created), d.deleted)
	}
	d.mu.Unlock()
}
