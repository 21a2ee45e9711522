package engine

import (
	"context"
	"errors"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// liveValue returns feature state kept with sandbox id's live object,
// made by mk at first use; it goes when the sandbox is deleted. With mk
// nil it only looks (nil if there is none).
func (m *Engine) liveValue(id string, key any, mk func() any) any {
	if mk == nil {
		l := m.live.peek(id)
		if l == nil {
			return nil
		}
		return l.value(key, nil)
	}
	return m.live.get(id).value(key, mk)
}

// goTracked runs fn in the background; Close waits for it. ctx is cancelled at
// Close.
func (m *Engine) goTracked(fn func(ctx context.Context)) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn(m.bg)
	}()
}

// alive reports whether sb's processes run and its agent answers.
func (m *Engine) alive(ctx context.Context, sb *sandbox.Sandbox) bool {
	st, err := m.node.Status(ctx, sb)
	if err != nil || st != node.StatusRunning {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = m.node.Agent(sb).Ping(pctx)
	return err == nil
}

// flushActivity stores activity seen since sb's record was last written,
// so idle timers survive a restart; writes are coalesced to one a second.
func (m *Engine) flushActivity(ctx context.Context, sb *sandbox.Sandbox) {
	l := m.live.peek(sb.ID)
	if l == nil {
		return
	}
	t := l.lastActivity()
	if t.IsZero() || !t.After(sb.LastActivityAt.Add(time.Second)) {
		return
	}
	m.async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) {
		if !cur.State.Live() || !t.After(cur.LastActivityAt) {
			return
		}
		cur.LastActivityAt = t
		if err := m.store.UpdateSandbox(ctx, cur); err == nil {
			l.stored(t)
		}
	})
}

func (m *Engine) wakeReconciler() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// async runs fn on a fresh copy of sandbox id under its lock, unless an
// operation already holds the lock; it reports whether fn was started.
func (m *Engine) async(id string, fn func(context.Context, *sandbox.Sandbox)) bool {
	if m.bg.Err() != nil {
		return false // shutting down
	}
	unlock, ok := m.live.tryLock(id)
	if !ok {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer unlock()
		// Policy actions and retries are whole operations: they finish
		// (or are undone) once started, like a request's; Close stops
		// new ones from starting.
		ctx := context.Background()
		sb, err := m.store.GetSandbox(ctx, owner(ctx), id)
		if err != nil {
			return
		}
		fn(ctx, sb)
	}()
	return true
}

// Run begins the core's background work (the backend's, the flow log
// and the async event recorder).
func (m *Engine) Run() {
	m.node.Start(node.Hooks{
		Event: m.eventAsync,
		Flow:  m.hooks.flowHook(),
		Slots: func(ctx context.Context) (map[string]int, error) { return m.store.ListIDSlots(ctx, "") },
	})
	m.wg.Add(1)
	go m.recordEvents()
}

// Close stops background work: what is in flight is cancelled and
// awaited. Sandboxes keep running; the backend keeps the egress network
// for those that need it.
func (m *Engine) Close() {
	select {
	case <-m.stopCh:
	default:
		close(m.stopCh)
	}
	m.cancel()
	m.wg.Wait()
	m.node.Close(m.keepNetwork(context.Background()))
}

// ResolveTemplate returns the template a sandbox of tenant named: the
// tenant's own of that name first, then the shared catalogue's (404
// naming it if there is neither; another tenant's is never found, nor
// the host's image cache records).
func (m *Engine) ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error) {
	if name == "" {
		name = m.cfg.DefaultTemplate // as a create that names none
	}
	t, err := m.store.ResolveTemplate(ctx, tenant, name)
	if err == nil && IsImageTemplate(name) && t.Tenant != tenant {
		err = errdefs.ErrNotFound // the host's image records are no shared catalogue
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("no template %q", name)
	}
	return t, err
}

// GetTemplate returns one shared-catalogue template (404 naming it if
// there is none).
func (m *Engine) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	t, err := m.store.GetTemplate(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("no template %q", name)
	}
	return t, err
}

// Owner is whose records ctx reads: its caller's tenant, or every
// tenant's for the engine's own work, which runs without a caller.
func Owner(ctx context.Context) store.Owner { return owner(ctx) }

// LastActivity is the latest activity known for sb (API calls, exec
// sessions, busy CPU), stored or not yet.
func (m *Engine) LastActivity(sb *sandbox.Sandbox) time.Time { return m.lastActivity(sb) }
