package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/node/local"
)

// Config is one private daemon.
type Config struct {
	// Binary is the berth executable that runs `serve` (required).
	Binary string
	// DataDir is the daemon's --data-dir (required); it names the
	// daemon's instance (cgroup parent, network objects).
	DataDir string
	// Socket is its --socket; default DataDir/berth.sock.
	Socket string
	// Args are more serve flags (--insecure-listen, --store, --agent, ...).
	Args []string
	// Env is added to this process's environment (failpoints).
	Env []string
	// Netns runs the daemon in network namespace /var/run/netns/NETNS
	// (nsenter --net, which execs: the pid is the daemon's): only its
	// network namespace changes, its mounts and cgroups stay visible to
	// the leak checks.
	Netns string
	// LogLevel is --log-level ("" = the daemon's default).
	LogLevel string
	// LogFile, when set, receives the log too (appended).
	LogFile string
	// UserAgent of the SDK client (default berth-testenv).
	UserAgent string
	// ReadyTimeout bounds the wait for /healthz (default 60s);
	// StopTimeout the wait after SIGTERM before SIGKILL (default 30s).
	ReadyTimeout, StopTimeout time.Duration
}

// Daemon is one `berth serve` started by Start, in its own process group
// so that a Ctrl-C at a terminal reaches only the harness, which then
// cleans up through the daemon before stopping it.
type Daemon struct {
	cfg     Config
	cmd     *exec.Cmd
	pid     int
	done    chan struct{} // closed once the process has been waited for
	waitErr error
	log     *Log
	logFile *os.File
	c       *client.Client
}

// Start starts the daemon and waits until it answers /healthz; ctx bounds
// the wait, not the daemon's life.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Binary == "" || cfg.DataDir == "" {
		return nil, errors.New("testenv: Config.Binary and Config.DataDir are required")
	}
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(cfg.DataDir, "berth.sock")
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "berth-testenv"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	d := &Daemon{cfg: cfg, done: make(chan struct{}), log: &Log{}}
	var out io.Writer = d.log
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		d.logFile = f
		out = io.MultiWriter(d.log, f)
	}
	args := []string{"serve", "--data-dir", cfg.DataDir, "--socket", cfg.Socket}
	if cfg.LogLevel != "" {
		args = append(args, "--log-level", cfg.LogLevel)
	}
	args = append(args, cfg.Args...)
	d.cmd = exec.Command(cfg.Binary, args...)
	if cfg.Netns != "" {
		d.cmd = exec.Command("nsenter", append([]string{"--net=" + NetnsPath(cfg.Netns), "--", cfg.Binary}, args...)...)
	}
	d.cmd.Env = append(os.Environ(), cfg.Env...)
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The log is a pipe: a child that inherited it and outlives the
	// daemon must not hold Wait.
	d.cmd.WaitDelay = 5 * time.Second
	if err := d.cmd.Start(); err != nil {
		d.closeLog()
		return nil, fmt.Errorf("testenv: starting the daemon: %w", err)
	}
	d.pid = d.cmd.Process.Pid
	go func() {
		d.waitErr = d.cmd.Wait()
		d.closeLog()
		close(d.done)
	}()
	var err error
	if d.c, err = client.New("unix://"+cfg.Socket, "", client.WithUserAgent(cfg.UserAgent)); err != nil {
		d.Kill()
		return nil, err
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err = d.c.Health(hctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("testenv: the daemon exited at start (%v): %s", d.waitErr, d.LogTail(4000))
		case <-ctx.Done():
			d.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.Stop()
			return nil, fmt.Errorf("testenv: the daemon did not answer within %s: %v: %s", cfg.ReadyTimeout, err, d.LogTail(4000))
		}
	}
}

func (d *Daemon) closeLog() {
	if d.logFile != nil {
		d.logFile.Close()
	}
}

// Client is an SDK client on the daemon's unix socket (the host admin).
func (d *Daemon) Client() *client.Client { return d.c }

// Host is the daemon's socket as a BERTH_HOST value.
func (d *Daemon) Host() string { return "unix://" + d.cfg.Socket }

