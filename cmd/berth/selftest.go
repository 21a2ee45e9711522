//go:build !berthcli

package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/selftest"
)

func newSelftestCmd(g *globals) *cobra.Command {
	var (
		runtimes []string
		only     []string
		private  bool
		dataDir  string
		tcp      string
		runsc    string
		agent    string
		quiet    bool
		list     bool
	)
	cmd := &cobra.Command{
		Use:   "selftest [--private] [--runtime runc,runsc] [--only PATTERN,...] [-o json]",
		Short: "Attack the sandbox boundary from inside, on every runtime class",
		Long: `Run berth's attack suite: more than a hundred escape and abuse attempts made
for real from inside sandboxes (system calls, /proc and /sys, capabilities,
runc CVE classes, the agent's socket and process, resource limits, network,
other sandboxes, the file API, API credentials), on every runtime class the
daemon offers, and print for each: attack, expected, observed, contained.
Every sandbox it makes is deleted; it ends with the daemon's doctor check.
It exits 1 when any attack was not contained or anything was left behind.

With --private it starts its own daemon (a temporary data dir under /tmp, its
own socket, a TCP listener on 127.0.0.1 for the credential attacks), so it
needs nothing running; that is what "make security-test" does. Otherwise it
connects to the daemon of --host/--api-key; host-side checks then need
--data-dir (the daemon's data dir on this host) and the credential attacks a
TCP endpoint (--host http://... or --tcp).

The egress attacks run only with --private: they start a second private
daemon inside a network namespace the selftest makes, whose only link leads
to another selftest-made namespace holding the test host, under
/tmp/berth-net.lock. Nothing is ever sent off this machine. The suite must
run as root on the daemon's host. docs/security.md lists the attacks.`,
		Example: `  berth selftest --private
  berth selftest --private --runtime runsc --only 'agent.*,api.*'
  berth selftest --data-dir /var/lib/berth -o json`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	f := cmd.Flags()
	f.BoolVar(&private, "private", false, "start a private daemon for the run instead of using --host")
	f.StringSliceVar(&runtimes, "runtime", nil, "runtime classes to attack (default: every class the daemon offers)")
	f.StringSliceVar(&only, "only", nil, "run only attacks whose id or category matches (glob or substring), e.g. kernel, 'agent.*', api.lease")
	f.StringVar(&dataDir, "data-dir", "/var/lib/berth", "the daemon's data dir on this host (ignored with --private)")
	f.StringVar(&tcp, "tcp", "", "the daemon's TCP listener, http://host:port, for the credential attacks (ignored with --private)")
	f.StringVar(&runsc, "runsc", "", "with --private: the daemon's --runsc (default: runsc from PATH)")
	f.StringVar(&agent, "agent", "", "with --private: the daemon's --agent (the berth-agent binary for inside sandboxes)")
	f.BoolVar(&list, "list", false, "print the catalogue (markdown) and exit; nothing runs")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if list {
			return selftest.WriteCatalogue(cmd.OutOrStdout(), selftest.Select(only))
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		progress := cmd.ErrOrStderr()
		if quiet {
			progress = nil
		}
		var rep *selftest.Report
		var err error
		if private {
			rep, err = selftest.RunPrivate(ctx, selftest.PrivateOptions{Runsc: runsc, Agent: agent, Runtimes: runtimes, Only: only,
				Progress: progress, Log: cmd.ErrOrStderr()})
		} else {
			conn, cerr := g.resolve()
			if cerr != nil {
				return cerr
			}
			host, key := conn.host, conn.apiKey
			c, cerr := g.client()
			if cerr != nil {
				return cerr
			}
			defer c.Close()
			opts := selftest.Options{Client: c, Host: host, APIKey: key, TCP: tcp, DataDir: dataDir,
				Runtimes: runtimes, Only: only, Progress: progress}
			if u, perr := url.Parse(host); perr == nil && u.Scheme == "unix" {
				opts.DaemonPID = selftest.PeerPID(u.Path)
			}
			if st, serr := os.Stat(dataDir); serr != nil || !st.IsDir() {
				opts.DataDir = ""
			}
			rep, err = selftest.Run(ctx, opts)
		}
		if rep != nil {
			w := cmd.OutOrStdout()
			var perr error
			if out.json() {
				perr = printJSON(w, rep)
			} else {
				perr = selftest.WriteTable(w, rep)
			}
			if err == nil {
				err = perr
			}
		}
		if err != nil {
			return err
		}
		if rep.Failed() {
			var parts []string
			if n := rep.Uncontained(); n > 0 {
				parts = append(parts, fmt.Sprintf("%d attack(s) not contained", n))
			}
			if len(rep.Cleanup) > 0 {
				parts = append(parts, fmt.Sprintf("%d cleanup problem(s)", len(rep.Cleanup)))
			}
			return fmt.Errorf("selftest failed: %s", strings.Join(parts, ", "))
		}
		return nil
	}
	return cmd
}
