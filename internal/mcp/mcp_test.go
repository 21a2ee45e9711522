package mcp

import (
	"bytes"
	"context"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/errdefs"
)

func TestCapped(t *testing.T) {
	full := 0
	c := &capped{max: 5, full: func() { full++ }}
	for _, p := range []string{"ab", "cd", "efgh", "ij"} {
		if n, err := c.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if c.buf.String() != "abcde" || !c.cut || full != 1 {
		t.Fatalf("kept %q cut=%v full=%d, want abcde true 1", c.buf.String(), c.cut, full)
	}
	exact := &capped{max: 3}
	exact.Write([]byte("abc"))
	if exact.cut || exact.buf.String() != "abc" {
		t.Fatalf("exactly max bytes: %q cut=%v", exact.buf.String(), exact.cut)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]fs.FileMode{"": 0, "0644": 0o644, "755": 0o755, "4755": 0o755 | fs.ModeSetuid, "1777": 0o777 | fs.ModeSticky, "2700": 0o700 | fs.ModeSetgid} {
		got, err := parseMode(in)
		if err != nil || got != want {
			t.Errorf("parseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"rw", "0999", "17777", "-1", "0x1ff"} {
		if _, err := parseMode(in); err == nil {
			t.Errorf("parseMode(%q) accepted", in)
		}
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"", "0644", "7777", "10000", "x", "-0", "+7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMode(s)
		if err != nil {
			return
		}
		if m&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("parseMode(%q) = %v: bits beyond permissions", s, m)
		}
	})
}

func TestBoundAndText(t *testing.T) {
	if bound(0, 10, 100) != 10 || bound(-5, 10, 100) != 10 || bound(500, 10, 100) != 100 || bound(42, 10, 100) != 42 {
		t.Fatal("bound")
	}
	cut := []byte("héllo")[:2] // splits é
	if got := trimPartialRune(cut); string(got) != "h" {
		t.Fatalf("trimPartialRune = %q", got)
	}
	if s := text(cut); !utf8.ValidString(s) {
		t.Fatalf("text(%q) is not valid UTF-8", s)
	}
}

type noProcesses struct{ Processes }

// connect runs a session's server and a client over the SDK's in-memory
// transports.
func connect(t *testing.T, opts Options) *mcp.ClientSession {
	t.Helper()
	s := NewSession(opts, nil)
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s lacks a schema or description", tool.Name)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// The process tools are registered only over a real Processes.
func TestProcessToolsOnlyWithProcesses(t *testing.T) {
	without := toolNames(t, connect(t, Options{}))
	if slices.Contains(without, "process_start") || len(without) != 11 {
		t.Fatalf("tools without Processes: %v", without)
	}
	with := toolNames(t, connect(t, Options{Processes: noProcesses{}}))
	for _, n := range []string{"process_start", "process_list", "process_kill"} {
		if !slices.Contains(with, n) {
			t.Errorf("%s missing with Processes: %v", n, with)
		}
	}
}

// Bad arguments are tool errors. A call MCP cannot translate into its
// REST operation (no command; content that is not base64, a bad mode) is put to REST as the operation without what is missing (no
// command, no path), so REST decides it and records its refusal
// ("error 400") as it does any invalid request of it: the test's REST
// refuses every request as invalid, as the daemon's does these, and
// counts them (test/e2e TestDoorConformance checks the decision and the
// record against the real daemon: empty-exec, empty-process). The rest
// are answered before any call to the daemon. How much file_write
// carries is REST's bound (access.MaxFileWriteBytes), not MCP's.
func TestBadArguments(t *testing.T) {
	var mu sync.Mutex
	var put []string
	rest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		put = append(put, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":{"code":"invalid_argument","message":"cmd is required"}}`))
	}))
	defer rest.Close()
	rc, err := client.New(rest.URL, "berth_test")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cs := connect(t, Options{Client: rc})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
		rest string // the REST call it is put to ("": none)
	}{
		{"run_command", map[string]any{"id": "x"}, "invalid_argument: give cmd or shell", "POST /v1/sandboxes/x/exec"},
		{"run_command", map[string]any{"id": "x", "cmd": []string{"ls"}, "shell": "ls"}, "not both", "POST /v1/sandboxes/x/exec"},
		{"file_write", map[string]any{"id": "x", "path": "/f", "content": "!!", "encoding": "base64"}, "invalid_argument: content is not base64", "PUT /v1/sandboxes/x/files"},
		{"file_write", map[string]any{"id": "x", "path": "/f", "content": "a", "encoding": "rot13"}, "want utf8 or base64", "PUT /v1/sandboxes/x/files"},
		{"file_write", map[string]any{"id": "x", "path": "/f", "content": "a", "mode": "rwx"}, "octal", "PUT /v1/sandboxes/x/files"},
		{"file_list", map[string]any{"id": "x", "path": "/", "offset": -1}, "negative", ""},
		{"expose_port", map[string]any{"id": "x", "port": 70000}, "1-65535", ""},
		{"sandbox_create", map[string]any{"persistent": "yes"}, "", ""}, // schema: not a boolean
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			continue // refused at the protocol level: fine too
		}
		var msg bytes.Buffer
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				msg.WriteString(tc.Text)
			}
		}
		if !res.IsError || !strings.Contains(msg.String(), c.want) {
			t.Errorf("%s %v: error=%v %q, want an error with %q", c.tool, c.args, res.IsError, msg.String(), c.want)
		}
		mu.Lock()
		got := put
		put = nil
		mu.Unlock()
		if c.rest == "" && len(got) != 0 || c.rest != "" && !slices.Equal(got, []string{c.rest}) {
			t.Errorf("%s %v: put to REST as %v, want %q", c.tool, c.args, got, c.rest)
		}
	}
}