// Socket is the daemon's unix socket path.
func (d *Daemon) Socket() string { return d.cfg.Socket }

// DataDir is the daemon's data dir.
func (d *Daemon) DataDir() string { return d.cfg.DataDir }

// Instance names the daemon's host resources (its cgroup parent is
// "/"+Instance).
func (d *Daemon) Instance() string { return local.InstanceName(d.cfg.DataDir) }

// PID is the daemon's process id (and its process group's).
func (d *Daemon) PID() int { return d.pid }

// Done is closed once the daemon has exited and been waited for.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is how the daemon exited (valid once Done is closed).
func (d *Daemon) Err() error { return d.waitErr }

// Log is the daemon's output so far.
func (d *Daemon) Log() *Log { return d.log }

// LogTail is the last n bytes of the daemon's output.
func (d *Daemon) LogTail(n int) string {
	s := strings.TrimSpace(d.log.String())
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// Scope is what the leak checks look at for this daemon once it has
// stopped (set Running to check it while it runs).
func (d *Daemon) Scope() Scope {
	return Scope{DataDir: d.cfg.DataDir, Netns: d.cfg.Netns, PGID: d.pid}
}

// Stop ends the daemon gracefully: SIGTERM to its pid, SIGKILL to its pid
// after StopTimeout (an error: it ignored SIGTERM). It then waits briefly
// for what the daemon started in its process group to end and reports
// what did not. Stopping a stopped daemon does nothing.
func (d *Daemon) Stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	d.c.Close()
	_ = syscall.Kill(d.pid, syscall.SIGTERM)
	var errs []error
	select {
	case <-d.done:
		var ee *exec.ExitError
		if d.waitErr != nil && !errors.As(d.waitErr, &ee) {
			errs = append(errs, d.waitErr)
		}
	case <-time.After(d.cfg.StopTimeout):
		_ = syscall.Kill(d.pid, syscall.SIGKILL)
		<-d.done
		errs = append(errs, fmt.Errorf("testenv: daemon pid %d ignored SIGTERM for %s; killed", d.pid, d.cfg.StopTimeout))
	}
	if left := d.collect(5 * time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("testenv: daemon pid %d left processes in its group: %s", d.pid, strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// Kill ends the daemon with SIGKILL to its pid, as a crash would, and
// waits for it. What it had started keeps running, as after a crash: the
// next daemon on the data dir reconciles it, and the leak checks find
// whatever no one did.
func (d *Daemon) Kill() {
	select {
	case <-d.done:
		return
	default:
	}
	d.c.Close()
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
	<-d.done
}

// collect waits up to timeout for the daemon's process group to empty and
// returns the members still alive ("pid (comm)").
func (d *Daemon) collect(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := groupMembers(d.pid)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is a daemon's captured output, safe to read while it is written.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Contains reports whether the log mentions s.
func (l *Log) Contains(s string) bool { return strings.Contains(l.String(), s) }

// NetnsPath is where `ip netns` keeps the named namespace.
func NetnsPath(name string) string { return "/var/run/netns/" + name }

// DrainPools sets every warm pool the client sees to none (the automatic
// pool of the default template among them) and waits, at most within,
// until their members are gone: they are sandboxes no list shows, so a
// harness that deletes what it lists must drain them first.
func DrainPools(ctx context.Context, c *client.Client, within time.Duration) error {
	pools, err := c.ListPools(ctx)
	if err != nil {
		return fmt.Errorf("listing pools: %w", err)
	}
	for _, p := range pools {
		if _, err := c.SetPool(ctx, p.Template, 0); err != nil {
			return fmt.Errorf("emptying pool %s: %w", p.Template, err)
		}
	}
	deadline := time.Now().Add(within)
	for {
		pools, err := c.ListPools(ctx)
		if err != nil {
			return fmt.Errorf("listing pools: %w", err)
		}
		left := 0
		for _, p := range pools {
			left += p.Ready + p.Starting
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pools still hold %d members %s after being emptied", left, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
