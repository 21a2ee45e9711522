package engine_test

// Two replicas of the control plane on one real PostgreSQL: two engines
// with their reconcilers, one node (a shared memnode standing for the
// cluster both replicas drive, as Kubernetes replicas do) and node leases
// kept by package leader. The local backend's node is never shared, so
// this is the engine level with the real store, where a stall or a crash
// can be placed exactly; two real daemons on the real cluster are
// test/k8s TestReplicasOnRealCluster.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine/enginetest"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/postgres"
	"github.com/berth-sh/berth/internal/testenv/pgtest"
)

// leaseTTL is short so takeovers are quick; renewals run every third.
const leaseTTL = 900 * time.Millisecond

// stallStore is the real store of one replica with a switch that stalls
// it as a SIGSTOP would, in the middle of a reconciler action: once armed,
// its next fenced (reconciler) sandbox write — made after the action's
// lease check — blocks until woken, and so do its lease renewals.
type stallStore struct {
	store.Store
	mu      sync.Mutex
	armed   bool
	stalled chan struct{} // closed on wake; nil when running
	fenced  []error       // errors of the fenced writes that were stalled
}

func (s *stallStore) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

func (s *stallStore) isStalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled != nil
}

func (s *stallStore) wake() {
	s.mu.Lock()
	if s.stalled != nil {
		close(s.stalled)
	}
	s.stalled, s.armed = nil, false
	s.mu.Unlock()
}

func (s *stallStore) wait(ctx context.Context) bool {
	s.mu.Lock()
	ch := s.stalled
	s.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return true
}

func (s *stallStore) TakeReconcileLease(ctx context.Context, name, holder string, ttl time.Duration) (store.LeaseRecord, error) {
	s.wait(ctx)
	if err := ctx.Err(); err != nil {
		return store.LeaseRecord{}, err
	}
	return s.Store.TakeReconcileLease(ctx, name, holder, ttl)
}

func (s *stallStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error {
	_, fenced := store.FenceFrom(ctx)
	s.mu.Lock()
	if fenced && s.armed && s.stalled == nil {
		s.armed, s.stalled = false, make(chan struct{})
	}
	s.mu.Unlock()
	stalled := fenced && s.wait(ctx)
	err := s.Store.UpdateSandbox(ctx, sb, events...)
	if stalled {
		s.mu.Lock()
		s.fenced = append(s.fenced, err)
		s.mu.Unlock()
	}
	return err
}

// replica is one control-plane replica: its own store handle (pool), lease
// keeper and engine.
type replica struct {
	name  string
	st    *stallStore
	lease *leader.Keeper
	// presence is its presence lease (leader.ReplicaLeaseName), kept as
	// the daemon keeps it where the node is shared.
	presence *leader.Keeper
	m        *enginetest.Engine
	cancel   context.CancelFunc // stops the keeper; with release: a graceful stop
	done     chan struct{}
	closed   sync.Once
}

// tagged is the shared node as one replica drives it: Removes are
// attributed, to tell which replica acted.
type tagged struct {
	*memnode.Node
	name string
}

var removedBy sync.Map // sandbox id -> []string of replica names

// gates holds a replica's Provision calls: replica name -> *gate.
var gates sync.Map

type gate struct {
	entered chan string   // the id of each Provision that reached the gate
	open    chan struct{} // closed: the held calls fail, as a dead process's would
}

// holdProvisions makes replica name's next Provision calls wait at a gate
// until it is opened, then fail: a create the replica dies in the middle of.
// The gate goes at the end of the test: replica names recur across tests,
// and a gate left open failed a later test's creates at once.
func holdProvisions(t *testing.T, name string) *gate {
	g := &gate{entered: make(chan string, 8), open: make(chan struct{})}
	gates.Store(name, g)
	t.Cleanup(func() { gates.CompareAndDelete(name, g) })
	return g
}

func (n tagged) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	if v, ok := gates.Load(n.name); ok {
		g := v.(*gate)
		g.entered <- sb.ID
		<-g.open
		return errors.New("replica died in the middle of this create")
	}
	return n.Node.Provision(ctx, sb)
}

func (n tagged) Remove(ctx context.Context, sb *sandbox.Sandbox) error {
	v, _ := removedBy.LoadOrStore(sb.ID, &[]string{})
	lst := v.(*[]string)
	*lst = append(*lst, n.name)
	return n.Node.Remove(ctx, sb)
}

