package selftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/testenv"
)

// PrivateOptions configures RunPrivate.
type PrivateOptions struct {
	// Binary is the berth executable (default: this one).
	Binary string
	// Runsc is the daemon's --runsc value ("" = its default, from PATH).
	Runsc string
	// Agent is the daemon's --agent, the agent binary for inside the
	// sandboxes. "" = berth-agent beside Binary, the daemon's default.
	Agent    string
	Runtimes []string
	Only     []string
	Progress io.Writer
	// TempRoot is where the private directory is made (default /tmp).
	TempRoot string
	// Log receives harness messages (daemon start, cleanup).
	Log io.Writer
}

// RunPrivate starts a private daemon (a fresh data dir under TempRoot,
// its own socket, a TCP listener on 127.0.0.1 for the credential
// attacks and the E2B door on another), runs the suite against it, stops
// it and removes everything.
func RunPrivate(ctx context.Context, po PrivateOptions) (*Report, error) {
	if po.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		po.Binary = exe
	}
	if po.Log == nil {
		po.Log = io.Discard
	}
	if po.TempRoot == "" {
		po.TempRoot = "/tmp"
	}
	work, err := os.MkdirTemp(po.TempRoot, "berth-selftest-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(work, 0o711); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(work, "data")
	if err := os.Mkdir(dataDir, 0o711); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	e2bPort, err := freePort()
	if err != nil {
		return nil, err
	}
	e2bAddr := fmt.Sprintf("127.0.0.1:%d", e2bPort)
	args := []string{"--insecure-listen", tcpAddr, "--e2b-listen", e2bAddr}
	if po.Runsc != "" {
		args = append(args, "--runsc", po.Runsc)
	}
	if po.Agent != "" {
		args = append(args, "--agent", po.Agent)
	}
	d, err := testenv.Start(ctx, testenv.Config{Binary: po.Binary, DataDir: dataDir, Args: args,
		LogFile: filepath.Join(dataDir, "daemon.log"), UserAgent: "berth-selftest"})
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	fmt.Fprintf(po.Log, "selftest: private daemon pid %d, data dir %s, tcp %s\n", d.PID(), dataDir, tcpAddr)
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("admin key: %w", err)
	}
	opts := Options{Client: d.Client(), Host: d.Host(), APIKey: strings.TrimSpace(string(key)),
		TCP: "http://" + tcpAddr, E2B: "http://" + e2bAddr, DataDir: dataDir, DaemonPID: d.PID(), Runtimes: po.Runtimes, Only: po.Only,
		Binary: po.Binary, WorkDir: work, Progress: po.Progress}
	// The unix socket is the admin's: the key is for the TCP attacks only.
	opts.APIKey = ""
	rep, runErr := Run(ctx, opts)
	left := stopPrivate(d, work, dataDir)
	if rep != nil {
		rep.Cleanup = append(rep.Cleanup, left...)
	} else if len(left) > 0 {
		fmt.Fprintf(po.Log, "selftest: cleanup: %s\n", strings.Join(left, "; "))
	}
	return rep, runErr
}

// stopPrivate stops the daemon and removes what it left (testenv's one
// definition of a leak: mounts, loop devices, cgroups, processes, files
// of its data dir and instance), then the work dir. It returns what it had
// to remove by hand or could not remove.
func stopPrivate(d *testenv.Daemon, work, dataDir string) []string {
	var out []string
	// The daemon runs with its defaults, the automatic warm pool among
	// them (attacks run in claimed members as users' sandboxes do): its
	// members are drained before the daemon stops.
	if err := testenv.DrainPools(context.Background(), d.Client(), 2*time.Minute); err != nil {
		out = append(out, "draining warm pools: "+err.Error())
	}
	if err := d.Stop(); err != nil {
		out = append(out, "stopping the daemon: "+err.Error())
	}
	leaks, err := testenv.Clean(d.Scope())
	for _, l := range leaks {
		out = append(out, "left: "+l.String())
	}
	if err != nil {
		out = append(out, err.Error())
	}
	if err := testenv.RemoveDir(work); err != nil {
		out = append(out, err.Error())
	}
	return out
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PeerPID returns the pid of the process serving the unix socket at sock
// (SO_PEERCRED), 0 when it cannot tell.
func PeerPID(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
