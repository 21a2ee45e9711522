// Package mcp is berth's Model Context Protocol server: tools that let an
// agent create sandboxes, run commands, read, write and list files, expose
// ports, snapshot, fork and delete, each a typed tool with a JSON-schema'd
// input and a structured result.
//
// The tools are written once against the Go SDK (package client), so they
// pass the same authentication and authorization as any REST call: `berth
// mcp` serves them over stdio with the CLI's connection; the daemon serves
// them over streamable HTTP at /v1/mcp with a client that talks to its own
// handler with the caller's credential (see internal/server/mcp.go).
//
// A Session remembers the ephemeral sandboxes it created (and the ephemeral
// children of its forks) and deletes those still alive when it ends: stdio
// EOF, an HTTP session closed or expired, or the process stopping.
//
// The tools: sandbox_create, sandbox_list (paged by cursor), sandbox_get,
// sandbox_delete, run_command (exit code and stdout/stderr capped at 64 KiB
// each by default, 1 MiB at most, with truncated flags), file_write (as much as
// REST's write takes: the gate's access.MaxFileWriteBytes, REST's 413 and
// record past it), file_read (256 KiB by default, 4 MiB at most; base64 when not
// UTF-8), file_list, expose_port (the proxy URL and whether the port is
// public), snapshot_create, sandbox_fork, and the background-process tools
// process_start, process_list and process_kill, written against the
// Processes interface that ClientProcesses implements. Over HTTP
// (HTTPHandler, mounted at /v1/mcp by internal/server/mcp.go) a session
// belongs to the credential that opened it (another's session id is 404),
// ends with that credential (Caller.Bind), and closes after 15 minutes idle;
// at most 64 sessions (503 past that) and a quarter of them per tenant (429)
// — serve --mcp-max-sessions, --mcp-idle-timeout. The tools' client talks to
// the daemon's own handler through an in-memory loopback listener with the
// caller's bearer key.
//
// It is built on the official Go SDK (github.com/modelcontextprotocol/
// go-sdk); each result carries StructuredContent and the same JSON as text.
// The daemon's route (POST, GET and DELETE /v1/mcp) needs sandboxes:read
// and takes no lease; each tool needs what its REST call needs. A tool's
// refusal starts with the API's error code ("permission_denied: ...").
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Output and listing bounds.
const (
	// DefaultOutputBytes and MaxOutputBytes bound the stdout and the stderr
	// a foreground run returns (each); the rest is cut and flagged.
	DefaultOutputBytes = 64 << 10
	MaxOutputBytes     = 1 << 20
	// DefaultReadBytes and MaxReadBytes bound what file_read returns.
	DefaultReadBytes = 256 << 10
	MaxReadBytes     = 4 << 20
	// DefaultListLimit and MaxListLimit bound one page of a list.
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// cleanupTimeout bounds the deletes a session's end makes.
	cleanupTimeout = 2 * time.Minute
)

// Processes is what the background-process tools need: start a command in
// the background, list a sandbox's processes, kill one. ClientProcesses
// is it over the daemon's API; when Options.Processes is nil the three
// tools are not registered.
type Processes interface {
	StartBackground(ctx context.Context, sandboxID string, cmd []string, env map[string]string, workdir string) (ProcessInfo, error)
	ListProcesses(ctx context.Context, sandboxID string) ([]ProcessInfo, error)
	KillProcess(ctx context.Context, sandboxID, processID, signal string) (ProcessInfo, error)
}

// ProcessInfo is one background process as the process tools return it.
type ProcessInfo struct {
	ID       string   `json:"id"`
	Cmd      []string `json:"cmd"`
	State    string   `json:"state"`
	ExitCode *int     `json:"exit_code,omitempty"`
	PID      int      `json:"pid,omitempty"`
}

// Options configure a Session.
type Options struct {
	// Client reaches the daemon.
	Client *client.Client
	// PortBaseURL is the http(s) base the port-proxy URLs expose_port
	// returns are built on ("" when the daemon is reached over a unix
	// socket: then only the path is returned).
	PortBaseURL string
	// PortDomain, when set, also yields the host-routed URL
	// {port}-{id}.{domain}.
	PortDomain string
	// Processes, when set, registers the background-process tools.
	Processes Processes
	Log       *slog.Logger
	// Version is reported in the server's implementation info.
	Version string
	// Refuse, when set, is the access layer's gate for a call whose
	// arguments the MCP SDK refused before its tool ran (not of the
	// tool's input schema, or not decodable into its input): op is the
	// tool's operation (ToolOp), sandbox the id its arguments name ("" if
	// none can be read), why the SDK's reason. It answers the gate's
	// decision (a caller without the right hears that) and leaves the
	// record of REST's refusal of an invalid request of op ("error
	// 400"), which it returns as an invalid_argument error. The daemon's
	// /v1/mcp sets it; `berth mcp` is a client of REST, whose refusals of
	// what it never sends stay the client's own.
	Refuse func(ctx context.Context, op access.Op, sandbox, why string) error
}

