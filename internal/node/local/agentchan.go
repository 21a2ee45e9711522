package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
)

// The channel to a sandbox's agent trusts nothing the sandbox can change.
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
// refusal is logged, counted and recorded as a "security" event.
const (
	ctlDir        = "ctl"
	agentSockName = "agent.sock"
	agentPinName  = "agent.pin"
	// runTmpfs sizes the guest-writable socket directory of gVisor
	// sandboxes: a socket and little else.
	runTmpfsOpts = "size=64k,nr_inodes=64,mode=0755"
)

// agentChannel is what the manager keeps per sandbox about its agent's
// channel: the pinned socket and the rate limit of security events.
type agentChannel struct {
	mu        sync.Mutex
	pin       agent.Pin
	pinned    bool
	loaded    bool
	lastEvent time.Time
}

func (b *Backend) channel(id string) *agentChannel {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.channels[id]
	if !ok {
		ch = &agentChannel{}
		b.channels[id] = ch
	}
	return ch
}

// newAgentClient returns the client of sandbox id's agent.
func (b *Backend) newAgentClient(id string) *agent.Client {
	p := b.paths(id)
	ch := b.channel(id)
	verify := func(cred *unix.Ucred) error { return inCgroup(int(cred.Pid), p.cgroup) }
	pin := func() (agent.Pin, bool) {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if !ch.loaded {
			ch.loaded = true
			if data, err := os.ReadFile(p.pin); err == nil {
				if pn, err := agent.ParsePin(string(data)); err == nil {
					ch.pin, ch.pinned = pn, true
				} else {
					b.log.Warn("agent pin unreadable; the next connection is trusted", "sandbox", id, "err", err)
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
		if err := writeFileAtomic(p.pin, []byte(pn.String()+"\n")); err != nil {
			b.log.Warn("recording the agent's socket", "sandbox", id, "err", err)
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
	own := &agent.SocketDialer{Dir: p.ctl, Name: agentSockName, Pin: pin, Verify: ownVerify, Connected: connected}
	guest := &agent.SocketDialer{Dir: p.run, Name: agentSockName, Pin: pin, Verify: verify, Connected: connected}
	c := agent.NewClientDialer(func(ctx context.Context) (net.Conn, error) {
		c, err := own.Dial(ctx)
		if errors.Is(err, os.ErrNotExist) {
			// Not a class the daemon binds for: the agent's own socket.
			c, err = guest.Dial(ctx)
		}
		if err != nil && errors.Is(err, agent.ErrPeerRefused) {
			b.refuseAgent(id, ch, err)
		}
		return c, err
	})
	c.SetIdleTimeout(agentIdleTimeout)
	return c
}

// agentIdleTimeout ends a file operation on which an agent has moved no
// byte for that long: the daemon's deadline, not the agent's.
const agentIdleTimeout = 30 * time.Second

// refuseAgent records a refused dial: always in the log and the counter,
// as an event at most every 10 s per sandbox (the store is not a sink a
// sandbox may fill).
func (b *Backend) refuseAgent(id string, ch *agentChannel, cause error) {
	b.agentRefused.Add(1)
	b.log.Warn("agent channel refused", "sandbox", id, "err", cause)
	ch.mu.Lock()
	due := time.Since(ch.lastEvent) >= 10*time.Second
	if due {
		ch.lastEvent = time.Now()
	}
	ch.mu.Unlock()
	if due {
		b.emit(&sandbox.Event{SandboxID: id, Type: "security", Actor: "daemon",
			Cause: sandbox.CauseReconciler, Outcome: "refused", Message: cause.Error()})
	}
}

// resetAgentPin forgets the pinned agent socket of id: called before its
// agent starts (or is restored), whose new socket the next ping pins.
func (b *Backend) resetAgentPin(id string) error {
	ch := b.channel(id)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.pin, ch.pinned, ch.loaded = agent.Pin{}, false, true
	if err := os.Remove(b.paths(id).pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// inCgroup reports whether pid is a process in cgroup path (or below it),
// in any hierarchy.
func inCgroup(pid int, path string) error {
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

// bindAgentSocket creates the socket the agent serves on, bound at path
// and listening (the agent listens again as it starts, so that SO_PEERCRED
// names it from then on), and returns it as a file to pass to the sandbox.
func bindAgentSocket(path string) (*os.File, error) {
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

// mountRunTmpfs mounts the small tmpfs gVisor sandboxes' agents bind their
// socket in, owned by sandbox root; already mounted is fine.
func mountRunTmpfs(dir string, uid, gid int) error {
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

// writeFileAtomic writes a root-only file by rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// initLog keeps the tail of what a sandbox's init (the agent) and the
// runtime starting it printed: the write end of a pipe goes to the
// container as its stdout and stderr, the daemon drains the read end into
// a bounded buffer. Nothing of it lands in a host file, and a sandbox that
// floods its stdout costs the daemon a fixed amount of memory.
type initLog struct {
	mu   sync.Mutex
	buf  []byte // the last initLogBytes bytes
	done chan struct{}
}

const initLogBytes = 16 << 10

// openInitLog returns the write end of a new init log pipe for id; the
// caller passes it to the runtime and closes its copy once the container
// holds it.
func (b *Backend) openInitLog(id string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	l := &initLog{done: make(chan struct{})}
	b.mu.Lock()
	b.initLogs[id] = l
	b.mu.Unlock()
	go func() {
		defer close(l.done)
		defer r.Close()
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				l.mu.Lock()
				l.buf = append(l.buf, buf[:n]...)
				if over := len(l.buf) - initLogBytes; over > 0 {
					l.buf = append(l.buf[:0], l.buf[over:]...)
				}
				l.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return w, nil
}

// initLogTail returns up to n bytes of the end of id's init log. wait
// gives the drain that long to reach the end of what was written (a
// container that failed to start holds no write end any more).
func (b *Backend) initLogTail(id string, n int, wait time.Duration) string {
	b.mu.Lock()
	l := b.initLogs[id]
	b.mu.Unlock()
	if l == nil {
		return ""
	}
	if wait > 0 {
		select {
		case <-l.done:
		case <-time.After(wait):
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tail := l.buf
	if len(tail) > n {
		tail = tail[len(tail)-n:]
	}
	return string(tail)
}
