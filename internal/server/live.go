package server

// Live credentials: every long-lived connection (exec and process
// WebSockets and their PTYs, streamed exec, file transfers, the port
// proxy and its WebSockets, event streams, MCP requests and sessions) is
// bound to the credential that opened it, and ends within credRecheck of
// that credential's end — a key revoked or expired (signing out of the
// console revokes its key), a lease revoked, expired or ended with its
// sandbox or its minting key, a port token revoked or expired, a tenant
// deleted. A revocation through this daemon rechecks at once (kick); one
// through another replica of the store, or an expiry, is seen on the next
// tick. One goroutine rechecks every bound credential once per tick, and
// runs only while something is bound.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/rest"
)

// credRecheck is how often bound credentials are re-checked, in
// nanoseconds (atomic, so a test may shorten it while an earlier test's
// watcher still reads it).
var credRecheck atomic.Int64

func init() { credRecheck.Store(int64(2 * time.Second)) }

// liveCreds is the registry of bound connections.
type liveCreds struct {
	mu      sync.Mutex
	binds   map[*binding]struct{}
	kick    chan struct{} // a revocation here: recheck now
	running bool
}

type binding struct {
	p      auth.Principal
	cancel context.CancelCauseFunc
}

// credKey names a credential: connections opened with the same one are
// rechecked together.
func credKey(p auth.Principal) string {
	switch {
	case p.PortTokenID != "":
		return "port:" + p.PortTokenID
	case p.LeaseID != "":
		return "lease:" + p.LeaseID
	}
	return "key:" + p.KeyID
}

// bound reports whether p is a credential that can end: not the unix
// socket's host administrator, not an anonymous caller of a public port.
func bound(p auth.Principal) bool {
	return p.KeyID != "" || p.LeaseID != "" || p.PortTokenID != "" || p.IsLease()
}

// bind returns ctx, cancelled when p stops being valid (with the reason
// as its cause), and the release the caller defers.
func (s *Server) bind(ctx context.Context, p auth.Principal) (context.Context, func()) {
	if !bound(p) || s.authn == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	b := &binding{p: p, cancel: cancel}
	lc := &s.live
	lc.mu.Lock()
	if lc.binds == nil {
		lc.binds = map[*binding]struct{}{}
		lc.kick = make(chan struct{}, 1)
	}
	lc.binds[b] = struct{}{}
	if !lc.running {
		lc.running = true
		go s.watchCreds()
	}
	lc.mu.Unlock()
	return ctx, func() {
		lc.mu.Lock()
		delete(lc.binds, b)
		lc.mu.Unlock()
		cancel(nil)
	}
}

// credentialsChanged asks for an immediate recheck of every bound
// credential: a key, lease or port token was revoked, or a tenant deleted.
func (s *Server) credentialsChanged() {
	lc := &s.live
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.kick == nil {
		return
	}
	select {
	case lc.kick <- struct{}{}:
	default:
	}
}

// watchCreds rechecks the bound credentials each tick and on each kick,
// ending the connections of those no longer valid; it returns when
// nothing is bound.
func (s *Server) watchCreds() {
	lc := &s.live
	every := time.Duration(credRecheck.Load())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-lc.kick:
		}
		lc.mu.Lock()
		if len(lc.binds) == 0 {
			lc.running = false
			lc.mu.Unlock()
			return
		}
		byCred := map[string][]*binding{}
		for b := range lc.binds {
			k := credKey(b.p)
			byCred[k] = append(byCred[k], b)
		}
		lc.mu.Unlock()
		for _, bs := range byCred {
			ctx, cancel := context.WithTimeout(context.Background(), every)
			err := s.recheck(ctx, bs[0].p)
			cancel()
			if err == nil || !isCredentialEnd(err) {
				// A store that cannot answer now ends nothing; the next
				// tick asks again.
				continue
			}
			for _, b := range bs {
				b.cancel(err)
			}
		}
	}
}

// isCredentialEnd reports whether err says the credential ended (rather
// than that the store could not be asked).
func isCredentialEnd(err error) bool {
	_, status := errdefs.Code(err)
	return status == 401 || status == 403
}

// recheck decides whether p, authenticated earlier, still is: the
// authenticator's recheck of its key, lease or port token, and for a lease
// or port token its sandbox still leasable.
func (s *Server) recheck(ctx context.Context, p auth.Principal) error {
	if err := s.authn.Recheck(ctx, p); err != nil {
		return err
	}
	if p.IsLease() && s.lookup != nil {
		sb, err := s.lookup(ctx, p.Sandbox)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		if err != nil || !rest.Leasable(sb.State) {
			return errdefs.Unauthenticated("the token ended with its sandbox")
		}
	}
	return nil
}
