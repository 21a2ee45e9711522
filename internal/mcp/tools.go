package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// SandboxInfo is a sandbox as the tools return it.
type SandboxInfo struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Template    string   `json:"template"`
	State       string   `json:"state"`
	Persistent  bool     `json:"persistent"`
	Network     string   `json:"network"`
	Allow       []string `json:"allow,omitempty"`
	PublicPorts []int    `json:"public_ports,omitempty"`
	// SessionOwned: the sandbox is ephemeral and is deleted when this
	// MCP session ends.
	SessionOwned bool `json:"session_owned"`
}

func (s *Session) info(sb *api.Sandbox) SandboxInfo {
	s.mu.Lock()
	owned := s.ephemeral[sb.ID]
	s.mu.Unlock()
	return SandboxInfo{ID: sb.ID, Name: sb.Name, Template: sb.Template, State: sb.State, Persistent: sb.Persistent,
		Network: sb.Network, Allow: sb.Allow, PublicPorts: sb.PublicPorts, SessionOwned: owned}
}

type createIn struct {
	Template       string            `json:"template,omitempty" jsonschema:"template to start from (default: the daemon's default template)"`
	Name           string            `json:"name,omitempty" jsonschema:"sandbox name (default: generated)"`
	Persistent     bool              `json:"persistent,omitempty" jsonschema:"keep the sandbox (and its /workspace volume) after this session ends; ephemeral sandboxes are deleted when the session ends"`
	Network        string            `json:"network,omitempty" jsonschema:"network mode: none (default) or egress"`
	Allow          []string          `json:"allow,omitempty" jsonschema:"egress rules for network egress: [tcp://|udp://]IP|CIDR|DOMAIN|*.DOMAIN[:PORT[,PORT]]; all else is denied"`
	PublicPorts    []int             `json:"public_ports,omitempty" jsonschema:"sandbox ports the port proxy serves without credentials"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment of every command"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"hard lifetime in seconds (0: none)"`
}

type sandboxOut struct {
	Sandbox SandboxInfo `json:"sandbox"`
}

type idIn struct {
	ID string `json:"id" jsonschema:"sandbox id or name"`
}

type listIn struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (default 100, at most 1000)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the page before"`
}

type listOut struct {
	Sandboxes  []SandboxInfo `json:"sandboxes"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

type runIn struct {
	ID             string            `json:"id" jsonschema:"sandbox id or name"`
	Cmd            []string          `json:"cmd,omitempty" jsonschema:"argv of the command (give cmd or shell)"`
	Shell          string            `json:"shell,omitempty" jsonschema:"a command line run with /bin/sh -c (give cmd or shell)"`
	Workdir        string            `json:"workdir,omitempty" jsonschema:"working directory"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"whole stdin of the command"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"bytes of stdout and of stderr returned (default 65536, at most 1048576)"`
}

type runOut struct {
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	TimedOut        bool    `json:"timed_out"`
	OOMKilled       bool    `json:"oom_killed"`
	DurationMS      float64 `json:"duration_ms"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
}

type writeIn struct {
	ID       string `json:"id" jsonschema:"sandbox id or name"`
	Path     string `json:"path" jsonschema:"absolute path of the file"`
	Content  string `json:"content" jsonschema:"file contents"`
	Encoding string `json:"encoding,omitempty" jsonschema:"encoding of content: utf8 (default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"octal permission bits, e.g. 0755 (default: the daemon's)"`
}

type fileOut struct {
	File api.FileInfo `json:"file"`
}

type readIn struct {
	ID       string `json:"id" jsonschema:"sandbox id or name"`
	Path     string `json:"path" jsonschema:"absolute path of the file"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"bytes returned at most (default 262144, at most 4194304)"`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding"` // utf8 | base64
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated"`
	Mode      string `json:"mode"`
}

