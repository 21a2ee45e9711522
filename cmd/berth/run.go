package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// runGrace is how much longer than the command's --timeout the sandbox of a
// run may live: the command is killed at the timeout, with a proper exit
// status, and the sandbox lifetime is only a backstop.
const runGrace = 10 * time.Second

// exitInterrupted is the exit code after Ctrl-C, as a shell reports SIGINT.
const exitInterrupted = 130

func newRunCmd(g *globals) *cobra.Command {
	var (
		sf          sandboxFlags
		interactive bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] [--] [CMD [ARG...]]",
		Short: "Run a command in a new ephemeral sandbox, then destroy it",
		Long: `Run a one-shot job: create an ephemeral sandbox, run CMD in it, stream its
output, and exit with its exit code. The sandbox is destroyed when the command
ends, on Ctrl-C (exit code 130) and if this client goes away.

With no CMD, the template's own command runs (its image's ENTRYPOINT and CMD).

With -i, the whole of stdin is read first and passed to the command.`,
		Example: `  berth run -- python3 -c 'print(1+1)'
  berth run --memory 256m --timeout 30s --network none -- sh -c 'make test'
  echo hello | berth run -i -- cat`,
		Args: cobra.ArbitraryArgs, // none: the template's ENTRYPOINT and CMD
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := sf.request()
			if err != nil {
				return err
			}
			req := api.RunRequest{Sandbox: sb, Exec: api.ExecRequest{Cmd: args}}
			if sf.timeout > 0 {
				req.Exec.TimeoutSeconds = sf.timeout.seconds()
				req.Sandbox.TimeoutSeconds = (time.Duration(sf.timeout) + runGrace).Seconds()
			}
			if interactive {
				if req.Exec.Stdin, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, exit, err := c.Run(ctx, req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return commandExit(ctx, cmd, exit, err)
		},
	}
	f := cmd.Flags()
	// Flags stop at the command: `berth run ls -la` runs `ls -la`.
	f.SetInterspersed(false)
	sf.register(f, "time limit for the command")
	f.BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command")
	return cmd
}

// commandExit turns the end of a run or exec into the CLI's exit: the
// command's own code, 130 after Ctrl-C, or an error.
func commandExit(ctx context.Context, cmd *cobra.Command, exit api.ExecExit, err error) error {
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return &exitError{code: exitInterrupted}
		}
		return err
	}
	switch {
	case exit.TimedOut:
		fmt.Fprintln(cmd.ErrOrStderr(), "berth: command timed out and was killed")
	case exit.OOMKilled:
		fmt.Fprintln(cmd.ErrOrStderr(), "berth: command was killed: out of memory (raise --memory)")
	}
	if exit.Code != 0 {
		return &exitError{code: exit.Code}
	}
	return nil
}
