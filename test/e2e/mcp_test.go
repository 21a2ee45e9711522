package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
)

// mcpTools are the tools berth mcp registers, sorted.
var mcpTools = []string{"expose_port", "file_list", "file_read", "file_write",
	"process_kill", "process_list", "process_start", "run_command",
	"sandbox_create", "sandbox_delete", "sandbox_fork", "sandbox_get", "sandbox_list", "snapshot_create"}

// nodeClient runs test/mcp/client.mjs (the MCP TypeScript SDK client)
// against `berth mcp` on d's socket and decodes what it prints.
func nodeClient(t *testing.T, d *daemon, mode string, out any) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", "mcp")
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the MCP test needs %s: run scripts/install-deps.sh (make deps)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npmInstall(t, ctx, dir, filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BERTH_BIN="+berthBin, "BERTH_HOST=unix://"+d.socket, "MCP_MODE="+mode)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("client.mjs printed %q: %v\nstderr: %s", stdout.String(), err, stderr.String())
	}
}

// assertGone fails unless no live sandbox id is left on d.
func assertGone(t *testing.T, c *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.GetSandbox(context.Background(), id)
		if client.IsNotFound(err) || err == nil && sb.State == "deleted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there after the MCP session ended: %+v %v", id, sb, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sbs, err := c.ListSandboxes(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.ID == id {
			t.Fatalf("sandbox %s still listed: %+v", id, sb)
		}
	}
}

// TestMCPTypeScriptSDK drives `berth mcp` over stdio with the real MCP
// TypeScript SDK client: tools listed, create, run, write, read, list,
// expose a port, delete; then a session that leaves its ephemeral sandbox
// behind, which the session's end must delete.
func TestMCPTypeScriptSDK(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	var full struct {
		OK                    bool     `json:"ok"`
		Error                 string   `json:"error"`
		Tools                 []string `json:"tools"`
		ToolsWithOutputSchema []string `json:"toolsWithOutputSchema"`
		Server                struct{ Name string }
		Created               struct {
			ID           string `json:"id"`
			Persistent   bool   `json:"persistent"`
			SessionOwned bool   `json:"session_owned"`
		} `json:"created"`
		Run struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		} `json:"run"`
		RunFail struct {
			ExitCode int    `json:"exit_code"`
			Stderr   string `json:"stderr"`
		} `json:"runFail"`
		RunBig struct {
			StdoutLen int  `json:"stdoutLen"`
			Truncated bool `json:"truncated"`
		} `json:"runBig"`
		Wrote struct {
			Size int64 `json:"size"`
		} `json:"wrote"`
		Read struct {
			Content   string `json:"content"`
			Encoding  string `json:"encoding"`
			Truncated bool   `json:"truncated"`
		} `json:"read"`
		Listed []string `json:"listed"`
		Port   struct {
			Path   string `json:"path"`
			Public bool   `json:"public"`
		} `json:"port"`
		BG struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"bg"`
		PS []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"ps"`
		Killed struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			ExitCode *int   `json:"exit_code"`
		} `json:"killed"`
		TextIsJSON      bool   `json:"textIsJSON"`
		ReadAfterDelete string `json:"readAfterDelete"`
	}
	nodeClient(t, d, "full", &full)
	if !full.OK {
		t.Fatalf("the TS client failed: %s", full.Error)
	}
	if !slices.Equal(full.Tools, mcpTools) || !slices.Equal(full.ToolsWithOutputSchema, mcpTools) {
		t.Errorf("tools %v (with output schema %v), want %v", full.Tools, full.ToolsWithOutputSchema, mcpTools)
	}
	if full.Server.Name != "berth" {
		t.Errorf("server name %q", full.Server.Name)
	}
	id := full.Created.ID
	if id == "" || full.Created.Persistent || !full.Created.SessionOwned {
		t.Errorf("created %+v: want an ephemeral, session-owned sandbox", full.Created)
	}
	if full.Run.ExitCode != 0 || full.Run.Stdout != "hello from mcp\n" {
		t.Errorf("run: %+v", full.Run)
	}
	if full.BG.ID == "" || full.BG.State != "running" {
		t.Errorf("process_start: %+v, want a running process", full.BG)
	}
	if len(full.PS) != 1 || full.PS[0].ID != full.BG.ID || full.PS[0].State != "running" {
		t.Errorf("process_list: %+v, want the one running process %s", full.PS, full.BG.ID)
	}
	if full.Killed.ID != full.BG.ID || full.Killed.State != "killed" || full.Killed.ExitCode == nil || *full.Killed.ExitCode != 137 {
		t.Errorf("process_kill: %+v, want %s killed with 137", full.Killed, full.BG.ID)
	}
	if full.RunFail.ExitCode != 3 || full.RunFail.Stderr != "oops\n" {
		t.Errorf("failing run: %+v", full.RunFail)
	}
	if full.RunBig.StdoutLen != 1000 || !full.RunBig.Truncated {
		t.Errorf("bounded output: %+v, want 1000 bytes, truncated", full.RunBig)
	}
	if full.Wrote.Size != int64(len("written by the TS SDK\n")) || full.Read.Content != "written by the TS SDK\n" || full.Read.Encoding != "utf8" || full.Read.Truncated {
		t.Errorf("write %+v / read %+v", full.Wrote, full.Read)
	}
	if !slices.Equal(full.Listed, []string{"hello.txt"}) {
		t.Errorf("listed %v", full.Listed)
	}
	if full.Port.Path != "/v1/sandboxes/"+id+"/ports/8080/" || full.Port.Public {
		t.Errorf("port %+v", full.Port)
	}
	if !full.TextIsJSON {
		t.Error("the text content does not mirror the structured content")
	}
	if full.ReadAfterDelete != "error" {
		t.Errorf("reading a deleted sandbox's file: %s", full.ReadAfterDelete)
	}
	assertGone(t, d.c, id)

	var leave struct {
		OK      bool   `json:"ok"`
		Error   string `json:"error"`
		Created struct {
			ID string `json:"id"`
		} `json:"created"`
	}
	nodeClient(t, d, "leave", &leave)
	if !leave.OK || leave.Created.ID == "" {
		t.Fatalf("leave mode: %+v", leave)
	}
	// client.close() closes berth mcp's stdin: EOF ends the session, and
	// berth mcp deletes the sandbox before it exits.
	assertGone(t, d.c, leave.Created.ID)
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		t.Fatalf("%s: tool error %s", name, b)
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("%s: structured content %T", name, res.StructuredContent)
	}
	return m
}

