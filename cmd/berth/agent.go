package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/agent/agentd"
)

// newAgentCmd is the in-sandbox agent (PID 1 of every sandbox). It is the
// same binary, mounted read-only into the sandbox; it parses its own flags.
func newAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "agent",
		Short:              "Run the in-sandbox agent (started by the daemon, not by hand)",
		Hidden:             true,
		DisableFlagParsing: true,
		Run: func(_ *cobra.Command, _ []string) {
			os.Exit(agentd.Main(os.Args[2:]))
		},
	}
}
