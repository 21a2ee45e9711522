package agent

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPeerRefused marks a connection the dialer refused because of who was
// listening: not a socket, not the pinned socket, or a peer that is not
// one of the sandbox's processes. Callers record it as a security event.
var ErrPeerRefused = errors.New("agent socket refused")

// Pin identifies one socket inode for the life of its filesystem: the
// kernel's file handle (inode and generation number), which a socket bound
// later at the same path never shares, even when it reuses the inode
// number.
type Pin struct {
	Type   int32
	Handle []byte
}

// String encodes the pin for a file.
func (p Pin) String() string { return fmt.Sprintf("%d:%x", p.Type, p.Handle) }

// ParsePin decodes String's form.
func ParsePin(s string) (Pin, error) {
	t, h, ok := bytes.Cut([]byte(s), []byte(":"))
	if !ok {
		return Pin{}, errors.New("agent pin: no type")
	}
	n, err := strconv.ParseInt(string(t), 10, 32)
	if err != nil {
		return Pin{}, fmt.Errorf("agent pin: %w", err)
	}
	b, err := hex.DecodeString(string(bytes.TrimSpace(h)))
	if err != nil || len(b) == 0 || len(b) > 128 {
		return Pin{}, errors.New("agent pin: bad handle")
	}
	return Pin{Type: int32(n), Handle: b}, nil
}

// SocketDialer connects to an agent's unix socket without trusting the
// path it lives at. Of the path, only Dir is trusted to be what the daemon
// made (every component of it is the daemon's own); the name inside it may
// have been replaced by code in the sandbox where the sandbox can write
// Dir (gVisor, whose agent binds its socket inside the guest). So every
// dial opens Dir and then Name with O_NOFOLLOW (a symlink to another
// sandbox's socket or to a host socket fails), requires a socket, requires
// the socket inode Pin names when one is set (an impostor that bound a new
// socket in its place is refused), connects to that very inode through
// /proc/self/fd, and asks the kernel who is listening (SO_PEERCRED), which
// Verify must accept (the daemon: a process in the sandbox's cgroup).
type SocketDialer struct {
	Dir, Name string
	// Pin, when non-nil, returns the socket inode to require; ok false
	// means none is known yet.
	Pin func() (p Pin, ok bool)
	// Verify checks the listening peer; nil accepts any.
	Verify func(cred *unix.Ucred) error
	// Connected, when non-nil, is told the pin of every socket a dial
	// connected to and Verify accepted, so that the first can be kept.
	Connected func(p Pin)
}

// Dial implements the Client's dial.
func (d *SocketDialer) Dial(ctx context.Context) (net.Conn, error) {
	for {
		c, err := d.dialOnce()
		if !errors.Is(err, unix.EAGAIN) {
			return c, err
		}
		// The listen backlog is full (a busy or stuck agent): a unix
		// socket has no connect timeout of its own, so wait here, as
		// long as ctx allows.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (d *SocketDialer) dialOnce() (net.Conn, error) {
	dfd, err := unix.Open(d.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, d.Name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s/%s is a symlink", ErrPeerRefused, d.Dir, d.Name)
		}
		return nil, &os.PathError{Op: "open", Path: d.Dir + "/" + d.Name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%w: %s/%s is not a socket (mode %o)", ErrPeerRefused, d.Dir, d.Name, st.Mode)
	}
	pin, err := pinOf(fd)
	if err != nil {
		return nil, err
	}
	if d.Pin != nil {
		if want, ok := d.Pin(); ok && (want.Type != pin.Type || !bytes.Equal(want.Handle, pin.Handle)) {
			return nil, fmt.Errorf("%w: %s/%s is not the socket the agent made (replaced)", ErrPeerRefused, d.Dir, d.Name)
		}
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(s), "agent")
	defer f.Close()
	// The path names the inode opened above: no lookup of d.Name again.
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(fd)}); err != nil {
		return nil, err
	}
	cred, err := unix.GetsockoptUcred(s, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("agent socket: SO_PEERCRED: %w", err)
	}
	if d.Verify != nil {
		if err := d.Verify(cred); err != nil {
			return nil, fmt.Errorf("%w: listening peer pid %d uid %d: %v", ErrPeerRefused, cred.Pid, cred.Uid, err)
		}
	}
	if d.Connected != nil {
		d.Connected(pin)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// pinOf returns the file handle of the inode fd (an O_PATH descriptor)
// names.
func pinOf(fd int) (Pin, error) {
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return Pin{}, fmt.Errorf("agent socket: file handle: %w", err)
	}
	return Pin{Type: h.Type(), Handle: h.Bytes()}, nil
}
