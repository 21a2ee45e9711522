// Command berth is berth's single binary: the daemon (berth serve), the CLI
// that drives it, and the agent that runs inside each sandbox (berth agent).
// This file only wires; each verb lives in its own file.
package main

import (
	"context"
	"os"

	"github.com/berth-sh/berth/internal/agent"
)

func main() {
	// The agent starts every sandbox: skip building the CLI's command tree.
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agent.Main(os.Args[2:]))
	}
	// The set-up helper the runsc class runs inside a sandbox.
	if len(os.Args) > 1 && os.Args[1] == agent.LimitTasksVerb {
		os.Exit(agent.LimitTasksMain(os.Args[2:]))
	}
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:], os.Stderr))
}
