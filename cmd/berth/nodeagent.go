//go:build !berthcli

package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/node/kube/nodeagent"
)

// newKubeNodeAgentCmd runs berth's node agent on a Kubernetes node that
// runs gVisor pods (a DaemonSet: deploy/kubernetes/node-agent.yaml,
// docs/kubernetes.md "The node agent"): it pauses and resumes the pods'
// sandboxes with the node's runsc for the daemon, under mutual TLS.
func newKubeNodeAgentCmd() *cobra.Command {
	var cfg nodeagent.Config
	var listen, tlsDir string
	cmd := &cobra.Command{
		Use:    "kube-node-agent --listen ADDR --tls-dir DIR --namespace NS [--root DIR] [--runsc PATH]",
		Short:  "Freeze and thaw gVisor pods on this Kubernetes node for berth's daemon (a DaemonSet)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			s, err := nodeagent.New(cfg)
			if err != nil {
				return err
			}
			if _, err := os.Stat(cfg.Runsc); err != nil {
				return fmt.Errorf("kube-node-agent: runsc: %w", err)
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("kube-node-agent: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cfg.Logger.Info("node agent listening", "addr", l.Addr().String(), "root", cfg.Root, "namespaces", cfg.Namespaces)
			return nodeagent.Serve(ctx, s, l, tlsDir)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":7071", "TCP `ADDR` to serve on (the node's address: a hostNetwork pod)")
	f.StringVar(&tlsDir, "tls-dir", "/etc/berth/node-agent", "`DIR` with agent.crt, agent.key and daemon.crt of the node agents' identity (the daemon's Secret)")
	f.StringSliceVar(&cfg.Namespaces, "namespace", nil, "the only `NAMESPACE` whose pods it acts on (repeatable): berth's sandbox namespace")
	f.StringVar(&cfg.Root, "root", "/run/containerd/runsc/k8s.io", "runsc's root of the node's pods (containerd-shim-runsc-v1's root and containerd's namespace)")
	f.StringVar(&cfg.Runsc, "runsc", "/usr/local/bin/runsc", "the node's runsc `PATH` (the one its containerd shim runs)")
	return cmd
}