func startReplica(t *testing.T, url, name string, node *memnode.Node) *replica {
	t.Helper()
	raw, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, st: &stallStore{Store: raw}, done: make(chan struct{})}
	r.lease = leader.New(r.st, leader.NodeLeaseName("cluster"), name, leader.WithTTL(leaseTTL),
		leader.WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.presence = leader.New(r.st, leader.ReplicaLeaseName(name), name, leader.WithTTL(leaseTTL),
		leader.WithLogger(slog.New(slog.DiscardHandler)))
	var kept sync.WaitGroup
	kept.Add(2)
	go func() { defer kept.Done(); r.lease.Run(ctx) }()
	go func() { defer kept.Done(); r.presence.Run(ctx) }()
	go func() { kept.Wait(); close(r.done) }()
	if err := leader.WaitHeld(t.Context(), r.presence, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.m, err = enginetest.New(engine.Config{
		Node: "cluster", ReconcileInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		NodeLease: r.lease, StoreLease: r.lease, Replica: name, WarmPool: -1,
	}, r.st, nil, tagged{node, name})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	return r
}

// kill ends the replica as a crash does: the engine stops and its store
// handle closes, so the lease is not released and must expire.
func (r *replica) kill() {
	r.closed.Do(func() {
		r.st.wake() // a stalled action would hold Close for ever
		r.m.Close()
		r.st.Store.Close() // first: the keeper's release then fails, as a dead process's would
		r.cancel()
		<-r.done
	})
}

func held(r *replica) bool { _, ok := r.lease.Held(); return ok }

// startPair starts replicas a and b on url and node and waits until one
// of them, holder, holds the node lease; other is the one that does not.
func startPair(t *testing.T, url string, node *memnode.Node) (a, b, holder, other *replica) {
	t.Helper()
	a = startReplica(t, url, "replica-a", node)
	b = startReplica(t, url, "replica-b", node)
	holder, other = waitHolder(t, 5*time.Second, a, b), a
	if holder == a {
		other = b
	}
	return a, b, holder, other
}

// waitHolder waits for exactly one of rs to hold the lease and returns it.
func waitHolder(t *testing.T, within time.Duration, rs ...*replica) *replica {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var holders []*replica
		for _, r := range rs {
			if held(r) {
				holders = append(holders, r)
			}
		}
		if len(holders) > 1 {
			t.Fatalf("%s and %s both hold the lease", holders[0].name, holders[1].name)
		}
		if len(holders) == 1 {
			return holders[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no replica took the lease within %s", within)
	return nil
}

// expiring creates, through r, a sandbox whose 1 s timeout deletes it.
func expiring(t *testing.T, r *replica) *sandbox.Sandbox {
	t.Helper()
	sb, err := r.m.Create(t.Context(), &engine.CreateRequest{Timeout: time.Second}, engine.CreateOptions{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// deletions counts what was done to delete id: the node's Remove calls
// and the recorded state events into deleting and deleted.
func deletions(t *testing.T, st store.Store, node *memnode.Node, id string) (removes, deleting, deleted int) {
	t.Helper()
	for _, c := range node.Calls(id) {
		if c.Method == "Remove" {
			removes++
		}
	}
	evs, _, err := st.ListEvents(context.Background(), store.AnyOwner, id, 0, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == "state" && ev.To == sandbox.StateDeleting {
			deleting++
		}
		if ev.Type == "state" && ev.To == sandbox.StateDeleted {
			deleted++
		}
	}
	return
}

func waitDeleted(t *testing.T, st store.Store, id string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		sb, err := st.GetSandbox(context.Background(), store.AnyOwner, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == sandbox.StateDeleted {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sandbox %s not deleted within %s", id, within)
	return time.Time{}
}

// onlyBy checks that every Remove of sandbox id was made by replica name.
func onlyBy(t *testing.T, id, name string) {
	t.Helper()
	v, ok := removedBy.Load(id)
	if !ok {
		t.Errorf("sandbox %s was never removed", id)
		return
	}
	for _, by := range *v.(*[]string) {
		if by != name {
			t.Errorf("sandbox %s removed by %v: want only the holder %s", id, *v.(*[]string), name)
			return
		}
	}
}

func putBase(t *testing.T, url string) {
	t.Helper()
	st, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutTemplate(t.Context(), &store.Template{Name: "base", Layers: []string{enginetest.Layer}, Source: "test",
		CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasReconcileOnce: of two replicas on one PostgreSQL, one acts on
// an expired sandbox — only the holder removes it, with one deleting and
// one deleted event — whichever replica created it; the holder's crash hands the work to the
// other within the lease's bound, which then deletes the next one once.
func TestReplicasReconcileOnce(t *testing.T) {
	url := pgtest.Database(t)
	putBase(t, url)
	node := memnode.New(t)
	a, b, holder, other := startPair(t, url, node)

	for _, via := range []*replica{a, b} {
		sb := expiring(t, via)
		waitDeleted(t, a.st, sb.ID, 10*time.Second)
		time.Sleep(200 * time.Millisecond) // ten more passes of each reconciler
		// One action recorded, and only the holder touched the node. The
		// holder's engine itself occasionally runs its (idempotent)
		// teardown twice under load — a second pass of its own, never the
		// other replica's (docs/kubernetes.md, "Replicas").
		if rm, dg, dd := deletions(t, a.st, node, sb.ID); rm < 1 || dg != 1 || dd != 1 {
			t.Errorf("sandbox created via %s: %d Remove, %d deleting and %d deleted events; want one deleting and one deleted; node calls %v",
				via.name, rm, dg, dd, node.Calls(sb.ID))
		}
		onlyBy(t, sb.ID, holder.name)
	}
	if held(other) {
		t.Fatalf("%s holds the lease beside %s", other.name, holder.name)
	}

	// The holder dies without releasing: the other takes over once the
	// row expires, within the TTL plus one retry period (and slack).
	sb := expiring(t, other)
	died := time.Now()
	holder.kill()
	if got := waitHolder(t, 3*leaseTTL, other); got != other {
		t.Fatalf("holder %s after the crash", got.name)
	}
	took := time.Since(died)
	bound := leaseTTL + leaseTTL/3 + 300*time.Millisecond
	if took > bound {
		t.Errorf("takeover took %s, want at most %s", took, bound)
	}
	t.Logf("takeover %s after the holder's crash (TTL %s)", took.Round(time.Millisecond), leaseTTL)
	waitDeleted(t, other.st, sb.ID, 10*time.Second)
	if rm, dg, dd := deletions(t, other.st, node, sb.ID); rm < 1 || dg != 1 || dd != 1 {
		t.Errorf("after takeover: %d Remove, %d deleting and %d deleted events; want one deleting and one deleted", rm, dg, dd)
	}
	onlyBy(t, sb.ID, other.name)
}

// TestStalledHolderFenced: the holder stalls in the middle of a policy
// action, after its lease check and before its write; its lease expires,
// the other replica takes over and deletes the sandbox; when the stalled
// one wakes, its write is refused by the fence (ErrLeaseLost), so it
// records nothing and removes nothing, and it no longer believes it holds
// the lease.
func TestStalledHolderFenced(t *testing.T) {
	url := pgtest.Database(t)
	putBase(t, url)
	node := memnode.New(t)
	a := startReplica(t, url, "replica-a", node)
	waitHolder(t, 5*time.Second, a)
	b := startReplica(t, url, "replica-b", node)

	a.st.arm()
	sb := expiring(t, b)
	// a, the holder, acts on the expired sandbox and stalls in its write.
	deadline := time.Now().Add(10 * time.Second)
	for !a.st.isStalled() {
		if time.Now().After(deadline) {
			t.Fatal("the holder never acted on the expired sandbox")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// b takes over once a's last renewal expires (never while a still
	// believes it holds it), and deletes the sandbox.
	for deadline := time.Now().Add(4 * leaseTTL); !held(b); {
		if held(a) && held(b) {
			t.Fatal("both replicas hold the lease")
		}
		if time.Now().After(deadline) {
			t.Fatal("b did not take over from the stalled holder")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitDeleted(t, b.st, sb.ID, 10*time.Second)
	if held(a) {
		t.Fatal("the stalled replica still believes it holds the lease")
	}
	a.st.wake()
	deadline = time.Now().Add(5 * time.Second)
	for {
		a.st.mu.Lock()
		errs := append([]error(nil), a.st.fenced...)
		a.st.mu.Unlock()
		if len(errs) > 0 {
			for _, err := range errs {
				if !errors.Is(err, store.ErrLeaseLost) {
					t.Errorf("stalled replica's write after waking: %v, want ErrLeaseLost", err)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled write did not return after waking")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if rm, dg, dd := deletions(t, b.st, node, sb.ID); rm != 1 || dg != 1 || dd != 1 {
		t.Errorf("%d Remove, %d deleting and %d deleted events; want one each (b's)", rm, dg, dd)
	}
	if held(a) {
		t.Error("a holds the lease again while b keeps renewing it")
	}
}

// orphanCreate starts a create through r whose Provision r never finishes
// (r will be killed in the middle of it) and returns the sandbox's id and
// the create's outcome, delivered once the gate opens.
func orphanCreate(t *testing.T, r *replica, g *gate) (string, chan error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := r.m.Create(context.Background(), &engine.CreateRequest{}, engine.CreateOptions{Actor: "test"})
		errc <- err
	}()
	select {
	case id := <-g.entered:
		return id, errc
	case err := <-errc:
		t.Fatalf("create through %s ended before its provision: %v", r.name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("create through %s never reached its provision", r.name)
	}
	return "", nil
}

// waitState waits for sandbox id to reach state want.
func waitState(t *testing.T, st store.Store, id string, want sandbox.State, within time.Duration) *sandbox.Sandbox {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		sb, err := st.GetSandbox(context.Background(), store.AnyOwner, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s after %s, want %s", id, sb.State, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stateEvents lists sandbox id's state events as "to (actor): reason".
func stateEvents(t *testing.T, st store.Store, id string) []*sandbox.Event {
	t.Helper()
	evs, _, err := st.ListEvents(context.Background(), store.AnyOwner, id, 0, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*sandbox.Event
	for _, ev := range evs {
		if ev.Type == "state" {
			out = append(out, ev)
		}
	}
	return out
}

// TestOrphanedTransitionsFinished: a replica that dies in the middle of a
// create leaves the record "creating" under its name; the node lease's
// holder, seeing that replica's presence lease lapse, finishes the create
// (running, provisioned by the holder, never removed) and a start it left
// the same way, and destroys the
// dead replica's one-shot sandbox (its client went away with it). Both
// when the dead replica did not hold the node lease and when it did (the
// survivor takes the lease, then finishes). A live replica's create in
// flight is left alone, and the dead replica's late create, when its
// provision returns, changes nothing.
func TestOrphanedTransitionsFinished(t *testing.T) {
	url := pgtest.Database(t)
	putBase(t, url)
	node := memnode.New(t)
	a := startReplica(t, url, "replica-a", node)
	holder := waitHolder(t, 5*time.Second, a)
	x := startReplica(t, url, "replica-x", node)
	if _, err := leader.Present(t.Context(), x.st, "replica-x"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ok, _ := leader.Present(t.Context(), a.st, "replica-x"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica-x's presence lease was never taken")
		}
	}

	// x serves a one-shot sandbox and then dies in the middle of a create.
	oneShot, err := x.m.Create(t.Context(), &engine.CreateRequest{}, engine.CreateOptions{Actor: "test", OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	// ... and a persistent one it stopped and is starting again.
	pers, err := x.m.Create(t.Context(), &engine.CreateRequest{Persistent: true}, engine.CreateOptions{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.m.Stop(t.Context(), pers.ID, "test"); err != nil {
		t.Fatal(err)
	}
	g := holdProvisions(t, "replica-x")
	id, late := orphanCreate(t, x, g)
	lateStart := make(chan error, 1)
	go func() { _, err := x.m.Start(context.Background(), pers.ID, "test"); lateStart <- err }()
	select {
	case got := <-g.entered:
		if got != pers.ID {
			t.Fatalf("provision of %s at the gate, want the start of %s", got, pers.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the start through replica-x never reached its provision")
	}
	// While x lives, its create is its own: the holder leaves it.
	time.Sleep(3 * leaseTTL)
	if sb := waitState(t, a.st, id, sandbox.StateCreating, time.Second); sb.Replica != "replica-x" {
		t.Fatalf("creating record names replica %q, want replica-x", sb.Replica)
	}
	if _, ok := node.Get(id); ok {
		t.Fatal("the holder provisioned a live replica's create in flight")
	}
	died := time.Now()
	x.kill()
	sb := waitState(t, a.st, id, sandbox.StateRunning, 4*leaseTTL+5*time.Second)
	t.Logf("orphaned create finished %s after its replica died (TTL %s)", time.Since(died).Round(time.Millisecond), leaseTTL)
	if sb.Replica != holder.name {
		t.Errorf("finished create records replica %q, want the holder %s", sb.Replica, holder.name)
	}
	evs := stateEvents(t, a.st, id)
	if last := evs[len(evs)-1]; last.To != sandbox.StateRunning || !strings.Contains(last.Reason, "replica replica-x is gone") {
		t.Errorf("last event %+v, want running with a reason naming replica-x", last)
	}
	if sb := waitState(t, a.st, pers.ID, sandbox.StateRunning, 5*time.Second); sb.Replica != holder.name {
		t.Errorf("finished start records replica %q, want the holder %s", sb.Replica, holder.name)
	}
	if evs := stateEvents(t, a.st, pers.ID); !strings.Contains(evs[len(evs)-1].Reason, "start finished by the node lease holder: replica replica-x is gone") {
		t.Errorf("persistent sandbox's last event %+v, want its start finished by the holder", evs[len(evs)-1])
	}
	waitDeleted(t, a.st, oneShot.ID, 5*time.Second)
	if evs := stateEvents(t, a.st, oneShot.ID); !strings.Contains(evs[len(evs)-1].Reason, "client went away") {
		t.Errorf("one-shot's last event %+v, want its client gone", evs[len(evs)-1])
	}
	onlyBy(t, oneShot.ID, holder.name)

	// The dead replica's create returns at last: refused, nothing undone.
	close(g.open)
	if err := <-late; err == nil {
		t.Error("the dead replica's late create succeeded")
	}
	if err := <-lateStart; err == nil {
		t.Error("the dead replica's late start succeeded")
	}
	time.Sleep(200 * time.Millisecond)
	if sb := waitState(t, a.st, id, sandbox.StateRunning, time.Second); sb.Error != "" {
		t.Errorf("running record carries error %q", sb.Error)
	}
	if rm, _, _ := deletions(t, a.st, node, id); rm != 0 {
		t.Errorf("the finished create was removed %d times", rm)
	}
	if sb := waitState(t, a.st, pers.ID, sandbox.StateRunning, time.Second); sb.Error != "" {
		t.Errorf("the finished start carries error %q after the late one failed", sb.Error)
	}

	// Now the holder itself dies in the middle of a create: c takes the
	// lease and then finishes it.
	c := startReplica(t, url, "replica-c", node)
	g = holdProvisions(t, holder.name)
	id, late = orphanCreate(t, holder, g)
	holder.kill()
	close(g.open)
	<-late
	if got := waitHolder(t, 3*leaseTTL, c); got != c {
		t.Fatal("c did not take the lease")
	}
	if sb := waitState(t, c.st, id, sandbox.StateRunning, 4*leaseTTL+5*time.Second); sb.Replica != "replica-c" {
		t.Errorf("finished create records replica %q, want replica-c", sb.Replica)
	}
	if _, ok := node.Get(id); !ok {
		t.Error("the finished create has nothing on the node")
	}
}

// TestSharedNodeOrphansSwept: on a node replicas share no replica runs
// the start-up sweep, so the lease's holder sweeps the node when it takes
// the lease: something the node holds that no record accounts for (a pod
// left by a sandbox whose record is gone) is removed, while a live
// sandbox made through the other replica is left alone. A new holder
// sweeps again at its takeover.
func TestSharedNodeOrphansSwept(t *testing.T) {
	url := pgtest.Database(t)
	putBase(t, url)
	node := memnode.New(t)
	plant := func(id string) string {
		t.Helper()
		if err := node.Provision(t.Context(), &sandbox.Sandbox{ID: id, Spec: sandbox.Spec{Template: "base", Layers: []string{enginetest.Layer},
			Runtime: memnode.FakeRunc.Name}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	gone := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := node.Get(id); !ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the orphan %s is still on the node (calls %v)", id, node.Calls(id))
			}
		}
	}
	first := plant("orphan0000000001")
	_, _, holder, other := startPair(t, url, node)
	gone(first)
	sb, err := other.m.Create(t.Context(), &engine.CreateRequest{}, engine.CreateOptions{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	second := plant("orphan0000000002")
	holder.kill()
	if got := waitHolder(t, 3*leaseTTL, other); got != other {
		t.Fatalf("holder %s after the crash", got.name)
	}
	gone(second)
	if s, ok := node.Get(sb.ID); !ok || s.Status != "running" {
		t.Fatalf("the live sandbox %s after the sweeps: %+v %v", sb.ID, s, ok)
	}
	if got, err := other.m.Get(t.Context(), sb.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the live sandbox's record after the sweeps: %v %v", got, err)
	}
}
