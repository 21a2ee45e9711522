package agentd

import (
	"context"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// Around a checkpoint of a gVisor sandbox the agent's listening socket must
// go: gVisor cannot save a listening socket bound on the host (the agent's
// socket, created through runsc --host-uds=create): "Cannot save endpoint
// with bound host socket", and the sandbox dies. So before `runsc
// checkpoint` the daemon sends the quiesce operation (Client.Quiesce): the
// agent closes its listener, which unlinks the socket file (the daemon
// waits for it to disappear). After `runsc restore` the daemon sends
// wire.SigRelisten, since no one can connect to a closed listener: the agent
// listens again on the same path. Connections the agent had accepted are
// severed by the checkpoint; exec'd processes keep running.
//
// Quiesce is an operation, not a signal, because processes of the sandbox
// can signal PID 1 too: a relisten they send is harmless (it does nothing
// unless the agent is quiesced), a quiesce would not be. SigRelisten is a
// signal nothing sends PID 1 otherwise (runsc kill accepts only the classic
// signals, not realtime ones); the agent listens again by itself
// relistenAfter after a quiesce no checkpoint followed, and an agent
// serving on an inherited socket (runc) ignores it.

// relistenAfter bounds how long the agent stays unreachable after a
// quiesce: a daemon that died before its checkpoint must not leave it
// deaf. (Time a checkpoint image spends on disk does not count: after a
// restore the timer fires at once, which is a relisten too.)
const relistenAfter = 30 * time.Second

// watchHibernate handles SigQuiesce and wire.SigRelisten until ctx ends.
func (s *server) watchHibernate(ctx context.Context) {
	if s.cfg.ListenFD > 0 {
		return // the daemon owns the socket; nothing to close or reopen
	}
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, wire.SigRelisten)
	go func() {
		defer signal.Stop(sigc)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigc:
				s.relisten()
			}
		}
	}()
}

// quiesce closes the listening socket without ending serve, which waits
// for relisten.
func (s *server) quiesce() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.resumed != nil {
		return
	}
	ch := make(chan struct{})
	s.resumed = ch
	s.ln.Close() // unlinks the socket file
	time.AfterFunc(relistenAfter, func() { s.relistenIf(ch) })
	s.log.Info("listener closed for checkpoint", "socket", s.cfg.Socket)
}

// relisten opens the socket again after quiesce.
func (s *server) relisten() { s.relistenIf(nil) }

// relistenIf is relisten, only for the quiesce whose channel is ch (any
// with nil).
func (s *server) relistenIf(ch chan struct{}) {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.resumed == nil || (ch != nil && s.resumed != ch) {
		return
	}
	ln, err := listen(s.cfg.Socket)
	if err != nil {
		s.log.Error("listening again after restore", "err", err)
		return
	}
	s.ln = ln
	close(s.resumed)
	s.resumed = nil
	s.log.Info("listening again after restore", "socket", s.cfg.Socket)
}

// listener returns the current listener.
func (s *server) listener() *net.UnixListener {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.ln
}

// awaitRelisten reports, after Accept on ln failed because ln was closed,
// whether that was quiesce; it then waits until relisten (true) or ctx
// ends (false).
func (s *server) awaitRelisten(ctx context.Context, ln *net.UnixListener) bool {
	s.lnMu.Lock()
	ch, cur := s.resumed, s.ln
	s.lnMu.Unlock()
	if cur != ln {
		return true // already listening again
	}
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
