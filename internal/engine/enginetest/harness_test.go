package enginetest_test

// The engine's unit tests: its exported API (core and features, as the
// daemon assembles them: enginetest.New) over real SQLite and
// the in-memory node backend (internal/node/memnode). They need no root and
// no runtime; the agent is real (in-process, on a socket in a temp dir), so
// exec runs harmless host commands as the test's user.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine/enginetest"

	"go.uber.org/goleak"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
	"github.com/berth-sh/berth/internal/testenv/pgtest"
)

// migrated is a database file every environment starts from a copy of:
// migrating a fresh one per test cost most of a test's CPU under -race.
var migrated string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "enginetest")
	if err != nil {
		panic(err)
	}
	migrated = filepath.Join(dir, "migrated.db")
	st, err := sqlite.Open(context.Background(), migrated)
	if err != nil {
		panic(err)
	}
	st.Close()
	if _, err := os.Stat(migrated + "-wal"); err == nil {
		panic("the migrated database's log was not checkpointed at close")
	}
	goleak.VerifyTestMain(m,
		goleak.Cleanup(func(code int) { pgtest.Stop(); os.RemoveAll(dir); os.Exit(code) }),
		// database/sql's connection opener of the pools the store closes
		// lives until the process ends.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// layer is the template's (fake) layer id.
const layer = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// clock is the engine's Now: it moves only when told to.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// faultyStore is the real store with injected failures of sandbox
// updates (a transition that cannot be recorded).
type faultyStore struct {
	store.Store
	mu   sync.Mutex
	fail map[string][]error
}

// FailUpdate makes the next update of sandbox id's record fail with err.
func (s *faultyStore) FailUpdate(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail == nil {
		s.fail = map[string][]error{}
	}
	s.fail[id] = append(s.fail[id], err)
}

// errRace, queued by FailUpdate, makes another writer update the record
// first: the update then meets the store's real compare-and-swap conflict.
var errRace = errors.New("a concurrent writer goes first")

func (s *faultyStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error {
	s.mu.Lock()
	if q := s.fail[sb.ID]; len(q) > 0 && q[0] == errRace {
		s.fail[sb.ID] = q[1:]
		s.mu.Unlock()
		other, err := s.Store.GetSandbox(ctx, store.AnyOwner, sb.ID)
		if err != nil {
			return err
		}
		other.LastActivityAt = other.LastActivityAt.Add(time.Millisecond)
		if err := s.Store.UpdateSandbox(ctx, other); err != nil {
			return err
		}
		return s.Store.UpdateSandbox(ctx, sb, events...)
	}
	if q := s.fail[sb.ID]; len(q) > 0 {
		err := q[0]
		s.fail[sb.ID] = q[1:]
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	return s.Store.UpdateSandbox(ctx, sb, events...)
}

var errInjected = errors.New("injected failure")

type env struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	st    *faultyStore
	node  *memnode.Node
	// backend, if set, is what the engine runs on: node wrapped.
	backend node.Backend
	m       *enginetest.Engine
	cfg     engine.Config
	// images is the real layer store (withImages), or nil.
	images *image.Store

	stopManager func()
}

type envOpt func(*env)

// withImages gives the engine a real layer store (and an upload
// directory on it), so template imports and uploads run as in the daemon.
func withImages() envOpt {
	return func(e *env) {
		root := filepath.Join(e.t.TempDir(), "layers")
		s, err := image.Open(root, image.IDMap{HostUID: 100000, HostGID: 100000, Size: 65536})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { s.Close() })
		e.images, e.cfg.UploadDir = s, filepath.Join(root, "uploads")
	}
}

// withClasses gives the node these classes, the first the default.
func withClasses(cls ...node.Class) envOpt {
	return func(e *env) { e.node = memnode.New(e.t, memnode.WithClasses(cls...)) }
}

// newEnv starts an engine over a fresh SQLite file and memnode, with the
// template "base" and the reconciler running every 20 ms.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, clock: &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	e.cfg = engine.Config{
		Node:              "node-a",
		ReconcileInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Now:               e.clock.Now,
		// The automatic warm pool would make members behind every
		// test's creates; TestWarmPoolAutoClock turns it on.
		WarmPool: -1,
	}
	for _, o := range opts {
		o(e)
	}
	if e.node == nil {
		e.node = memnode.New(t)
	}
	db := filepath.Join(t.TempDir(), "berth.db")
	if err := copyFile(migrated, db); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = &faultyStore{Store: st}
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Layers: []string{layer}, Source: "test",
		CreatedAt: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	e.start()
	return e
}

