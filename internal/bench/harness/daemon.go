package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
)

// Daemon is a bench's private `berth serve` (testenv's harness).
type Daemon struct {
	*testenv.Daemon
	C        *client.Client
	Host     string // BERTH_HOST value
	Sock     string
	LogPath  string // the log, also kept in the data dir
	Instance string // names its cgroup parent
}

// StartDaemon runs `<bin> serve` with its data dir at dataDir and waits
// until it answers /healthz; in the named network namespace
// (/var/run/netns/NAME) when netns is not empty: it runs under
// `nsenter --net`, so only its network namespace changes (its mounts and
// cgroups stay visible to the bench's checks). extra are more serve flags.
func StartDaemon(ctx context.Context, bin, dataDir, netns string, extra ...string) (*Daemon, error) {
	logPath := filepath.Join(dataDir, "daemon.log")
	p, err := testenv.Start(ctx, testenv.Config{Binary: bin, DataDir: dataDir, Netns: netns, Args: extra,
		LogFile: logPath, UserAgent: "berth-bench"})
	if err != nil {
		return nil, err
	}
	return &Daemon{Daemon: p, C: p.Client(), Host: p.Host(), Sock: p.Socket(), LogPath: logPath, Instance: p.Instance()}, nil
}

// LogContains reports whether the daemon's log mentions s.
func (d *Daemon) LogContains(s string) bool { return d.Log().Contains(s) }

var trueCmd = api.ExecRequest{Cmd: []string{"true"}}

// ExecTrue runs `true` in sandbox id and returns the round trip.
func ExecTrue(ctx context.Context, c *client.Client, id string) (time.Duration, error) {
	t0 := time.Now()
	exit, err := c.Exec(ctx, id, trueCmd, nil, nil)
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("exec in %s: %w", id, err)
	}
	if exit.Code != 0 {
		return d, fmt.Errorf("exec of true in %s exited %d", id, exit.Code)
	}
	return d, nil
}

// RSS returns the resident set size of pid in bytes.
func RSS(pid int) (int64, error) {
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

// Meminfo returns a /proc/meminfo field in bytes.
func Meminfo(field string) (int64, error) {
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