// toolOps is each tool's operation (internal/access): the REST call it
// makes, which decides and records it. Reads are named too: a refused
// read is decided, and not recorded, as REST's.
var toolOps = map[string]access.Op{
	"sandbox_create": access.SandboxCreate, "sandbox_list": access.Read, "sandbox_get": access.SandboxGet,
	"sandbox_delete": access.SandboxDelete, "run_command": access.Exec, "file_write": access.FilesWrite,
	"file_read": access.FilesRead, "file_list": access.FilesRead, "expose_port": access.SandboxGet,
	"snapshot_create": access.SnapshotCreate, "sandbox_fork": access.SandboxFork,
	"process_start": access.ProcessStart, "process_list": access.ProcessRead, "process_kill": access.ProcessSignal,
}

// ToolOp is tool's operation, and false for no tool of the server's.
func ToolOp(tool string) (access.Op, bool) { op, ok := toolOps[tool]; return op, ok }

// Session is one MCP session: its server and the ephemeral sandboxes it
// created.
type Session struct {
	opts   Options
	server *mcp.Server
	log    *slog.Logger

	mu        sync.Mutex
	ephemeral map[string]bool
	closed    bool
}

// NewSession returns a session whose Server has every tool registered.
// serverOpts may be nil.
func NewSession(opts Options, serverOpts *mcp.ServerOptions) *Session {
	s := &Session{opts: opts, ephemeral: map[string]bool{}, log: opts.Log}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	v := opts.Version
	if v == "" {
		v = "dev"
	}
	s.server = mcp.NewServer(&mcp.Implementation{Name: "berth", Title: "berth sandboxes", Version: v}, serverOpts)
	s.register()
	if opts.Refuse != nil {
		s.server.AddReceivingMiddleware(s.gateRefusals)
	}
	return s
}

// reachedKey marks, in a tools/call's context, whether the tool's own
// handler ran (addTool sets it).
type reachedKey struct{}

// gateRefusals puts a tools/call the SDK refused before its tool ran
// through the gate (Options.Refuse): its answer is the gate's, and the
// gate records it as REST records an invalid request of the operation.
func (s *Session) gateRefusals(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		cr, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || cr.Params == nil {
			return next(ctx, method, req)
		}
		reached := new(bool)
		res, err := next(context.WithValue(ctx, reachedKey{}, reached), method, req)
		out, ok := res.(*mcp.CallToolResult)
		op, known := ToolOp(cr.Params.Name)
		if err != nil || !ok || out == nil || !out.IsError || *reached || !known {
			return res, err
		}
		var why strings.Builder
		for _, c := range out.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				why.WriteString(tc.Text)
			}
		}
		var args struct {
			ID any `json:"id"`
		}
		_ = json.Unmarshal(cr.Params.Arguments, &args)
		id, _ := args.ID.(string)
		gerr := s.opts.Refuse(ctx, op, id, why.String())
		if gerr == nil { // cannot happen: the gate refuses what it is handed
			gerr = errdefs.Invalid("%s", why.String())
		}
		var refused mcp.CallToolResult
		refused.SetError(errors.New(codeOf(gerr) + ": " + errdefs.Message(gerr)))
		return &refused, nil
	}
}

// codeOf is err's API error code ("invalid_argument").
func codeOf(err error) string {
	code, _ := errdefs.Code(err)
	if code == "" {
		return "internal"
	}
	return code
}

// Server is the session's MCP server.
func (s *Session) Server() *mcp.Server { return s.server }

// track remembers an ephemeral sandbox the session created.
func (s *Session) track(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ephemeral[id] = true
}

func (s *Session) untrack(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ephemeral, id)
}

// Ephemeral lists the ephemeral sandboxes the session would delete now.
func (s *Session) Ephemeral() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.ephemeral))
	for id := range s.ephemeral {
		ids = append(ids, id)
	}
	return ids
}

// Cleanup deletes the ephemeral sandboxes the session created and still
// holds. It is idempotent, and runs on its own deadline: the session's
// context is usually gone by then.
func (s *Session) Cleanup() {
	s.mu.Lock()
	s.closed = true
	ids := make([]string, 0, len(s.ephemeral))
	for id := range s.ephemeral {
		ids = append(ids, id)
	}
	s.ephemeral = map[string]bool{}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.opts.Client.DeleteSandbox(ctx, id, true); err != nil && !client.IsNotFound(err) {
				s.log.Warn("mcp: deleting a session's ephemeral sandbox", "sandbox", id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Closed reports whether Cleanup has run: tools then refuse to create.
func (s *Session) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// addTool registers a tool whose refusals keep their class: an API error
// comes back as "code: message" (permission_denied, not_found, ...), the
// decision the same call through REST answers, so an agent (and the door
// conformance suite) tells a missing right from a missing sandbox.
func addTool[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		if reached, ok := ctx.Value(reachedKey{}).(*bool); ok {
			*reached = true
		}
		res, out, err := h(ctx, req, in)
		var e *client.Error
		if err != nil && errors.As(err, &e) && e.Code != "" {
			err = fmt.Errorf("%s: %w", e.Code, err)
		}
		return res, out, err
	})
}
