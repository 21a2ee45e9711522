package engine

import (
	"context"
	"sync"
	"time"
)

// live is what the engine keeps in memory about one sandbox while it
// exists: the lock its operations take, its open execs, activity not yet
// stored and its last CPU sample. There is one per sandbox id (liveSet),
// made at first use and dropped when the sandbox is deleted, so no map of
// the engine is keyed by sandbox id besides the set itself and nothing
// scans every exec to find one sandbox's.
type live struct {
	id string
	op sync.Mutex // held by every lifecycle operation on the sandbox

	mu       sync.Mutex // guards the fields below
	execs    map[*execHandle]struct{}
	activity time.Time // latest activity not yet stored
	cpu      cpuSample
	hasCPU   bool
	ext      map[any]any // feature packages' state (Engine.LiveValue)
}

type execHandle struct{ cancel context.CancelFunc }

type cpuSample struct {
	at    time.Time
	usage time.Duration
}

// liveSet holds the live objects by sandbox id. Lookups take a read lock
// only; the write lock is taken to add or drop an object.
type liveSet struct {
	mu sync.RWMutex
	m  map[string]*live
}

// get returns id's live object, making it if needed.
func (s *liveSet) get(id string) *live {
	s.mu.RLock()
	l := s.m[id]
	s.mu.RUnlock()
	if l != nil {
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*live{}
	}
	if l = s.m[id]; l == nil {
		l = &live{id: id}
		s.m[id] = l
	}
	return l
}

// peek returns id's live object if there is one.
func (s *liveSet) peek(id string) *live {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[id]
}

// drop forgets id (a deleted sandbox). A holder of its lock keeps the
// object it has.
func (s *liveSet) drop(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// lock takes id's operation lock.
func (s *liveSet) lock(id string) func() {
	l := s.get(id)
	l.op.Lock()
	return l.op.Unlock
}

// tryLock takes id's operation lock if it is free.
func (s *liveSet) tryLock(id string) (func(), bool) {
	l := s.get(id)
	if !l.op.TryLock() {
		return nil, false
	}
	return l.op.Unlock, true
}

// trackExec registers a running exec so that stop, quarantine and delete
// can end it; the returned func unregisters it.
func (l *live) trackExec(cancel context.CancelFunc) func() {
	h := &execHandle{cancel: cancel}
	l.mu.Lock()
	if l.execs == nil {
		l.execs = map[*execHandle]struct{}{}
	}
	l.execs[h] = struct{}{}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.execs, h)
		l.mu.Unlock()
	}
}

// cancelExecs ends every exec running in the sandbox.
func (l *live) cancelExecs() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for h := range l.execs {
		h.cancel()
	}
}

func (l *live) openExecs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.execs)
}

func (l *live) touch(t time.Time) {
	l.mu.Lock()
	if t.After(l.activity) {
		l.activity = t
	}
	l.mu.Unlock()
}

func (l *live) lastActivity() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.activity
}

// stored clears the activity not yet stored if it is still t.
func (l *live) stored(t time.Time) {
	l.mu.Lock()
	if !l.activity.After(t) {
		l.activity = time.Time{}
	}
	l.mu.Unlock()
}

// sample records a CPU reading and returns the previous one.
func (l *live) sample(s cpuSample) (prev cpuSample, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok = l.cpu, l.hasCPU
	l.cpu, l.hasCPU = s, true
	return prev, ok
}

// value returns the feature state under key, made by mk at first use.
func (l *live) value(key any, mk func() any) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.ext[key]; ok {
		return v
	}
	if mk == nil {
		return nil
	}
	if l.ext == nil {
		l.ext = map[any]any{}
	}
	v := mk()
	l.ext[key] = v
	return v
}