type lsIn struct {
	ID     string `json:"id" jsonschema:"sandbox id or name"`
	Path   string `json:"path" jsonschema:"absolute path of the directory"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many entries (default 100, at most 1000)"`
	Offset int    `json:"offset,omitempty" jsonschema:"skip this many entries (next_offset of the page before)"`
}

type lsOut struct {
	Path       string         `json:"path"`
	Entries    []api.FileInfo `json:"entries"`
	Total      int            `json:"total"`
	NextOffset int            `json:"next_offset,omitempty"`
}

type portIn struct {
	ID     string `json:"id" jsonschema:"sandbox id or name"`
	Port   int    `json:"port" jsonschema:"TCP port a server inside the sandbox listens on"`
	Public bool   `json:"public,omitempty" jsonschema:"require the port to be public (reachable without credentials); only a sandbox created with it in public_ports is"`
}

type portOut struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	Path      string `json:"path"`
	URL       string `json:"url,omitempty"`
	HostURL   string `json:"host_url,omitempty"`
	Public    bool   `json:"public"`
	// Auth says what a request to the URL needs.
	Auth string `json:"auth"`
}

type snapshotIn struct {
	ID   string `json:"id" jsonschema:"sandbox id or name"`
	Name string `json:"name,omitempty" jsonschema:"snapshot name"`
}

type snapshotOut struct {
	Snapshot api.Snapshot `json:"snapshot"`
}

type forkIn struct {
	ID         string `json:"id" jsonschema:"sandbox id or name to fork"`
	Count      int    `json:"count,omitempty" jsonschema:"children to make (default 1, at most 64)"`
	Persistent bool   `json:"persistent,omitempty" jsonschema:"make the children persistent; ephemeral children are deleted when the session ends"`
}

type forkOut struct {
	Children []SandboxInfo `json:"children"`
	FreezeMS float64       `json:"freeze_ms"`
}

