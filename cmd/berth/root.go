package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
)

// globals are the flags every client verb shares.
type globals struct {
	host   string
	apiKey string
	// TLS of an https:// host: a pinned certificate fingerprint or a CA file.
	tlsFingerprint string
	tlsCA          string
	// context names a saved context (berth context) to use.
	context string
}

// client connects to the daemon that resolve names (flags, then BERTH_*
// variables, then the saved context, then the default socket).
func (g *globals) client() (*client.Client, error) {
	s, err := g.resolve()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithUserAgent("berth-cli/" + version)}
	if s.tlsFingerprint != "" {
		opts = append(opts, client.WithTLSFingerprint(s.tlsFingerprint))
	}
	if s.tlsCA != "" {
		opts = append(opts, client.WithTLSCAFile(s.tlsCA))
	}
	return client.New(s.host, s.apiKey, opts...)
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "berth",
		Short: "Self-hostable sandboxes for AI agents",
		Long: `berth runs isolated Linux sandboxes for code that agents (or their users) write.

One binary is the daemon ("berth serve"), this CLI and the in-sandbox agent.
The CLI talks to the daemon over its unix socket, or over HTTP(S) with an API key.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate("berth {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.host, "host", "", "daemon address: unix:///path.sock or http(s)://host:port (env BERTH_HOST; default "+client.DefaultHost+")")
	pf.StringVar(&g.apiKey, "api-key", "", "API key for a TCP daemon (env BERTH_API_KEY)")
	pf.StringVar(&g.tlsFingerprint, "tls-fingerprint", "", "pin the https:// daemon's certificate: sha256:<hex> as `berth serve` prints it (env "+client.TLSFingerprintEnv+")")
	pf.StringVar(&g.tlsCA, "tls-ca", "", "verify the https:// daemon's certificate against this CA `FILE` (PEM)")
	pf.StringVar(&g.context, "context", "", "use this saved context (env "+contextEnv+"; see berth context)")
	_ = root.RegisterFlagCompletionFunc("context", completeContexts)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})

	root.AddGroup(
		&cobra.Group{ID: "sandbox", Title: "Sandboxes:"},
		&cobra.Group{ID: "admin", Title: "Daemon and templates:"},
	)
	for _, c := range []*cobra.Command{
		newRunCmd(g), newCreateCmd(g), newLsCmd(g), newInspectCmd(g), newEventsCmd(g),
		newRmCmd(g), newExecCmd(g), newCpCmd(g), newFsCmd(g), newDiffCmd(g), newVolumeCmd(g),
		newForkCmd(g), newExportCmd(g), newSnapshotCmd(g), newNetworkCmd(g), newFlowsCmd(g),
		newSecretCmd(g), newLeaseCmd(g), newPortTokenCmd(g),
		newMcpCmd(g), // mcp
	} {
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, c := range newProcessCmds(g) { // background processes (ps.go)
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, v := range append(lifecycleVerbs, hibernateVerbs...) {
		c := newLifecycleCmd(g, v)
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newServeCmd(), newTemplateCmd(g), newApplyCmd(g), newPoolCmd(g), newDoctorCmd(g), newAuditCmd(g), newVersionCmd(g), newBenchCmd(), newSelftestCmd(g),
		newTenantCmd(g), newKeyCmd(g), newQuotaCmd(g), newConsoleCmd(g), newContextCmd(g)} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	root.AddCommand(newInstallKeysCmd(), newKubeNodeAgentCmd())
	addCompletions(root, g)
	return root
}

// exitError ends the process with code, printing nothing more: the command
// already said what there was to say (or, for exec and run, the code is the
// sandboxed command's own).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execute runs the CLI and returns the process exit code. Errors become one
// line on stderr: "berth: <message>".
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(stderr, "berth: %s\n", oneLine(err.Error()))
	return 1
}

// oneLine keeps an error to the single line the CLI promises. Cobra's
// unknown-command error puts its suggestions on lines of their own
// ("Did you mean this?\n\tls"): they are kept, on the same line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	head, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return s
	}
	if _, sugg, ok := strings.Cut(rest, "Did you mean this?"); ok {
		var names []string
		for _, l := range strings.Split(sugg, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				names = append(names, l)
			}
		}
		if len(names) > 0 {
			return head + "; did you mean " + strings.Join(names, " or ") + "?"
		}
	}
	return head
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%q needs %s (usage: %s)", cmd.CommandPath(), names, cmd.UseLine())
		}
		return nil
	}
}

func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return fmt.Errorf("%q needs %s (usage: %s)", cmd.CommandPath(), names, cmd.UseLine())
		}
		return nil
	}
}

// eachArg runs fn for every argument of a verb that takes several (rm,
// pause, ...): a failure is reported on its own line and the rest still
// run; the verb then exits 1. Cancellation (Ctrl-C) stops at once.
func eachArg(cmd *cobra.Command, args []string, fn func(arg string) error) error {
	failed := 0
	for _, a := range args {
		if err := fn(a); err != nil {
			if cmd.Context().Err() != nil {
				return err
			}
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "berth: %s\n", oneLine(err.Error()))
		}
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}
