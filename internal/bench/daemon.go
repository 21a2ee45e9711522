package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
)

// daemon is the bench's private `berth serve` (testenv's harness).
type daemon struct {
	*testenv.Daemon
	c        *client.Client
	host     string // BERTH_HOST value
	sock     string
	logPath  string // the log, also kept in the data dir
	instance string // names its cgroup parent
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
	logPath := filepath.Join(dataDir, "daemon.log")
	p, err := testenv.Start(ctx, testenv.Config{Binary: bin, DataDir: dataDir, Netns: netns, Args: extra,
		LogFile: logPath, UserAgent: "berth-bench"})
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: p, c: p.Client(), host: p.Host(), sock: p.Socket(), logPath: logPath, instance: p.Instance()}, nil
}

func (d *daemon) pid() int { return d.PID() }

// stop sends SIGTERM to the daemon's pid and waits; SIGKILL after 30s.
func (d *daemon) stop() error { return d.Stop() }

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
func (d *daemon) logContains(s string) bool { return d.Log().Contains(s) }
