package main

import (
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/mcp"
)

func newMcpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol on stdio (for agents)",
		Long: `Serve berth's Model Context Protocol tools on stdin/stdout, for an agent
(an MCP client) that spawns this command. The tools create sandboxes, run
commands, read, write and list files, expose ports, snapshot, fork and delete,
over the daemon named by --host / BERTH_HOST with --api-key / BERTH_API_KEY.

The ephemeral sandboxes a session creates are deleted when it ends: when the
client closes stdin, or on SIGINT/SIGTERM. Persistent ones are kept.

The daemon serves the same tools over streamable HTTP at /v1/mcp.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := mcp.Options{Client: c, Processes: mcp.ClientProcesses{C: c}, Version: version}
			if u, err := url.Parse(c.Host()); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
				opts.PortBaseURL = strings.TrimSuffix(u.String(), "/")
			}
			return mcp.ServeStdio(ctx, opts, os.Stdin, os.Stdout)
		},
	}
}
