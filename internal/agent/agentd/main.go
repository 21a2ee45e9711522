package agentd

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/seccomp"
)

// installSelf copies the running executable to dst through a temporary
// name, so a reader never sees half a binary.
func installSelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// listenTLS listens on addr for the daemon alone: mutual TLS with the
// sandbox's pinned pairs read from dir (package agenttls).
func listenTLS(addr, dir string) (net.Listener, error) {
	conf, err := agenttls.LoadServerConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("--tls-dir: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, conf), nil
}

// DefaultSocket is where the agent listens inside a sandbox; /.berth/run is
// a bind mount of a per-sandbox directory on the host.
const DefaultSocket = "/.berth/run/agent.sock"

// forwarded are the signals PID 1 passes on to every exec'd process group.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2}

// Main is the hidden verb "berth agent": it parses args (flags only),
// takes on the duties of PID 1 when it is PID 1 (or --init says so) and
// serves. It returns the process's exit code.
//
// As PID 1 it becomes the child subreaper, leads its own session, reaps
// every zombie, and survives every signal the sandbox's own processes send
// it: it is not stopped by signals at all (the daemon ends a sandbox from
// the host, through its cgroup). Not as PID 1 (tests, tools) it forwards
// SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to all exec'd process
// groups, and after a SIGTERM exits once they are gone or after the grace
// period.
func Main(args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	socket := fs.String("socket", DefaultSocket, "unix socket to listen on")
	listenFD := fs.Int("listen-fd", 0, "serve on this inherited listening socket instead of creating --socket")
	root := fs.String("root", "/", "directory file operations are confined to")
	init := fs.Bool("init", os.Getpid() == 1, "act as PID 1: subreaper, reap all children, forward signals")
	grace := fs.Duration("shutdown-grace", 5*time.Second, "after SIGTERM, how long to wait for processes to exit")
	maxFile := fs.Int64("max-file-bytes", defaultMaxFileBytes, "cap of one file or tar upload")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	listenTCP := fs.String("listen-tcp", "", "serve on this TCP `ADDR` under mutual TLS (with --tls-dir) instead of a unix socket: a pod reached at its IP")
	tlsDir := fs.String("tls-dir", "", "`DIR` of agent.crt, agent.key and daemon.crt, the sandbox's pinned pairs (with --listen-tcp)")
	install := fs.String("install", "", "copy this executable to `PATH` (mode 0555) and exit: the init container that puts the agent into a pod's shared volume")
	sudoUser := fs.String("sudo-user", "", "serve sudo to root and this `USER` of the sandbox (package sudo)")
	seccompFD := fs.Int("seccomp-fd", 0, "install the compiled seccomp program read from this inherited descriptor before anything else")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// First act: nothing from outside has been read yet, and every
	// process the agent starts from here on inherits the filter.
	if *seccompFD > 0 {
		if err := installSeccomp(*seccompFD); err != nil {
			fmt.Fprintf(os.Stderr, "berth agent: seccomp: %v\n", err)
			return 1
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "berth agent: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *install != "" {
		if err := installSelf(*install); err != nil {
			fmt.Fprintf(os.Stderr, "berth agent: --install: %v\n", err)
			return 1
		}
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "berth agent: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("component", "agent")

	// Out of reach of the code it runs: not dumpable, so no process of the
	// sandbox may ptrace it or open its /proc/1/{mem,environ,fd,exe,...}
	// (that needs CAP_SYS_PTRACE, which no sandbox has); the flag is per
	// address space and execve resets it, so the agent's children are
	// unaffected.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "berth agent: PR_SET_DUMPABLE: %v\n", err)
		return 1
	}
	// A closed daemon connection must be an error on write, not death.
	signal.Ignore(unix.SIGPIPE)
	if *init {
		// Its own session and process group: no job-control signal
		// aimed at a group of the workload's reaches it. (runc's init
		// may already lead one: EPERM is fine.)
		_, _ = unix.Setsid()
		warmThreads(8)
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("cannot become child subreaper", "err", err)
		}
	}
	sigc := make(chan os.Signal, 8)
	if *init {
		// Every catchable signal: the Go runtime's own default for many
		// (SIGQUIT, SIGABRT, SIGTRAP, SIGSYS, ...) is to exit, and as
		// PID 1 a signal with a handler is one the sandbox's processes
		// can send. Relayed here, each is dropped below.
		signal.Notify(sigc)
	} else {
		signal.Notify(sigc, forwarded...)
	}
	defer signal.Stop(sigc)

	cfg := Config{Socket: *socket, ListenFD: *listenFD, Root: *root, Logger: log, MaxFileBytes: *maxFile, reap: *init,
		ManageHosts: *init && *root == "/", SudoUser: *sudoUser}
	if (*listenTCP == "") != (*tlsDir == "") {
		fmt.Fprintln(os.Stderr, "berth agent: --listen-tcp and --tls-dir go together")
		return 2
	}
	if *listenTCP != "" {
		ln, err := listenTLS(*listenTCP, *tlsDir)
		if err != nil {
			log.Error("start", "err", err)
			return 1
		}
		cfg.TCP = ln
	}
	s, err := newServer(cfg)
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	s.syncHosts()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.serve(ctx) }()

	for {
		select {
		case err := <-served:
			if err != nil {
				log.Error("serve", "err", err)
				return 1
			}
			return 0
		case sig := <-sigc:
			us := sig.(unix.Signal)
			if *init {
				// Any process of the sandbox may send PID 1 a signal
				// it has a handler for, and the daemon never signals
				// the agent to stop it: it ends a sandbox through its
				// cgroup. So a signal is never an order to shut down:
				// it is dropped (SIGURG is the Go runtime's own
				// preemption, SIGCHLD the reaper's business).
				if us != unix.SIGURG && us != unix.SIGCHLD {
					log.Debug("signal to PID 1 ignored", "signal", unix.SignalName(us))
				}
				continue
			}
			s.procs.signalAll(us)
			stop := us == unix.SIGTERM || (!*init && us == unix.SIGINT)
			log.Info("signal", "signal", unix.SignalName(us), "forwarded", true, "shutdown", stop)
			if !stop {
				continue
			}
			s.awaitChildren(*grace, *init)
			cancel()
			if err := <-served; err != nil {
				log.Error("serve", "err", err)
				return 1
			}
			return 0
		}
	}
}

