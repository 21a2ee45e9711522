//go:build berthcli

package main

// The CLI build (-tags berthcli: bin/berth) does not link the daemon, the
// bench or the attack suite: those bring the engine, the Kubernetes client
// and the storage drivers, whose package initialisation alone costs the
// full binary ~17 ms before main, paid by every `berth exec`. Their verbs
// (serve, bench, selftest, and kube-node-agent of a node's DaemonSet)
// here hand the whole command line to the full binary, berthd, installed
// beside this one (make build, scripts/demo.sh), by exec: the process,
// its pid, its process group and its signals stay the caller's, so
// `berth serve` under a supervisor or a test harness is berthd serve.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// daemonName is the full binary's file name: the daemon and every verb.
const daemonName = "berthd"

func newServeCmd() *cobra.Command {
	return delegated("serve", "Run the berth daemon")
}

func newBenchCmd() *cobra.Command {
	return delegated("bench", "Measure berth's performance beside raw runc on this host")
}

func newSelftestCmd(*globals) *cobra.Command {
	return delegated("selftest", "Attack the sandbox boundary from inside, on every runtime class")
}

func newKubeNodeAgentCmd() *cobra.Command {
	c := delegated("kube-node-agent", "Freeze and thaw gVisor pods on this Kubernetes node for berth's daemon (a DaemonSet)")
	c.Hidden = true
	return c
}

// delegated is verb use run by berthd: its flags, help included, are
// berthd's own, passed through unparsed.
func delegated(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := daemonBinary()
			if err != nil {
				return err
			}
			argv := append([]string{bin, use}, args...)
			// Exec replaces this process only on success; on failure the
			// error says which file could not run.
			err = syscall.Exec(bin, argv, os.Environ())
			return fmt.Errorf("running %s: %w", bin, err)
		},
	}
}

// daemonBinary finds berthd: beside this executable (as built and
// installed together; the two carry one version), else on PATH.
func daemonBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), daemonName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("the daemon binary %s: %w", p, err)
		}
	}
	p, err := exec.LookPath(daemonName)
	if err != nil {
		return "", fmt.Errorf("%s is not beside this berth nor on PATH: the daemon, bench and selftest are in the full binary (make build puts both in bin/)", daemonName)
	}
	return p, nil
}
