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
	"github.com/berth-sh/berth/client"
)

// runGrace is how much longer than the command's --timeout the sandbox of a
// run may live: the command is killed at the timeout, with a proper exit
// status, and the sandbox lifetime is only a backstop.
const runGrace = 10 * time.Second

// exitInterrupted is the exit code after Ctrl-C, as a shell reports SIGINT.
const exitInterrupted = 130

func newRunCmd(g *globals) *cobra.Command {
	var (
		sf               sandboxFlags
		interactive, tty bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] [--] [CMD [ARG...]]",
		Short: "Run a command in a new ephemeral sandbox, then destroy it",
		Long: `Run a one-shot job: create an ephemeral sandbox, run CMD in it, stream its
output, and exit with its exit code. The sandbox is destroyed when the command
ends, on Ctrl-C (exit code 130) and if this client goes away.

With no CMD, the template's own command runs (its image's ENTRYPOINT and CMD).

With -i, the whole of stdin is read first and passed to the command.

With -t (and -it for a shell), the command gets a terminal, as with docker run
--rm -it: the sandbox is created, the command runs in it over the interactive
exec route (the local terminal in raw mode, resizes passed on; -i attaches
stdin as it is typed), and the sandbox is deleted when the command exits. If
this client dies instead, the sandbox stops once it has had no session for 10
minutes and is deleted a minute later (unless --timeout ends it earlier).`,
		Example: `  berth run -- python3 -c 'print(1+1)'
  berth run --memory 256m --timeout 30s --network none -- sh -c 'make test'
  echo hello | berth run -i -- cat
  berth run -it -- sh`,
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
			if tty {
				if len(args) == 0 {
					return errors.New("-t needs a command: berth run -it -- sh")
				}
				c, err := g.client()
				if err != nil {
					return err
				}
				defer c.Close()
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				exit, err := runInteractive(ctx, cmd, c, req, interactive)
				return commandExit(ctx, cmd, exit, err)
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
	f.BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command (read whole first; as it is typed with -t)")
	f.BoolVarP(&tty, "tty", "t", false, "give the command a terminal (-it for a shell); the sandbox is deleted when it exits")
	return cmd
}

// Backstop of a run -t whose client dies before it can delete the sandbox
// (a kill -9, a lost laptop): with no session open the sandbox is idle, so
// it stops after runTTYIdle and is deleted runTTYRetention later. An open
// session keeps it from being idle however quiet the user is.
const (
	runTTYIdle      = 10 * time.Minute
	runTTYRetention = time.Minute
)

// runInteractive is run -t: create the sandbox, run the command in it
// through exec's interactive path (execInteractive: raw mode, resizes,
// stdin as typed with -i), then delete the sandbox whatever happened.
func runInteractive(ctx context.Context, cmd *cobra.Command, c *client.Client, req api.RunRequest, interactive bool) (api.ExecExit, error) {
	sbReq := req.Sandbox
	if sbReq.IdleTimeoutSeconds == 0 {
		sbReq.IdleTimeoutSeconds = runTTYIdle.Seconds()
		sbReq.OnIdle = "stop"
		sbReq.RetentionSeconds = runTTYRetention.Seconds()
	}
	sb, err := c.CreateSandbox(ctx, sbReq)
	if err != nil {
		return api.ExecExit{}, err
	}
	defer func() {
		// Ctrl-C or SIGTERM may have ended ctx: the delete still runs.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := c.DeleteSandbox(dctx, sb.ID, true); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "berth: sandbox %s was not deleted: %s\n", sb.ID, oneLine(err.Error()))
		}
	}()
	return execInteractive(ctx, cmd, c, sb.ID, req.Exec, interactive, true)
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
