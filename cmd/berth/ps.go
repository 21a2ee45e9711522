package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/berth-sh/berth/api"
)

// Background processes: exec -d starts them (exec.go); ps, logs, attach,
// kill and wait reach them by id or tag.

func newProcessCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{newPsCmd(g), newLogsCmd(g), newAttachCmd(g), newKillCmd(g), newWaitCmd(g)}
}

// startDetached starts req as a background process and prints its id;
// opt holds the process's own fields (tag, restart policy, ready port).
func startDetached(ctx context.Context, cmd *cobra.Command, g *globals, id string, req api.ExecRequest, opt api.StartProcessRequest) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if req.TimeoutSeconds != 0 {
		return fmt.Errorf("--timeout does not apply to a detached process (kill it with berth kill)")
	}
	opt.Cmd, opt.Env, opt.Workdir, opt.User = req.Cmd, req.Env, req.Workdir, req.User
	opt.TTY, opt.Rows, opt.Cols = req.TTY, req.Rows, req.Cols
	p, err := c.StartProcess(ctx, id, opt)
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), p.ID)
	return nil
}

func newPsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps ID",
		Short: "List a sandbox's background processes",
		Long: `List a sandbox's background processes (berth exec -d), running and ended.

STATE is running, restarting (a supervised process waiting to start again),
exited, killed (by a signal), stopped (ended by the sandbox's stop), or paused
or hibernated with the sandbox. RESTART is a supervised process's policy
(always, on-failure: exec -d --restart), which also starts it again at every
boot; "-" for one that runs once.`,
		Args: exactArgs(1, "a sandbox id"),
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		ps, err := c.Processes(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), ps)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "PID\tTAG\tSTATE\tRESTART\tEXIT\tSTARTED\tCOMMAND")
		now := time.Now()
		for _, p := range ps {
			exit := "-"
			if p.Exit != nil && p.State != "running" {
				exit = fmt.Sprint(p.Exit.Code)
			}
			state := p.State
			if p.Restarts > 0 {
				state += fmt.Sprintf(" (%d restarts)", p.Restarts)
			}
			cmdline := strings.Join(p.Argv, " ")
			if len(cmdline) > 60 {
				cmdline = cmdline[:57] + "..."
			}
			restart := p.Restart
			if restart == "never" {
				restart = ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, orDash(p.Tag), state, orDash(restart), exit, age(now, p.Started), cmdline)
		}
		return tw.Flush()
	}
	return cmd
}

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [-f] ID PID|TAG",
		Short: "Print a background process's output",
		Long: `Print a background process's kept output (its last MiB) and, with -f, its
live output until it ends. With -f, berth exits with the process's exit code.
A process ended by its sandbox's stop keeps the end of its output (8 KiB a
stream): name it by its id (berth ps), while the sandbox is stopped or after it
started again.`,
		Args: exactArgs(2, "a sandbox id and a process id or tag"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ex, err := c.ProcessLogs(ctx, args[0], args[1], follow, cmd.OutOrStdout(), cmd.ErrOrStderr(), func(n int64) {
				fmt.Fprintf(cmd.ErrOrStderr(), "berth: %d bytes of output were dropped\n", n)
			})
			if err != nil || !follow {
				if ctx.Err() != nil {
					return &exitError{code: exitInterrupted}
				}
				return err
			}
			if ex == nil {
				return fmt.Errorf("the log stream ended before the process")
			}
			return commandExit(ctx, cmd, *ex, nil)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream live output until the process ends")
	return cmd
}

func newAttachCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attach ID PID|TAG",
		Short: "Attach the terminal to a background process",
		Long: `Attach to a background process: its kept output, then live output, with the
local stdin going to it (raw terminal for a PTY process started with exec -d -t).
Detach with Ctrl-] ; the process keeps running. Exits with its code if it ends.`,
		Args: exactArgs(2, "a sandbox id and a process id or tag"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			inFd, outFd := int(os.Stdin.Fd()), int(os.Stdout.Fd())
			var resize chan api.Resize
			if term.IsTerminal(outFd) {
				resize = make(chan api.Resize, 1)
				if cols, rows, err := term.GetSize(outFd); err == nil {
					resize <- api.Resize{Rows: uint16(rows), Cols: uint16(cols)}
				}
				winch := make(chan os.Signal, 1)
				signal.Notify(winch, syscall.SIGWINCH)
				defer signal.Stop(winch)
				go forwardResizes(ctx, outFd, winch, resize)
			}
			if term.IsTerminal(inFd) {
				old, err := term.MakeRaw(inFd)
				if err != nil {
					return err
				}
				defer term.Restore(inFd, old)
			}
			stdin := detachReader{r: cmd.InOrStdin(), detach: cancel}
			ex, err := c.AttachProcess(ctx, args[0], args[1], stdin, cmd.OutOrStdout(), cmd.ErrOrStderr(), resize)
			if err != nil && ctx.Err() != nil {
				return nil // detached
			}
			return commandExit(ctx, cmd, ex, err)
		},
	}
	return cmd
}

// detachReader passes stdin on until Ctrl-] (0x1d), which detaches.
type detachReader struct {
	r interface {
		Read([]byte) (int, error)
	}
	detach func()
}

func (d detachReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	for i := range n {
		if p[i] == 0x1d {
			d.detach()
			return i, err
		}
	}
	return n, err
}

func newKillCmd(g *globals) *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   "kill [-s SIGNAL] ID PID|TAG",
		Short: "Signal or kill a background process",
		Long: `Without -s, kill the process's group with SIGKILL (a supervised service is
not restarted). With -s, send that signal (TERM, INT, HUP, ...) to the group.`,
		Args: exactArgs(2, "a sandbox id and a process id or tag"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if sig == "" {
				return c.KillProcess(cmd.Context(), args[0], args[1])
			}
			return c.SignalProcess(cmd.Context(), args[0], args[1], sig)
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "", "signal to send instead of SIGKILL")
	return cmd
}

func newWaitCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "wait ID PID|TAG",
		Short: "Wait for a background process and exit with its code",
		Args:  exactArgs(2, "a sandbox id and a process id or tag"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ex, err := c.WaitProcess(ctx, args[0], args[1])
			return commandExit(ctx, cmd, ex, err)
		},
	}
}