func sandboxID(t *testing.T, out map[string]any) string {
	t.Helper()
	sb, _ := out["sandbox"].(map[string]any)
	id, _ := sb["id"].(string)
	if id == "" {
		t.Fatalf("no sandbox id in %v", out)
	}
	return id
}

// TestMCPStdioSignal: SIGTERM to `berth mcp` ends its session, and its
// ephemeral sandboxes go with it; a persistent one stays.
func TestMCPStdioSignal(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	cmd := exec.Command(berthBin, "mcp", "--host", "unix://"+d.socket)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eph := sandboxID(t, callTool(t, cs, "sandbox_create", map[string]any{}))
	pers := sandboxID(t, callTool(t, cs, "sandbox_create", map[string]any{"persistent": true}))
	forked := callTool(t, cs, "sandbox_fork", map[string]any{"id": eph})
	children, _ := forked["children"].([]any)
	if len(children) != 1 {
		t.Fatalf("fork: %v", forked)
	}
	child, _ := children[0].(map[string]any)["id"].(string)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The transport owns the process: its end shows as the session's.
	done := make(chan error, 1)
	go func() { done <- cs.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("berth mcp did not exit after SIGTERM\n%s", stderr.String())
	}
	cs.Close()
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("berth mcp after SIGTERM: %v\n%s", cmd.ProcessState, stderr.String())
	}
	assertGone(t, d.c, eph)
	assertGone(t, d.c, child)
	sb, err := d.c.GetSandbox(context.Background(), pers)
	if err != nil || sb.State == "deleted" {
		t.Fatalf("the persistent sandbox did not survive the session: %+v %v", sb, err)
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.rt.RoundTrip(r)
}