// start makes and recovers an engine over e's store and node.
func (e *env) start() {
	e.t.Helper()
	var be node.Backend = e.node
	if e.backend != nil {
		be = e.backend
	}
	m, err := enginetest.New(e.cfg, e.st, e.images, be)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Recover(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.m = m
	var once sync.Once
	e.t.Cleanup(func() { once.Do(m.Close) })
	e.stopManager = func() { once.Do(m.Close) }
}

func (e *env) create(req engine.CreateRequest) *sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.m.Create(e.ctx, &req, engine.CreateOptions{Actor: "test"})
	if err != nil {
		e.t.Fatalf("create %+v: %v", req, err)
	}
	if sb.State != sandbox.StateRunning {
		e.t.Fatalf("created sandbox is %s, want running", sb.State)
	}
	return sb
}

// get reads id's record from the store.
func (e *env) get(id string) *sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.st.GetSandbox(e.ctx, store.AnyOwner, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

// waitState waits until id's record is in state want.
func (e *env) waitState(id string, want sandbox.State) *sandbox.Sandbox {
	e.t.Helper()
	var sb *sandbox.Sandbox
	if !poll(func() bool { sb = e.get(id); return sb.State == want }) {
		e.t.Fatalf("sandbox %s is %s (%s, error %q), want %s", id, sb.State, sb.Reason, sb.Error, want)
	}
	return sb
}

// poll reports whether cond became true within 30 s (generous: the
// suite runs in parallel, under -race, on loaded machines).
func poll(cond func() bool) bool {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// nodeStatus is what the node sees of id's processes ("" if it holds
// nothing of id).
func (e *env) nodeStatus(id string) node.Status {
	s, ok := e.node.Get(id)
	if !ok {
		return ""
	}
	return s.Status
}

func (e *env) wantNodeStatus(id string, want node.Status) {
	e.t.Helper()
	if got := e.nodeStatus(id); got != want {
		e.t.Fatalf("node sees sandbox %s %q, want %q", id, got, want)
	}
}

func (e *env) exec(id string, cmd ...string) (engine.Exit, string, error) {
	var out bytes.Buffer
	exit, err := e.m.Exec(e.ctx, id, &engine.ExecRequest{Cmd: cmd, Timeout: 20 * time.Second},
		engine.ExecIO{Stdout: &out, Stderr: &out}, "test")
	return exit, out.String(), err
}

func (e *env) writeFile(id, path, content string) {
	e.t.Helper()
	f, err := e.m.Files(e.ctx, id, true, "test")
	if err != nil {
		e.t.Fatalf("files of %s: %v", id, err)
	}
	defer f.Close()
	if _, err := f.WriteFile(e.ctx, path, 0o644, strings.NewReader(content), "test"); err != nil {
		e.t.Fatalf("write %s in %s: %v", path, id, err)
	}
}

func (e *env) readFile(id, path string) (string, error) {
	f, err := e.m.Files(e.ctx, id, false, "test")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := f.ReadFile(e.ctx, path, &b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// events returns the state events of id as "from>to" strings.
func (e *env) stateEvents(id string) []string {
	e.t.Helper()
	evs, _, err := e.m.Events(e.ctx, id, 0, store.Page{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type == "state" {
			out = append(out, string(ev.From)+">"+string(ev.To))
		}
	}
	return out
}

// live lists the ids of live sandboxes.
func (e *env) live() []string {
	e.t.Helper()
	sbs, _, err := e.m.List(e.ctx, false, store.Page{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	slices.Sort(out)
	return out
}

// healthy fails the test unless doctor finds nothing.
func (e *env) healthy() {
	e.t.Helper()
	rep, err := e.m.Doctor(e.ctx, false)
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.Healthy {
		e.t.Fatalf("doctor: %+v", rep.Findings)
	}
}

func wantErr(t *testing.T, err, category error) {
	t.Helper()
	if !errors.Is(err, category) {
		t.Fatalf("error %v, want one of category %v", err, category)
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// mark is a point in the node's record of calls about id.
func (e *env) mark(id string) int { return len(e.node.Calls(id)) }

// callsAfter returns the calls about id since mark, as "Method(id, arg)"
// without the id, of the given methods only (all if none).
func (e *env) callsAfter(id string, mark int, only ...string) []string {
	var out []string
	for _, c := range e.node.Calls(id)[mark:] {
		if len(only) == 0 || slices.Contains(only, c.Method) {
			s := c.Method
			if c.Arg != "" {
				s += ":" + c.Arg
			}
			out = append(out, s)
		}
	}
	return out
}
