package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func newExecCmd(g *globals) *cobra.Command {
	var (
		interactive, tty bool
		env              []string
		workdir, user    string
		timeout          durationValue
		detach           bool
		tag, restart     string
		maxRestarts      int
		readyPort        int
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] CMD [ARG...]",
		Short: "Run a command in a running sandbox",
		Long: `Run a command in a running sandbox and exit with its exit code.

Without -i or -t the command's stdin is empty and its output is streamed back.
-i attaches stdin; -t gives the command a terminal (the local terminal is put in
raw mode and resizes are passed on). Use both for a shell: berth exec -it ID sh

-d starts the command in the background, detached from this client: berth
prints its process id and exits. See berth ps, logs, attach, kill and wait.
With -d, -t gives it a terminal to attach to later. --restart always|on-failure
makes it supervised: the agent restarts it when it ends, and berth starts it
again at every boot of the sandbox (start after stop, wake, restart after a
host reboot) until berth kill ends it. --ready-port makes the start (and, for a
supervised process, a port request that wakes the sandbox) wait, at most 30 s,
until that port accepts.`,
		Example: `  berth exec $id -- python3 -c 'print(42)'
  berth exec -it $id bash
  tar c src | berth exec -i $id -- tar x -C /work
  berth exec -d --tag web $id -- python3 -m http.server 8000
  berth exec -d --tag web --restart always --ready-port 8000 $id -- python3 -m http.server 8000`,
		Args: minArgs(2, "a sandbox id and a command"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			// Flags stop at the id, so a "--" after it reaches us.
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return minArgs(2, "a sandbox id and a command")(cmd, nil)
			}
			envMap, err := parseEnv(env, os.LookupEnv)
			if err != nil {
				return err
			}
			req := api.ExecRequest{Cmd: argv, Env: envMap, Workdir: workdir, User: user, TimeoutSeconds: timeout.seconds()}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()

			if detach {
				if interactive {
					return fmt.Errorf("-d and -i do not go together: send input with berth attach")
				}
				req.TTY = tty
				return startDetached(cmd.Context(), cmd, g, id, req, api.StartProcessRequest{Tag: tag, Restart: restart,
					MaxRestarts: maxRestarts, ReadyPort: readyPort})
			}
			if tag != "" || restart != "" || maxRestarts != 0 || readyPort != 0 {
				return fmt.Errorf("--tag, --restart, --max-restarts and --ready-port need -d")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var exit api.ExecExit
			if interactive || tty {
				exit, err = execInteractive(ctx, cmd, c, id, req, interactive, tty)
			} else {
				exit, err = c.Exec(ctx, id, req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return commandExit(ctx, cmd, exit, err)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.BoolVarP(&interactive, "interactive", "i", false, "attach stdin")
	f.BoolVarP(&tty, "tty", "t", false, "allocate a terminal")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (or K to pass the local value); repeatable")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory inside the sandbox")
	f.StringVarP(&user, "user", "u", "", "user to run as: uid[:gid] or a name from the sandbox's /etc/passwd")
	f.Var(&timeout, "timeout", "kill the command after this long (e.g. 30s, 5m, or seconds)")
	f.BoolVarP(&detach, "detach", "d", false, "run in the background and print the process id")
	f.StringVar(&tag, "tag", "", "with -d: name the process (unique among the sandbox's running ones)")
	f.StringVar(&restart, "restart", "", "with -d: restart policy: never, always or on-failure (supervised: started again at every boot)")
	f.IntVar(&maxRestarts, "max-restarts", 0, "with -d and --restart: restarts per boot of the sandbox (default 10)")
	f.IntVar(&readyPort, "ready-port", 0, "with -d: wait (at most 30 s) until the process accepts on this TCP port")
	return cmd
}

// execInteractive runs req over the WebSocket route. With tty and a local
// terminal, that terminal is in raw mode for the duration (so Ctrl-C reaches
// the command rather than berth) and its size follows SIGWINCH.
func execInteractive(ctx context.Context, cmd *cobra.Command, c *client.Client, id string, req api.ExecRequest, interactive, tty bool) (api.ExecExit, error) {
	var stdin io.Reader = blockingReader{ctx}
	if interactive {
		stdin = cmd.InOrStdin()
	}
	var resize chan api.Resize
	if tty {
		req.TTY = true
		inFd, outFd := int(os.Stdin.Fd()), int(os.Stdout.Fd())
		if term.IsTerminal(outFd) {
			if cols, rows, err := term.GetSize(outFd); err == nil {
				req.Rows, req.Cols = uint16(rows), uint16(cols)
			}
			resize = make(chan api.Resize, 1)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go forwardResizes(ctx, outFd, winch, resize)
		}
		if interactive && term.IsTerminal(inFd) {
			old, err := term.MakeRaw(inFd)
			if err != nil {
				return api.ExecExit{}, err
			}
			defer term.Restore(inFd, old)
		}
	}
	return c.ExecInteractive(ctx, id, req, stdin, cmd.OutOrStdout(), cmd.ErrOrStderr(), resize)
}

// forwardResizes sends the terminal's size after each SIGWINCH; a pending
// size not yet sent is replaced by the newer one.
func forwardResizes(ctx context.Context, fd int, winch <-chan os.Signal, out chan api.Resize) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			cols, rows, err := term.GetSize(fd)
			if err != nil {
				continue
			}
			r := api.Resize{Rows: uint16(rows), Cols: uint16(cols)}
			select {
			case <-out:
			default:
			}
			out <- r
		}
	}
}

// blockingReader is the stdin of `exec -t` without -i: nothing is sent and
// the command's stdin stays open (as with docker), until ctx ends.
type blockingReader struct{ ctx context.Context }

func (b blockingReader) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, io.EOF
}
