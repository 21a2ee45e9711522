package manager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

const actorReconciler = "reconciler"

// Start reconciles the records with the host once (adopting live
// sandboxes, finishing interrupted creates and deletes, removing orphans)
// and then runs the reconciler in the background until Close.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.recover(ctx); err != nil {
		return err
	}
	if !failpoint.Enabled("startup.skip-sweep") {
		if _, err := m.Doctor(ctx, true); err != nil {
			m.log.Warn("removing orphans", "err", err)
		}
	}
	m.wg.Add(1)
	go m.loop()
	return nil
}

// Close stops background work. Sandboxes keep running.
func (m *Manager) Close() {
	select {
	case <-m.stopCh:
	default:
		close(m.stopCh)
	}
	m.wg.Wait()
}

func (m *Manager) wakeReconciler() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// recover brings every live record to a resting state after a start.
func (m *Manager) recover(ctx context.Context) error {
	live, err := m.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return err
	}
	for _, sb := range live {
		m.recoverOne(ctx, sb)
	}
	return nil
}

func (m *Manager) recoverOne(ctx context.Context, sb *sandbox.Sandbox) {
	unlock := m.locks.Lock(sb.ID)
	defer unlock()
	log := m.log.With("sandbox", sb.ID, "state", sb.State)
	destroy := func(reason string) {
		log.Info("reconciler destroying sandbox", "reason", reason)
		if err := m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason); err != nil {
			log.Warn("reconciler teardown", "err", err)
		}
	}
	switch {
	case sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed:
		destroy(sb.Reason)
	case sb.Spec.OneShot:
		destroy("client went away (daemon restart)")
	case sb.State == sandbox.StateCreating:
		tpl, err := m.store.GetTemplate(ctx, sb.Spec.Template)
		if err == nil && !m.alive(ctx, sb.ID) {
			err = m.provision(ctx, sb, tpl)
		}
		if err != nil {
			log.Warn("interrupted create cannot be finished", "err", err)
			m.fail(ctx, sb, actorReconciler, err)
			return
		}
		if err := m.transition(ctx, sb, sandbox.StateRunning, sandbox.CauseReconciler, actorReconciler, "create finished after restart"); err != nil {
			log.Warn("recording finished create", "err", err)
		}
	case sb.State == sandbox.StateRunning:
		if !m.alive(ctx, sb.ID) {
			destroy("sandbox died while the daemon was down")
			return
		}
		log.Info("adopted running sandbox")
	}
}

// alive reports whether sandbox id's container runs and its agent answers.
func (m *Manager) alive(ctx context.Context, id string) bool {
	st, err := m.rt.State(ctx, id)
	if err != nil || st.Status != "running" {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = m.agentFor(id).Ping(pctx)
	return err == nil
}

func (m *Manager) loop() {
	defer m.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-m.stopCh:
			return
		case <-timer.C:
		case <-m.kick:
		}
		next := m.tick(context.Background())
		wait := m.cfg.ReconcileInterval
		if !next.IsZero() {
			if d := time.Until(next); d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// tick enforces deadlines, retries unfinished teardowns and notices dead
// sandboxes. It returns the next deadline it knows of.
func (m *Manager) tick(ctx context.Context) time.Time {
	live, err := m.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		m.log.Error("reconciler: listing sandboxes", "err", err)
		return time.Time{}
	}
	now := m.now()
	var next time.Time
	for _, sb := range live {
		if d, ok := sb.Deadline(); ok && sb.State != sandbox.StateDeleting {
			if !now.Before(d) {
				m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
					if sb.Expired(m.now()) && sb.State != sandbox.StateDeleted {
						_ = m.destroyLocked(ctx, sb, sandbox.CausePolicy, "policy:timeout",
							fmt.Sprintf("timeout %s reached", sb.Spec.Timeout))
					}
				})
				continue
			}
			if next.IsZero() || d.Before(next) {
				next = d
			}
		}
		switch sb.State {
		case sandbox.StateDeleting, sandbox.StateFailed:
			m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
				if sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed {
					_ = m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, sb.Reason)
				}
			})
		case sandbox.StateRunning:
			if len(cgroups.Procs(m.paths(sb.ID).cgroup)) == 0 {
				m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
					if sb.State == sandbox.StateRunning && !m.alive(ctx, sb.ID) {
						_ = m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler,
							"sandbox exited unexpectedly: "+strings.TrimSpace(tailLog(m.paths(sb.ID).log, 256)))
					}
				})
			}
		}
	}
	return next
}

