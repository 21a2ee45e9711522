// Command berth is berth's single binary: the daemon (berth serve), the CLI
// that drives it, and the agent that runs inside each sandbox (berth agent).
// This file only wires; each verb lives in its own file.
package main

import (
	"context"
	"os"

	"github.com/berth-sh/berth/internal/agent/agentd"
)

func main() {
	// The agent starts every sandbox: skip building the CLI's command tree.
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agentd.Main(os.Args[2:]))
	}
	// The set-up helpers the runsc class runs inside a sandbox.
	if len(os.Args) > 1 && os.Args[1] == agentd.LimitTasksVerb {
		os.Exit(agentd.LimitTasksMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == agentd.SetHostnameVerb {
		os.Exit(agentd.SetHostnameMain(os.Args[2:]))
	}
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:], os.Stderr))
}
