package enginetest

// Env runs the engine for its unit tests: its exported API (core and
// features, as the daemon assembles them) over real SQLite and the
// in-memory node backend (internal/node/memnode). They need no root and
// no runtime; the agent is real (in-process, on a socket in a temp dir),
// so exec runs harmless host commands as the test's user. A test package
// using Env calls Main from its TestMain.

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

	"go.uber.org/goleak"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/identity"
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

// Main runs a test package's tests (call it from TestMain): it migrates
// the database every Env copies, checks that no goroutine outlives the
// tests, and stops the PostgreSQL server pgtest may have started.
func Main(m *testing.M) {
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

// Layer is the template's (fake) layer id.
const Layer = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// Clock is the engine's Now: it moves only when told to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// FaultyStore is the real store with injected failures of sandbox
// updates (a transition that cannot be recorded).
type FaultyStore struct {
	store.Store
	mu     sync.Mutex
	fail   map[string][]error
	failIf []failIf
	nextID int
}

type failIf struct {
	match func(*sandbox.Sandbox) bool
	err   error
	keep  bool // every matching update until stopped, not the next one
	id    int
}

// FailUpdatesIf makes every update that match accepts fail with err,
// until stop is called.
func (s *FaultyStore) FailUpdatesIf(match func(*sandbox.Sandbox) bool, err error) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	s.failIf = append(s.failIf, failIf{match: match, err: err, keep: true, id: id})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.failIf = slices.DeleteFunc(s.failIf, func(f failIf) bool { return f.id == id })
	}
}

// FailUpdateIf makes the next update of a sandbox record that match
// accepts (as it would be written) fail with err: for a sandbox whose id
// the test cannot know beforehand (a warm pool's member).
func (s *FaultyStore) FailUpdateIf(match func(*sandbox.Sandbox) bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failIf = append(s.failIf, failIf{match: match, err: err})
}

// FailUpdate makes the next update of sandbox id's record fail with err.
func (s *FaultyStore) FailUpdate(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail == nil {
		s.fail = map[string][]error{}
	}
	s.fail[id] = append(s.fail[id], err)
}

// Pending is how many of the failures queued for id's updates are still
// unused.
func (s *FaultyStore) Pending(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fail[id])
}

// ErrRace, queued by FailUpdate, makes another writer update the record
// first: the update then meets the store's real compare-and-swap conflict.
var ErrRace = errors.New("a concurrent writer goes first")