// TestSchemaRefusalsGoThroughGate: a call whose arguments the MCP SDK
// refuses before the tool runs (not of the tool's schema) is put to the
// gate (Options.Refuse) as the tool's operation on the sandbox it names,
// and answered with the gate's code; a refusal of the tool's own is not.
func TestSchemaRefusalsGoThroughGate(t *testing.T) {
	type call struct {
		op      access.Op
		sandbox string
	}
	var mu sync.Mutex
	var got []call
	deny := false
	refuse := func(_ context.Context, op access.Op, sandbox, why string) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, call{op, sandbox})
		if deny {
			return errdefs.Permission("no")
		}
		return errdefs.Invalid("%s", why)
	}
	cs := connect(t, Options{Refuse: refuse, Processes: noProcesses{}})
	for _, c := range []struct {
		tool string
		args map[string]any
		deny bool
		want string
		gate *call // nil: not put to the gate
	}{
		{"sandbox_create", map[string]any{"persistent": "yes"}, false, "invalid_argument: ", &call{access.SandboxCreate, ""}},
		{"run_command", map[string]any{"id": "sb1", "cmd": "ls"}, false, "invalid_argument: ", &call{access.Exec, "sb1"}},
		{"file_write", map[string]any{"id": "sb1", "path": "/f", "content": 5}, true, "permission_denied: ", &call{access.FilesWrite, "sb1"}},
		{"process_start", map[string]any{"id": 7}, false, "invalid_argument: ", &call{access.ProcessStart, ""}},
		{"file_list", map[string]any{"id": "x", "path": "/", "offset": -1}, false, "negative", nil},
	} {
		mu.Lock()
		got, deny = nil, c.deny
		mu.Unlock()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		var msg strings.Builder
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				msg.WriteString(tc.Text)
			}
		}
		if !res.IsError || !strings.Contains(msg.String(), c.want) {
			t.Errorf("%s %v: error=%v %q, want %q", c.tool, c.args, res.IsError, msg.String(), c.want)
		}
		mu.Lock()
		if c.gate == nil && len(got) != 0 || c.gate != nil && !slices.Equal(got, []call{*c.gate}) {
			t.Errorf("%s %v: put to the gate as %v, want %v", c.tool, c.args, got, c.gate)
		}
		mu.Unlock()
	}
	for name := range toolOps {
		if _, ok := ToolOp(name); !ok {
			t.Errorf("tool %s has no operation", name)
		}
	}
	for _, name := range toolNames(t, cs) {
		if _, ok := ToolOp(name); !ok {
			t.Errorf("tool %s has no operation: a refusal of its arguments would go unrecorded", name)
		}
	}
}