// TestMCPHTTP: the daemon's /v1/mcp with an API key over TCP and over the
// trusted unix socket; a session's end deletes its ephemeral sandboxes;
// no key, a lease token and another credential's session id are refused.
func TestMCPHTTP(t *testing.T) {
	parallel(t)
	d, addr, admin := tcpDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + addr + "/v1/mcp"
	tcp := &http.Client{Transport: bearer{strings.TrimSpace(string(key)), http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: tcp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != len(mcpTools) {
		t.Fatalf("tools over HTTP: %v %v", tools, err)
	}
	id := sandboxID(t, callTool(t, cs, "sandbox_create", map[string]any{}))
	run := callTool(t, cs, "run_command", map[string]any{"id": id, "cmd": []string{"echo", "over http"}})
	if run["stdout"] != "over http\n" || run["exit_code"] != float64(0) {
		t.Fatalf("run over HTTP: %v", run)
	}
	port := callTool(t, cs, "expose_port", map[string]any{"id": id, "port": 3000})
	if port["url"] != "http://"+addr+"/v1/sandboxes/"+id+"/ports/3000/" {
		t.Errorf("expose_port over HTTP: %v", port)
	}
	tcpSession := cs.ID()
	if tcpSession == "" {
		t.Fatal("no session id")
	}

	// The trusted unix socket opens a session of its own (the local
	// administrator's).
	var dl net.Dialer
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dl.DialContext(ctx, "unix", d.socket)
	}}}
	us, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-unix", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://berth/v1/mcp", HTTPClient: unix}, nil)
	if err != nil {
		t.Fatal(err)
	}
	uid := sandboxID(t, callTool(t, us, "sandbox_create", map[string]any{}))

	// The attacks.
	lease, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	listBody := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	post := func(hc *http.Client, url, token, session, body string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name          string
		hc            *http.Client
		url, token    string
		session, body string
		want          int
	}{
		{"no key", http.DefaultClient, endpoint, "", "", initBody, http.StatusUnauthorized},
		{"no key, a live session id", http.DefaultClient, endpoint, "", tcpSession, listBody, http.StatusUnauthorized},
		{"a wrong key", http.DefaultClient, endpoint, "berth_not-a-key", "", initBody, http.StatusUnauthorized},
		{"a lease token", http.DefaultClient, endpoint, lease.LeaseToken, "", initBody, http.StatusForbidden},
		{"a lease token, a live session id", http.DefaultClient, endpoint, lease.LeaseToken, tcpSession, listBody, http.StatusForbidden},
		{"the key, the unix socket's session", http.DefaultClient, endpoint, strings.TrimSpace(string(key)), us.ID(), listBody, http.StatusNotFound},
		{"the unix socket, the key's session", unix, "http://berth/v1/mcp", "", tcpSession, listBody, http.StatusNotFound},
		{"the key, a made-up session", http.DefaultClient, endpoint, strings.TrimSpace(string(key)), "0123456789abcdef", listBody, http.StatusNotFound},
	} {
		if got := post(c.hc, c.url, c.token, c.session, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	// The refused requests did not hurt the sessions.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("the key's session after the attacks: %v", err)
	}

	// Closing a session (DELETE) deletes its ephemeral sandboxes and
	// nobody else's.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, admin, id)
	if sb, err := admin.GetSandbox(ctx, uid); err != nil || sb.State == "deleted" {
		t.Fatalf("the other session's sandbox went too: %+v %v", sb, err)
	}
	if err := us.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, admin, uid)
	if _, err := admin.DeleteSandbox(ctx, lease.ID, true); err != nil {
		t.Fatal(err)
	}
}

// TestMCPHTTPBounds: /v1/mcp holds at most --mcp-max-sessions sessions, and
// a session idle for --mcp-idle-timeout is closed, its ephemeral sandboxes
// deleted and its slot freed.
func TestMCPHTTPBounds(t *testing.T) {
	parallel(t)
	d, addr, admin := tcpDaemon(t, "--mcp-max-sessions", "2", "--mcp-idle-timeout", "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + addr + "/v1/mcp"
	hc := &http.Client{Transport: bearer{strings.TrimSpace(string(key)), http.DefaultTransport}}
	open := func() (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	}
	a, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	id := sandboxID(t, callTool(t, a, "sandbox_create", map[string]any{}))
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if c, err := open(); err == nil {
		c.Close()
		t.Fatal("a third session was let in past --mcp-max-sessions 2")
	} else if !strings.Contains(err.Error(), "503") && !strings.Contains(err.Error(), "Service Unavailable") && !strings.Contains(err.Error(), "too many") {
		t.Fatalf("a third session: %v, want 503", err)
	}
	// Both idle past 3s: closed, the sandbox deleted, the slots free.
	assertGone(t, admin, id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := open()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session after the idle ones expired: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