type deleteOut struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (s *Session) register() {
	srv := s.server
	addTool(srv, &mcp.Tool{Name: "sandbox_create", Description: "Create a sandbox (ephemeral by default: deleted when this session ends; persistent on request) from a template, with optional egress rules and public ports."}, s.create)
	addTool(srv, &mcp.Tool{Name: "sandbox_list", Description: "List the sandboxes the caller owns, one page at a time.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.list)
	addTool(srv, &mcp.Tool{Name: "sandbox_get", Description: "Show one sandbox.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.get)
	addTool(srv, &mcp.Tool{Name: "sandbox_delete", Description: "Delete a sandbox and everything in it."}, s.delete)
	addTool(srv, &mcp.Tool{Name: "run_command", Description: "Run a command in a sandbox in the foreground and return its exit code and (bounded) stdout and stderr."}, s.run)
	addTool(srv, &mcp.Tool{Name: "file_write", Description: "Create or replace a file inside a sandbox (its missing parent directories are made)."}, s.writeFile)
	addTool(srv, &mcp.Tool{Name: "file_read", Description: "Read a file inside a sandbox (bounded; binary content comes back as base64).", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.readFile)
	addTool(srv, &mcp.Tool{Name: "file_list", Description: "List a directory inside a sandbox, one page at a time.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.listFiles)
	addTool(srv, &mcp.Tool{Name: "expose_port", Description: "Return the port-proxy URL of a sandbox port, and whether it is public.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.exposePort)
	addTool(srv, &mcp.Tool{Name: "snapshot_create", Description: "Snapshot a sandbox's filesystem (workspace and writable root)."}, s.snapshot)
	addTool(srv, &mcp.Tool{Name: "sandbox_fork", Description: "Fork a sandbox into copy-on-write children (ephemeral by default: deleted when this session ends)."}, s.fork)
	if s.opts.Processes != nil {
		s.registerProcesses(s.opts.Processes)
	}
}

func (s *Session) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, sandboxOut, error) {
	if s.Closed() {
		return nil, sandboxOut{}, errors.New("the session has ended")
	}
	sb, err := s.opts.Client.CreateSandbox(ctx, api.CreateSandboxRequest{
		Name: in.Name, Template: in.Template, Persistent: in.Persistent, Network: in.Network,
		Allow: in.Allow, PublicPorts: in.PublicPorts, Env: in.Env, TimeoutSeconds: in.TimeoutSeconds,
	})
	if err != nil {
		return nil, sandboxOut{}, err
	}
	if !sb.Persistent {
		s.track(sb.ID)
		if s.Closed() {
			// The session ended while the create ran: its cleanup has
			// gone by, so this sandbox is deleted here.
			s.Cleanup()
			return nil, sandboxOut{}, errors.New("the session has ended")
		}
	}
	return nil, sandboxOut{Sandbox: s.info(sb)}, nil
}

func (s *Session) list(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	sbs, next, err := s.opts.Client.ListSandboxesPage(ctx, false, clientPage(in.Limit, in.Cursor))
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: make([]SandboxInfo, 0, len(sbs)), NextCursor: next}
	for i := range sbs {
		out.Sandboxes = append(out.Sandboxes, s.info(&sbs[i]))
	}
	return nil, out, nil
}

func (s *Session) get(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, sandboxOut, error) {
	sb, err := s.opts.Client.GetSandbox(ctx, in.ID)
	if err != nil {
		return nil, sandboxOut{}, err
	}
	return nil, sandboxOut{Sandbox: s.info(sb)}, nil
}

func (s *Session) delete(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, deleteOut, error) {
	sb, err := s.opts.Client.DeleteSandbox(ctx, in.ID, true)
	if err != nil {
		return nil, deleteOut{}, err
	}
	s.untrack(sb.ID)
	return nil, deleteOut{ID: sb.ID, State: sb.State}, nil
}

func (s *Session) run(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	cmd, why := command(in.Cmd, in.Shell)
	if why != "" {
		// Put to REST as an exec of no command, which it refuses and
		// records as it refuses any invalid exec.
		_, err := s.opts.Client.Exec(ctx, in.ID, api.ExecRequest{}, io.Discard, io.Discard)
		return nil, runOut{}, untranslatable(err, why)
	}
	n := bound(in.MaxOutputBytes, DefaultOutputBytes, MaxOutputBytes)
	stdout, stderr := &capped{max: n}, &capped{max: n}
	req := api.ExecRequest{Cmd: cmd, Env: in.Env, Workdir: in.Workdir, TimeoutSeconds: in.TimeoutSeconds}
	if in.Stdin != "" {
		req.Stdin = []byte(in.Stdin)
	}
	exit, err := s.opts.Client.Exec(ctx, in.ID, req, stdout, stderr)
	if err != nil {
		return nil, runOut{}, err
	}
	return nil, runOut{
		ExitCode: exit.Code, Signal: exit.Signal, TimedOut: exit.TimedOut, OOMKilled: exit.OOMKilled, DurationMS: exit.DurationMS,
		Stdout: text(stdout.buf.Bytes()), Stderr: text(stderr.buf.Bytes()),
		StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut,
	}, nil
}

func (s *Session) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, fileOut, error) {
	data, mode, why := writeArgs(in)
	if why != nil {
		// Put to REST as a write to no path, which it refuses and
		// records as it refuses any invalid write.
		_, err := s.opts.Client.WriteFile(ctx, in.ID, "", 0, bytes.NewReader(nil))
		return nil, fileOut{}, untranslatable(err, why.Error())
	}
	fi, err := s.opts.Client.WriteFile(ctx, in.ID, in.Path, mode, bytes.NewReader(data))
	if dir := path.Dir(in.Path); client.IsNotFound(err) && path.IsAbs(in.Path) && dir != "/" {
		// As an editor saves: the file's missing directories are made,
		// then it is written again. Only after the daemon took the write
		// (its path valid, the caller allowed): a refused write changes
		// nothing, and a write into a directory that exists is the one
		// call (and audit record) REST's is.
		if err := s.opts.Client.Mkdir(ctx, in.ID, dir, true); err != nil {
			return nil, fileOut{}, err
		}
		fi, err = s.opts.Client.WriteFile(ctx, in.ID, in.Path, mode, bytes.NewReader(data))
	}
	if err != nil {
		return nil, fileOut{}, err
	}
	return nil, fileOut{File: *fi}, nil
}

func (s *Session) readFile(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, readOut, error) {
	n := bound(in.MaxBytes, DefaultReadBytes, MaxReadBytes)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One byte more than returned tells a file of exactly n bytes from a
	// longer one; then the transfer is cut off rather than drained.
	w := &capped{max: n + 1, full: cancel}
	mode, _, err := s.opts.Client.ReadFile(ctx, in.ID, in.Path, w)
	if err != nil && !w.cut {
		return nil, readOut{}, err
	}
	data := w.buf.Bytes()
	truncated := len(data) > n
	if truncated {
		data = data[:n]
	}
	out := readOut{Path: in.Path, Bytes: len(data), Truncated: truncated, Mode: fmt.Sprintf("%04o", uint32(mode.Perm()))}
	if truncated {
		if t := trimPartialRune(data); utf8.Valid(t) {
			data = t
			out.Bytes = len(t)
		}
	}
	if utf8.Valid(data) {
		out.Content, out.Encoding = string(data), "utf8"
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return nil, out, nil
}

func (s *Session) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in lsIn) (*mcp.CallToolResult, lsOut, error) {
	if in.Offset < 0 {
		return nil, lsOut{}, errors.New("offset must not be negative")
	}
	all, err := s.opts.Client.List(ctx, in.ID, in.Path)
	if err != nil {
		return nil, lsOut{}, err
	}
	limit := bound(in.Limit, DefaultListLimit, MaxListLimit)
	out := lsOut{Path: in.Path, Total: len(all), Entries: []api.FileInfo{}}
	if in.Offset < len(all) {
		end := min(in.Offset+limit, len(all))
		out.Entries = all[in.Offset:end]
		if end < len(all) {
			out.NextOffset = end
		}
	}
	return nil, out, nil
}

func (s *Session) exposePort(ctx context.Context, _ *mcp.CallToolRequest, in portIn) (*mcp.CallToolResult, portOut, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, portOut{}, fmt.Errorf("port %d: want 1-65535", in.Port)
	}
	sb, err := s.opts.Client.GetSandbox(ctx, in.ID)
	if err != nil {
		return nil, portOut{}, err
	}
	public := false
	for _, p := range sb.PublicPorts {
		public = public || p == in.Port
	}
	if in.Public && !public {
		return nil, portOut{}, fmt.Errorf("port %d of sandbox %s is not public: public ports are set when a sandbox is created (sandbox_create public_ports)", in.Port, sb.ID)
	}
	out := portOut{SandboxID: sb.ID, Port: in.Port, Public: public,
		Path: "/v1/sandboxes/" + url.PathEscape(sb.ID) + "/ports/" + strconv.Itoa(in.Port) + "/"}
	if s.opts.PortBaseURL != "" {
		out.URL = strings.TrimSuffix(s.opts.PortBaseURL, "/") + out.Path
	}
	if s.opts.PortDomain != "" {
		out.HostURL = "http://" + strconv.Itoa(in.Port) + "-" + sb.ID + "." + s.opts.PortDomain + "/"
	}
	if public {
		out.Auth = "none: the port is public"
	} else {
		out.Auth = "an API key with the ports scope, or the sandbox's lease token, as a bearer token"
	}
	return nil, out, nil
}

func (s *Session) snapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotIn) (*mcp.CallToolResult, snapshotOut, error) {
	snap, err := s.opts.Client.CreateSnapshot(ctx, in.ID, api.CreateSnapshotRequest{Name: in.Name})
	if err != nil {
		return nil, snapshotOut{}, err
	}
	return nil, snapshotOut{Snapshot: *snap}, nil
}

func (s *Session) fork(ctx context.Context, _ *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, forkOut, error) {
	if s.Closed() {
		return nil, forkOut{}, errors.New("the session has ended")
	}
	resp, err := s.opts.Client.Fork(ctx, in.ID, api.ForkRequest{Count: in.Count, Persistent: in.Persistent})
	if err != nil {
		return nil, forkOut{}, err
	}
	out := forkOut{FreezeMS: resp.FreezeMS, Children: make([]SandboxInfo, 0, len(resp.Children))}
	for i := range resp.Children {
		if !resp.Children[i].Persistent {
			s.track(resp.Children[i].ID)
		}
		out.Children = append(out.Children, s.info(&resp.Children[i]))
	}
	if s.Closed() {
		s.Cleanup()
		return nil, forkOut{}, errors.New("the session has ended")
	}
	return nil, out, nil
}

// capped keeps the first max bytes written and reports the rest as
// accepted, so a chatty command is not failed for its output; full, when
// set, is called once the cap is reached (to cut a transfer off).
type capped struct {
	buf  bytes.Buffer
	max  int
	cut  bool
	full func()
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		if !c.cut {
			c.cut = true
			if c.full != nil {
				c.full()
			}
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// text returns output as a string, with invalid UTF-8 replaced (a cut can
// split a rune; JSON strings must be valid).
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// trimPartialRune drops a rune the cut split at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func clientPage(limit int, cursor string) client.Page {
	return client.Page{Limit: bound(limit, DefaultListLimit, MaxListLimit), Cursor: cursor}
}

func bound(v, def, most int) int {
	switch {
	case v <= 0:
		return def
	case v > most:
		return most
	}
	return v
}

func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q: want octal permission bits such as 0644", s)
	}
	fm := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm, nil
}

// writeArgs translates file_write's arguments: the bytes to write and
// their mode, or why they cannot be.
func writeArgs(in writeIn) ([]byte, fs.FileMode, error) {
	var data []byte
	switch in.Encoding {
	case "", "utf8", "utf-8":
		data = []byte(in.Content)
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, 0, fmt.Errorf("content is not base64: %v", err)
		}
	default:
		return nil, 0, fmt.Errorf("encoding %q: want utf8 or base64", in.Encoding)
	}
	mode, err := parseMode(in.Mode)
	if err != nil {
		return nil, 0, err
	}
	return data, mode, nil
}

// command is the command of a tool's cmd or shell argument, or why there
// is none ("give cmd or shell").
func command(cmd []string, shell string) ([]string, string) {
	switch {
	case len(cmd) > 0 && shell != "":
		return nil, "give cmd or shell, not both"
	case shell != "":
		return []string{"/bin/sh", "-c", shell}, ""
	case len(cmd) == 0:
		return nil, "give cmd or shell"
	}
	return cmd, ""
}

// untranslatable is the answer to a tool call whose arguments MCP cannot
// translate (no command, content that is not base64): err is REST's
// answer to the operation asked without what was missing (no command, no
// path), which REST refuses as it refuses any invalid request of it —
// its decision first (a caller without the right hears that), then its
// audit record ("error 400") —, so a call MCP cannot translate leaves
// the record the same refusal through REST leaves. The answer says why
// (REST's invalid_argument code, the tool's own reason).
func untranslatable(err error, why string) error {
	var e *client.Error
	switch {
	case err == nil:
		return errors.New(why) // cannot happen: REST refuses both
	case errors.As(err, &e) && e.Status == http.StatusBadRequest:
		return refusal{why: why, rest: err}
	}
	return err
}

// refusal is REST's refusal of a call MCP could not translate, told with
// the tool's reason.
type refusal struct {
	why  string
	rest error
}

func (r refusal) Error() string { return r.why }
func (r refusal) Unwrap() error { return r.rest }
