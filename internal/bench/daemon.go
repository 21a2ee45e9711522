package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/node/local"
)

// daemon is the bench's private `berth serve`.
type daemon struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has been waited for
	waitErr  error
	dataDir  string
	sock     string
	host     string // BERTH_HOST value
	logPath  string
	instance string // names its cgroup parent
	c        *client.Client
}

// startDaemon runs `<bin> serve` with its data dir at dataDir and waits
// until it answers /healthz.
func startDaemon(ctx context.Context, bin, dataDir string) (*daemon, error) {
	return startDaemonIn(ctx, bin, dataDir, "")
}

// startDaemonIn is startDaemon with the daemon in the named network
// namespace (/var/run/netns/NAME) when netns is not empty: it runs under
// `nsenter --net`, so only its network namespace changes (its mounts and
// cgroups stay visible to the bench's checks). extra are more serve flags.
func startDaemonIn(ctx context.Context, bin, dataDir, netns string, extra ...string) (*daemon, error) {
	d := &daemon{
		dataDir:  dataDir,
		sock:     filepath.Join(dataDir, "berth.sock"),
		logPath:  filepath.Join(dataDir, "daemon.log"),
		instance: local.InstanceName(dataDir),
		done:     make(chan struct{}),
	}
	d.host = "unix://" + d.sock
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append([]string{"serve", "--data-dir", dataDir, "--socket", d.sock}, extra...)
	d.cmd = exec.Command(bin, args...)
	if netns != "" {
		d.cmd = exec.Command("nsenter", append([]string{"--net=" + netnsPath(netns), "--", bin}, args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches the bench,
	// which then deletes the sandboxes through the daemon before stopping it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if d.c, err = client.New(d.host, "", client.WithUserAgent("berth-bench")); err != nil {
		d.stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err = d.c.Health(hctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("the daemon exited at start (%v): %s", d.waitErr, d.logTail())
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the daemon did not answer within 60s: %v: %s", err, d.logTail())
		}
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM and waits; SIGKILL after 30s.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	if d.c != nil {
		d.c.Close()
	}
	_ = syscall.Kill(d.pid(), syscall.SIGTERM)
	select {
	case <-d.done:
		var ee *exec.ExitError
		if d.waitErr != nil && !errors.As(d.waitErr, &ee) {
			return d.waitErr
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(d.pid(), syscall.SIGKILL)
		<-d.done
		return fmt.Errorf("daemon pid %d ignored SIGTERM for 30s; killed", d.pid())
	}
}

// logTail is the end of the daemon's log, for error messages.
func (d *daemon) logTail() string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// rss returns the resident set size of pid in bytes.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return parseKB(v)
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS (a kernel thread or a zombie)", pid)
}

// meminfo returns a /proc/meminfo field in bytes.
func meminfo(field string) (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return parseKB(v)
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no %s", field)
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(s string) (int64, error) {
	fs := strings.Fields(s)
	if len(fs) == 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	n, err := strconv.ParseInt(fs[0], 10, 64)
	if err != nil {
		return 0, err
	}
	if len(fs) > 1 && strings.EqualFold(fs[1], "kB") {
		n <<= 10
	}
	return n, nil
}

// logContains reports whether the daemon's log mentions s.
func (d *daemon) logContains(s string) bool {
	b, err := os.ReadFile(d.logPath)
	return err == nil && strings.Contains(string(b), s)
}