// installSeccomp reads a compiled seccomp program (internal/seccomp's
// encoding) from the inherited descriptor fd, closes it and installs the
// program on every thread of the agent. Any failure is fatal: the agent
// never serves without the filter it was told to install.
func installSeccomp(fd int) error {
	f := os.NewFile(uintptr(fd), "seccomp")
	if f == nil {
		return fmt.Errorf("descriptor %d is not open", fd)
	}
	defer f.Close()
	prog, err := seccomp.ReadFile(f)
	if err != nil {
		return err
	}
	return prog.Install()
}

// awaitChildren waits until no exec'd process (and, as reaper, no child at
// all) is left, or grace has passed.
func (s *server) awaitChildren(grace time.Duration, reaper bool) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		// execs, not just processes: a handler still has to send the
		// exit frame of a process that has just ended.
		if s.execs.Load() == 0 && (!reaper || !s.procs.hasChildren()) {
			return
		}
		select {
		case <-s.procs.count:
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.log.Warn("shutdown grace period over", "running", s.procs.running())
}

// warmThreads makes the Go runtime start n OS threads now and keep them
// idle. The agent shares the sandbox's pids limit with the code it runs; a
// fork flood can leave no room for a new thread later, and a Go program
// that cannot create a thread it needs dies. Idle threads are reused.
func warmThreads(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	started.Wait()
	close(release)
}