// async runs fn on a fresh copy of sandbox id under its lock, unless an
// operation already holds the lock.
func (m *Manager) async(id string, fn func(context.Context, *sandbox.Sandbox)) {
	unlock, ok := m.locks.TryLock(id)
	if !ok {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer unlock()
		ctx := context.Background()
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil {
			return
		}
		fn(ctx, sb)
	}()
}

// Doctor lists orphans and leaks: host resources with no live record, and
// live records whose host resources are gone. With fix it removes orphans.
func (m *Manager) Doctor(ctx context.Context, fix bool) (*api.DoctorReport, error) {
	all, err := m.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	live := map[string]*sandbox.Sandbox{}
	for _, sb := range all {
		live[sb.ID] = sb
	}
	rep := &api.DoctorReport{Runtime: m.rt.Name(), Findings: []api.DoctorFinding{}}
	add := func(kind, id, detail string, fixFn func() error) {
		f := api.DoctorFinding{Kind: kind, ID: id, Detail: detail}
		if fix && fixFn != nil {
			if err := fixFn(); err != nil {
				f.Error = err.Error()
			} else {
				f.Fixed = true
			}
		}
		rep.Findings = append(rep.Findings, f)
	}
	// The locks keep doctor from racing a create or delete in progress.
	busy := func(id string) bool {
		unlock, ok := m.locks.TryLock(id)
		if ok {
			unlock()
		}
		return !ok
	}

	containers, err := m.rt.List(ctx)
	if err != nil {
		add("runtime", "", "listing containers: "+err.Error(), nil)
	}
	for _, c := range containers {
		if live[c.ID] == nil && !busy(c.ID) {
			add("runtime", c.ID, fmt.Sprintf("container %s (%s) has no live sandbox", c.ID, c.Status), func() error {
				return m.rt.Delete(ctx, c.ID)
			})
		}
	}
	for _, id := range cgroups.Children(m.CgroupParent()) {
		if live[id] == nil && !busy(id) {
			rel := m.CgroupParent() + "/" + id
			add("cgroup", id, rel, func() error { return cgroups.Destroy(rel) })
		}
	}
	sbRoot := filepath.Join(m.cfg.DataDir, "sandboxes")
	mounts, _ := overlay.MountsUnder(sbRoot)
	for _, mp := range mounts {
		id, _, _ := strings.Cut(strings.TrimPrefix(mp, sbRoot+"/"), "/")
		if live[id] == nil && !busy(id) {
			add("mount", id, mp, func() error { return overlay.Unmount(mp) })
		}
	}
	dirs, _ := m.sandboxDirs()
	for _, id := range dirs {
		if live[id] == nil && !busy(id) {
			add("dir", id, filepath.Join(sbRoot, id), func() error { return m.teardown(ctx, id) })
		}
	}
	for id, sb := range live {
		if busy(id) {
			continue
		}
		switch sb.State {
		case sandbox.StateRunning:
			if _, err := m.rt.State(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
				add("record", id, "sandbox is running but has no container", nil)
			}
		case sandbox.StateDeleting, sandbox.StateFailed:
			add("record", id, fmt.Sprintf("sandbox is %s: teardown pending (%s)", sb.State, sb.Error), nil)
		}
	}
	rep.Healthy = true
	for _, f := range rep.Findings {
		if !f.Fixed {
			rep.Healthy = false
		}
	}
	return rep, nil
}
