// Package agentchan is the host end of the channel to a sandbox's agent,
// built so that it trusts nothing the sandbox can change: where the
// socket is bound, the pin of the socket the agent bound itself, the
// kernel's word (SO_PEERCRED) on who listens, and the bounded ring that
// keeps what the agent printed as it started.
//
// It is separate from package local because it is the security boundary
// between the daemon and code in the sandbox: everything that decides
// whether a connection reaches the real agent lives here, in one place
// that can be reviewed without the rest of the backend.
//
// runc (and every class that can hand init a descriptor): the daemon binds
// the agent's socket in <sandbox dir>/ctl, a root-only directory that is
// not mounted into the sandbox at all, listens on it, and passes it to the
// agent as fd 3; the agent calls listen(2) on it again, so that the kernel
// names the agent as its listener. Code in the sandbox can neither see nor
// replace that socket.
//
// gVisor: a host socket cannot be passed into the Sentry as a listener, so
// the agent binds /.berth/run/agent.sock itself, through runsc
// --host-uds=create, in a directory the guest can write: <sandbox
// dir>/run, a tiny tmpfs the daemon mounts (64 KiB, 64 inodes), so nothing
// written there reaches the host's disk. The daemon pins the socket inode
// the agent made (its file handle, taken at the first ping of each start,
// before any workload runs) in ctl/agent.pin; a dial opens the name with
// O_NOFOLLOW and refuses a symlink, a non-socket, or any socket but the
// pinned one.
//
// Every dial, on every class, then asks the kernel who is listening
// (SO_PEERCRED) and requires a process in the sandbox's own cgroup. A
// refusal is reported to the caller, which logs, counts and records it.
package agentchan

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/overlay"
)

const (
	// CtlDir is the root-only dir, under a sandbox's dir, of its socket
	// and pin.
	CtlDir = "ctl"
	// SockName names the agent's socket, in CtlDir or in the run tmpfs.
	SockName = "agent.sock"
	// PinName names the pin of the socket the agent bound itself.
	PinName = "agent.pin"
	// runTmpfs sizes the guest-writable socket directory of gVisor
	// sandboxes: a socket and little else.
	runTmpfsOpts = "size=64k,nr_inodes=64,mode=0755"
)

// Paths of one sandbox's channel: the root-only ctl dir, the run tmpfs,
// the pin file and the sandbox's cgroup (where the listener must be).
type Paths struct {
	Ctl, Run, Pin, Cgroup string
}

// Channel is what the daemon keeps per sandbox about its agent's
// channel: the pinned socket and the rate limit of security events.
type Channel struct {
	paths     Paths
	log       *slog.Logger
	mu        sync.Mutex
	pin       agent.Pin
	pinned    bool
	loaded    bool
	lastEvent time.Time
}

// New returns the channel of the sandbox at p; log carries its id.
func New(p Paths, log *slog.Logger) *Channel {
	return &Channel{paths: p, log: log}
}

// Dial returns the dialer of the agent: the daemon-bound socket, or, for
// a class the daemon binds for not, the agent's own (pinned). A dial
// refused for who listens calls refused, then returns the error.
func (ch *Channel) Dial(refused func(error)) func(context.Context) (net.Conn, error) {
	p := ch.paths
	verify := func(cred *unix.Ucred) error { return InCgroup(int(cred.Pid), p.Cgroup) }
	pin := func() (agent.Pin, bool) {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if !ch.loaded {
			ch.loaded = true
			if data, err := os.ReadFile(p.Pin); err == nil {
				if pn, err := agent.ParsePin(string(data)); err == nil {
					ch.pin, ch.pinned = pn, true
				} else {
					ch.log.Warn("agent pin unreadable; the next connection is trusted", "err", err)
				}
			}
		}
		return ch.pin, ch.pinned
	}
	connected := func(pn agent.Pin) {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if ch.pinned {
			return
		}
		ch.pin, ch.pinned, ch.loaded = pn, true, true
		if err := WriteFileAtomic(p.Pin, []byte(pn.String()+"\n")); err != nil {
			ch.log.Warn("recording the agent's socket", "err", err)
		}
	}
	// The daemon's own socket listens before the agent starts, so that a
	// connection made meanwhile waits in the backlog for the agent to
	// accept it (no polling on the create path); the kernel then reports
	// the daemon itself as the listener (SO_PEERCRED copies the creds of
	// the last listen(2)). That is sound here: the socket lives in a dir
	// the sandbox cannot reach and the daemon closes its copy of the
	// descriptor once the container has it, so the only process that can
	// ever accept is the agent, which calls listen(2) again as it starts,
	// after which connections name it, in the sandbox's cgroup.
	ownVerify := func(cred *unix.Ucred) error {
		if int(cred.Pid) == os.Getpid() {
			return nil
		}
		return verify(cred)
	}
	own := &agent.SocketDialer{Dir: p.Ctl, Name: SockName, Pin: pin, Verify: ownVerify, Connected: connected}
	guest := &agent.SocketDialer{Dir: p.Run, Name: SockName, Pin: pin, Verify: verify, Connected: connected}
	return func(ctx context.Context) (net.Conn, error) {
		c, err := own.Dial(ctx)
		if errors.Is(err, os.ErrNotExist) {
			// Not a class the daemon binds for: the agent's own socket.
			c, err = guest.Dial(ctx)
		}
		if err != nil && errors.Is(err, agent.ErrPeerRefused) {
			refused(err)
		}
		return c, err
	}
}

// EventDue reports whether a refusal now should be recorded as an event:
// at most one every 10 s per sandbox (the store is not a sink a sandbox
// may fill).
func (ch *Channel) EventDue() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	due := time.Since(ch.lastEvent) >= 10*time.Second
	if due {
		ch.lastEvent = time.Now()
	}
	return due
}

// Reset forgets the pinned agent socket: called before the agent starts
// (or is restored), whose new socket the next dial pins.
func (ch *Channel) Reset() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.pin, ch.pinned, ch.loaded = agent.Pin{}, false, true
	if err := os.Remove(ch.paths.Pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// InCgroup reports whether pid is a process in cgroup path (or below it),
// in any hierarchy.
func InCgroup(pid int, path string) error {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return fmt.Errorf("reading its cgroups: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		_, rest, _ := strings.Cut(sc.Text(), ":")
		_, cg, _ := strings.Cut(rest, ":")
		if cg == path || strings.HasPrefix(cg, path+"/") {
			return nil
		}
	}
	return fmt.Errorf("not a process of the sandbox's cgroup %s", path)
}

// BindSocket creates the socket the agent serves on, bound at path and
// listening (the agent listens again as it starts, so that SO_PEERCRED
// names it from then on), and returns it as a file to pass to the sandbox.
func BindSocket(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agent-listener")
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent socket: bind %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent socket: listen: %w", err)
	}
	return f, nil
}

// MountRunTmpfs mounts the small tmpfs gVisor sandboxes' agents bind their
// socket in, owned by sandbox root; already mounted is fine.
func MountRunTmpfs(dir string, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if mounted, err := overlay.Mounted(dir); err != nil || mounted {
		return err
	}
	opts := fmt.Sprintf("%s,uid=%d,gid=%d", runTmpfsOpts, uid, gid)
	if err := unix.Mount("berth-run", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mounting the agent's socket dir: %w", err)
	}
	return nil
}

// WriteFileAtomic writes a root-only file by rename.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
