package mcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bgIn struct {
	ID      string            `json:"id" jsonschema:"sandbox id or name"`
	Cmd     []string          `json:"cmd,omitempty" jsonschema:"argv of the command (give cmd or shell)"`
	Shell   string            `json:"shell,omitempty" jsonschema:"a command line run with /bin/sh -c (give cmd or shell)"`
	Workdir string            `json:"workdir,omitempty" jsonschema:"working directory"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"extra environment"`
}

type processOut struct {
	Process ProcessInfo `json:"process"`
}

type psOut struct {
	Processes []ProcessInfo `json:"processes"`
}

type killIn struct {
	ID        string `json:"id" jsonschema:"sandbox id or name"`
	ProcessID string `json:"process_id" jsonschema:"id of the background process"`
	Signal    string `json:"signal,omitempty" jsonschema:"signal to send (default SIGTERM)"`
}

// registerProcesses adds the background-process tools over p.
func (s *Session) registerProcesses(p Processes) {
	addTool(s.server, &mcp.Tool{Name: "process_start", Description: "Start a command in a sandbox in the background and return its process id."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bgIn) (*mcp.CallToolResult, processOut, error) {
			cmd, why := command(in.Cmd, in.Shell)
			if why != "" {
				// Put to REST as a start of no command, which it
				// refuses and records as any invalid start.
				_, err := p.StartBackground(ctx, in.ID, nil, nil, "")
				return nil, processOut{}, untranslatable(err, why)
			}
			pi, err := p.StartBackground(ctx, in.ID, cmd, in.Env, in.Workdir)
			return nil, processOut{Process: pi}, err
		})
	addTool(s.server, &mcp.Tool{Name: "process_list", Description: "List a sandbox's background processes.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, psOut, error) {
			ps, err := p.ListProcesses(ctx, in.ID)
			if ps == nil {
				ps = []ProcessInfo{}
			}
			return nil, psOut{Processes: ps}, err
		})
	addTool(s.server, &mcp.Tool{Name: "process_kill", Description: "Send a signal to a background process of a sandbox."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in killIn) (*mcp.CallToolResult, processOut, error) {
			pi, err := p.KillProcess(ctx, in.ID, in.ProcessID, in.Signal)
			return nil, processOut{Process: pi}, err
		})
}
