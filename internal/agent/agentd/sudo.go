package agentd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/sudo"
)

// The agent's side of sudo (package sudo has the whole design): a
// listener on the abstract socket sudo.Socket, bound at start before any
// process of the sandbox runs, and per accepted connection a helper
// process (sudo.HelperMain). The agent checks the caller's uid with
// SO_PEERCRED and how many helpers run, and reads nothing a caller sends.

// SudoHelperVerb is the agent binary's verb for the helper.
const SudoHelperVerb = sudo.HelperVerb

// maxSudo caps the sudo commands served at once: each is a helper process
// and its command, and the sandbox's pids limit counts both anyway; this
// keeps a flood of connections from making helpers the agent must track.
const maxSudo = 64

// listenSudo binds the abstract sudo socket.
func listenSudo() (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sudo.Socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("sudo socket: %w", err)
	}
	return ln, nil
}

// serveSudo accepts sudo connections until ctx ends.
func (s *server) serveSudo(ctx context.Context) {
	ln := s.sudoLn
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	slots := make(chan struct{}, maxSudo)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.backoff(ctx, err)
			continue
		}
		cred, err := sudo.PeerCred(c)
		if err != nil || !sudo.Allowed(s.root, s.cfg.SudoUser, cred.Uid) {
			// A caller that may not use sudo gets no process started
			// for it: the refusal (a few bytes the socket's buffer
			// takes whole; the deadline keeps the agent from waiting)
			// and a close. Nothing it sent is read.
			if err == nil {
				s.log.Debug("sudo refused", "uid", cred.Uid, "pid", cred.Pid)
				c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				sudo.Refuse(c, sudo.NotAllowed(cred.Uid, s.cfg.SudoUser))
			}
			c.Close()
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			s.log.Warn("sudo: too many at once; connection closed", "max", maxSudo, "uid", cred.Uid)
			c.Close()
			continue
		}
		done, err := s.startSudoHelper(c)
		c.Close()
		if err != nil {
			<-slots
			s.log.Warn("sudo: starting the helper", "err", err)
			continue
		}
		s.log.Info("sudo", "uid", cred.Uid, "pid", cred.Pid)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			select {
			case <-done:
			case <-ctx.Done(): // the agent is ending: the slot no longer matters
			}
			<-slots
		}()
	}
}

// startSudoHelper starts the helper with c as its fd 3, in a session of
// its own, its stdio /dev/null.
func (s *server) startSudoHelper(c *net.UnixConn) (<-chan unix.WaitStatus, error) {
	f, err := c.File() // a duplicate, blocking: the helper's own
	if err != nil {
		return nil, err
	}
	defer f.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	argv := append(append([]string(nil), s.cfg.SudoHelper...), sudo.HelperVerb, s.cfg.SudoUser)
	attr := &syscall.ProcAttr{Dir: "/", Env: []string{"PATH=" + defaultPath},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), f.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true}}
	_, done, err := s.procs.start(argv[0], argv, attr)
	return done, err
}

// sudoHelperArgv is how the agent runs its own binary as the helper.
func sudoHelperArgv() []string {
	if exe, err := os.Executable(); err == nil {
		return []string{exe}
	}
	return []string{"/proc/self/exe"}
}

// SudoMain is the sudo program (the agent binary called "sudo").
func SudoMain(args []string) int { return sudo.Main(args) }

// SudoHelperMain is the helper's entry point.
func SudoHelperMain(args []string) int { return sudo.HelperMain(args) }