// UpdateSandbox is the store's, failing as FailUpdate asked.
func (s *FaultyStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error {
	s.mu.Lock()
	if q := s.fail[sb.ID]; len(q) > 0 && q[0] == ErrRace {
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
	for i, f := range s.failIf {
		if f.match(sb) {
			if !f.keep {
				s.failIf = slices.Delete(s.failIf, i, i+1)
			}
			s.mu.Unlock()
			return f.err
		}
	}
	s.mu.Unlock()
	return s.Store.UpdateSandbox(ctx, sb, events...)
}

// ErrInjected is the failure tests make a node method or an update fail
// with.
var ErrInjected = errors.New("injected failure")

// Env is one engine over a fresh SQLite file and memnode.
type Env struct {
	T     *testing.T
	Ctx   context.Context
	Clock *Clock
	Store *FaultyStore
	Node  *memnode.Node
	// Backend, if set, is what the engine runs on: Node wrapped.
	Backend node.Backend
	Engine  *Engine
	Config  engine.Config
	// Images is the real layer store (WithImages), or nil.
	Images *image.Store

	// StopEngine closes the engine (Start makes another).
	StopEngine func()
}

// Option changes an Env before its engine starts.
type Option func(*Env)

// WithImages gives the engine a real layer store (and an upload
// directory on it), so template imports and uploads run as in the daemon.
func WithImages() Option {
	return func(e *Env) {
		root := filepath.Join(e.T.TempDir(), "layers")
		s, err := image.Open(root, image.IDMap{HostUID: 100000, HostGID: 100000, Size: 65536})
		if err != nil {
			e.T.Fatal(err)
		}
		e.T.Cleanup(func() { s.Close() })
		e.Images, e.Config.UploadDir = s, filepath.Join(root, "uploads")
	}
}

// WithClasses gives the node these classes, the first the default.
func WithClasses(cls ...node.Class) Option {
	return func(e *Env) { e.Node = memnode.New(e.T, memnode.WithClasses(cls...)) }
}

// NewEnv starts an engine over a fresh SQLite file and memnode, with the
// template "base" and the reconciler running every 20 ms.
func NewEnv(t *testing.T, opts ...Option) *Env {
	t.Helper()
	if migrated == "" {
		t.Fatal("enginetest.NewEnv needs enginetest.Main called from the package's TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &Env{T: t, Ctx: ctx, Clock: &Clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	e.Config = engine.Config{
		Node:              "node-a",
		ReconcileInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Now:               e.Clock.Now,
		// The automatic warm pool would make members behind every
		// test's creates; TestWarmPoolAutoClock turns it on.
		WarmPool: -1,
	}
	for _, o := range opts {
		o(e)
	}
	if e.Node == nil {
		e.Node = memnode.New(t)
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
	e.Store = &FaultyStore{Store: st}
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Layers: []string{Layer}, Source: "test",
		CreatedAt: e.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	e.Start()
	return e
}

// Start makes and recovers an engine over e's store and node.
func (e *Env) Start() {
	e.T.Helper()
	var be node.Backend = e.Node
	if e.Backend != nil {
		be = e.Backend
	}
	m, err := New(e.Config, e.Store, e.Images, be)
	if err != nil {
		e.T.Fatal(err)
	}
	if err := m.Recover(e.Ctx); err != nil {
		e.T.Fatal(err)
	}
	e.Engine = m
	var once sync.Once
	e.T.Cleanup(func() { once.Do(m.Close) })
	e.StopEngine = func() { once.Do(m.Close) }
}

// Create creates a sandbox and fails the test unless it is running.
func (e *Env) Create(req engine.CreateRequest) *sandbox.Sandbox {
	e.T.Helper()
	sb, err := e.Engine.Create(e.Ctx, &req, engine.CreateOptions{Actor: "test"})
	if err != nil {
		e.T.Fatalf("create %+v: %v", req, err)
	}
	if sb.State != sandbox.StateRunning {
		e.T.Fatalf("created sandbox is %s, want running", sb.State)
	}
	return sb
}

// Get reads id's record from the store.
func (e *Env) Get(id string) *sandbox.Sandbox {
	e.T.Helper()
	sb, err := e.Store.GetSandbox(e.Ctx, store.AnyOwner, id)
	if err != nil {
		e.T.Fatalf("get %s: %v", id, err)
	}
	return sb
}

// WaitState waits until id's record is in state want.
func (e *Env) WaitState(id string, want sandbox.State) *sandbox.Sandbox {
	e.T.Helper()
	var sb *sandbox.Sandbox
	if !Poll(func() bool { sb = e.Get(id); return sb.State == want }) {
		e.T.Fatalf("sandbox %s is %s (%s, error %q), want %s", id, sb.State, sb.Reason, sb.Error, want)
	}
	return sb
}

// Poll reports whether cond became true within 30 s (generous: the
// suite runs in parallel, under -race, on loaded machines).
func Poll(cond func() bool) bool {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// NodeStatus is what the node sees of id's processes ("" if it holds
// nothing of id).
func (e *Env) NodeStatus(id string) node.Status {
	s, ok := e.Node.Get(id)
	if !ok {
		return ""
	}
	return s.Status
}

// WantNodeStatus fails the test unless the node sees id as want.
func (e *Env) WantNodeStatus(id string, want node.Status) {
	e.T.Helper()
	if got := e.NodeStatus(id); got != want {
		e.T.Fatalf("node sees sandbox %s %q, want %q", id, got, want)
	}
}

// Exec runs cmd in id, returning its exit and its output (stdout and
// stderr together).
func (e *Env) Exec(id string, cmd ...string) (engine.Exit, string, error) {
	var out bytes.Buffer
	exit, err := e.Engine.Exec(e.Ctx, id, &engine.ExecRequest{Cmd: cmd, Timeout: 20 * time.Second},
		engine.ExecIO{Stdout: &out, Stderr: &out}, "test")
	return exit, out.String(), err
}

// WriteFile writes content to path in id.
func (e *Env) WriteFile(id, path, content string) {
	e.T.Helper()
	f, err := e.Engine.Files(e.Ctx, id, true, "test")
	if err != nil {
		e.T.Fatalf("files of %s: %v", id, err)
	}
	defer f.Close()
	if _, err := f.WriteFile(e.Ctx, path, 0o644, strings.NewReader(content), "test"); err != nil {
		e.T.Fatalf("write %s in %s: %v", path, id, err)
	}
}

// ReadFile reads path in id.
func (e *Env) ReadFile(id, path string) (string, error) {
	f, err := e.Engine.Files(e.Ctx, id, false, "test")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := f.ReadFile(e.Ctx, path, &b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// StateEvents returns the state events of id as "from>to" strings.
func (e *Env) StateEvents(id string) []string {
	e.T.Helper()
	evs, _, err := e.Engine.Events(e.Ctx, id, 0, store.Page{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type == "state" {
			out = append(out, string(ev.From)+">"+string(ev.To))
		}
	}
	return out
}

// Live lists the ids of live sandboxes.
func (e *Env) Live() []string {
	e.T.Helper()
	sbs, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	slices.Sort(out)
	return out
}

// Healthy fails the test unless doctor finds nothing.
func (e *Env) Healthy() {
	e.T.Helper()
	rep, err := e.Engine.Doctor(e.Ctx, false)
	if err != nil {
		e.T.Fatal(err)
	}
	if !rep.Healthy {
		e.T.Fatalf("doctor: %+v", rep.Findings)
	}
}

// WantErr fails the test unless err is of category.
func WantErr(t *testing.T, err, category error) {
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

// Mark is a point in the node's record of calls about id.
func (e *Env) Mark(id string) int { return len(e.Node.Calls(id)) }

// CallsAfter returns the calls about id since mark, as "Method(id, arg)"
// without the id, of the given methods only (all if none).
func (e *Env) CallsAfter(id string, mark int, only ...string) []string {
	var out []string
	for _, c := range e.Node.Calls(id)[mark:] {
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

// OwnLayer is the (fake) layer of acme's own "base" template.
const OwnLayer = "sha256:00000000000000000000000000000000000000000000000000000000000000a1"

// SetQuota sets a tenant's quota.
func (e *Env) SetQuota(q store.TenantQuota) {
	e.T.Helper()
	if err := e.Engine.SetQuota(e.Ctx, &q); err != nil {
		e.T.Fatal(err)
	}
}

// CreateAs creates a sandbox as tenant.
func (e *Env) CreateAs(tenant string, req engine.CreateRequest) (*sandbox.Sandbox, error) {
	return e.Engine.Create(e.Ctx, &req, engine.CreateOptions{Actor: "test", Tenant: tenant})
}

// WaitPoolMember waits for template base's pool to have a ready member
// and returns it.
func (e *Env) WaitPoolMember(skip ...string) *sandbox.Sandbox {
	e.T.Helper()
	var member *sandbox.Sandbox
	ok := Poll(func() bool {
		sbs, _, err := e.Engine.List(e.Ctx, false, store.Page{})
		Must(e.T, err)
		for _, sb := range sbs {
			if sb.Spec.Pool == "base" && sb.State == sandbox.StatePaused && !slices.Contains(skip, sb.ID) {
				member = sb
				return true
			}
		}
		return false
	})
	if !ok {
		e.T.Fatal("no ready pool member")
	}
	return member
}

// Must fails the test if err is not nil.
func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// As is e's context acting for tenant's caller (as the server's guard makes it).
func (e *Env) As(tenant string) context.Context {
	return identity.With(e.Ctx, identity.Caller{Tenant: tenant, Actor: "key:" + tenant})
}

// PoolMembersOf lists the pool members of (tenant, template), as stored.
func (e *Env) PoolMembersOf(tenant, tpl string) []*sandbox.Sandbox {
	e.T.Helper()
	sbs, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	Must(e.T, err)
	var out []*sandbox.Sandbox
	for _, sb := range sbs {
		if sb.Spec.Pool == tpl && sb.Tenant == tenant && sb.State.Live() {
			out = append(out, sb)
		}
	}
	return out
}

// Upload uploads the template archive at path as name.
func (e *Env) Upload(ctx context.Context, name, path string) (*store.Template, error) {
	e.T.Helper()
	f, err := os.Open(path)
	if err != nil {
		e.T.Fatal(err)
	}
	defer f.Close()
	return e.Engine.UploadTemplate(ctx, name, f)
}
