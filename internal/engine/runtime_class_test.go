package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Item 8(b): a sandbox's runtime class is recorded by name, never as "the
// default", and what a class can do is checked on the class a sandbox
// really has.

// fakeKata is a second class that keeps pool members, so a pool of one
// default class can be told from another's.
var fakeKata = node.Class{Name: "fake-kata", Caps: node.Caps{Pool: true, Freeze: true, Capture: true, RootLayer: true}}

func TestDefaultClassRecordedByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{})
	if got := e.Get(sb.ID).Spec.Runtime; got != memnode.FakeRunc.Name {
		t.Fatalf("a create without a runtime recorded %q, want the default's name %q", got, memnode.FakeRunc.Name)
	}
	if s, _ := e.Node.Get(sb.ID); s.Class != memnode.FakeRunc.Name {
		t.Fatalf("provisioned as %q", s.Class)
	}
}

// A daemon restarted with another default keeps each sandbox on its own
// class: it restarts on it, and its capabilities are its class's.
func TestRestartWithAnotherDefaultKeepsClasses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runc := e.Create(engine.CreateRequest{Persistent: true})
	e.StopEngine()
	e.Node.SetDefault(memnode.FakeRunsc.Name)
	e.Start()
	if got := e.Engine.DefaultRuntime(); got != memnode.FakeRunsc.Name {
		t.Fatalf("default %q", got)
	}
	sb := e.WaitState(runc.ID, sandbox.StateRunning)
	if sb.Spec.Runtime != memnode.FakeRunc.Name {
		t.Fatalf("after the restart the record says %q", sb.Spec.Runtime)
	}
	if iso := e.Engine.Isolation(sb); iso.Runtime != memnode.FakeRunc.Name {
		t.Fatalf("isolation names %q", iso.Runtime)
	}
	// fake-runsc, the default now, could hibernate; this sandbox's class
	// cannot.
	_, err := e.Engine.Hibernate(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	if !strings.Contains(errdefs.Message(err), memnode.FakeRunc.Name) {
		t.Fatalf("refusal %q does not name the sandbox's class", errdefs.Message(err))
	}
	_, err = e.Engine.Stop(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	_, err = e.Engine.Start(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if s, _ := e.Node.Get(sb.ID); s.Class != memnode.FakeRunc.Name {
		t.Fatalf("restarted on class %q", s.Class)
	}
	// A new sandbox gets the new default, by name.
	if n := e.Create(engine.CreateRequest{}); n.Spec.Runtime != memnode.FakeRunsc.Name {
		t.Fatalf("new sandbox on %q", n.Spec.Runtime)
	}
}

func TestEgressRefusedWhenDefaultLacksIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakeRunsc, memnode.FakeRunc))
	_, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Network: "egress"}, engine.CreateOptions{})
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	if !strings.Contains(errdefs.Message(err), memnode.FakeRunsc.Name) {
		t.Fatalf("refusal %q does not name the class", errdefs.Message(err))
	}
	if ids := e.Live(); len(ids) != 0 {
		t.Fatalf("refused create left %v", ids)
	}
	sb := e.Create(engine.CreateRequest{Network: "egress", Runtime: memnode.FakeRunc.Name})
	if sb.Spec.IPv4 == "" {
		t.Fatal("egress sandbox without an address")
	}
}

// A create naming a class other than the default never gets a pool
// member (members are made in the default class).
func TestNonDefaultCreateNeverClaimsDefaultPoolMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakeRunc, fakeKata, memnode.FakeRunsc))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	member := e.WaitPoolMember()
	if member.Spec.Runtime != memnode.FakeRunc.Name {
		t.Fatalf("member made in %q", member.Spec.Runtime)
	}
	for _, class := range []string{fakeKata.Name, memnode.FakeRunsc.Name} {
		sb := e.Create(engine.CreateRequest{Runtime: class})
		if sb.ID == member.ID || sb.Spec.Runtime != class {
			t.Fatalf("a %s create got the %s pool member", class, member.Spec.Runtime)
		}
		if s, _ := e.Node.Get(sb.ID); s.Class != class {
			t.Fatalf("provisioned as %q, want %q", s.Class, class)
		}
	}
	if got := e.Get(member.ID); got.State != sandbox.StatePaused || got.Spec.Pool != "base" {
		t.Fatalf("member %s pool %q", got.State, got.Spec.Pool)
	}
	// Naming the default's class is the default: it may claim.
	if sb := e.Create(engine.CreateRequest{Runtime: memnode.FakeRunc.Name}); sb.ID != member.ID {
		t.Fatalf("a create naming the default class did not claim its member")
	}
}

// After a restart with another pool-capable default, members made in the
// old default are not handed to creates of the new one.
func TestPoolMembersOfAnOldDefaultAreNotClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakeRunc, fakeKata))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	old := e.WaitPoolMember()
	e.StopEngine()
	e.Node.SetDefault(fakeKata.Name)
	e.Start()
	for range 3 {
		sb := e.Create(engine.CreateRequest{})
		if sb.ID == old.ID || sb.Spec.Runtime != fakeKata.Name {
			t.Fatalf("create on the new default got %s (%s); the old default's member is %s", sb.ID, sb.Spec.Runtime, old.ID)
		}
	}
	if got := e.Get(old.ID); got.Spec.Runtime != memnode.FakeRunc.Name {
		t.Fatalf("old member now %q", got.Spec.Runtime)
	}
	// Pool members made since are the new default's.
	for _, sb := range listPool(e) {
		if sb.ID != old.ID && sb.Spec.Runtime != fakeKata.Name {
			t.Fatalf("member %s made in %q after the restart", sb.ID, sb.Spec.Runtime)
		}
	}
}

func listPool(e *env) []*sandbox.Sandbox {
	sbs, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	enginetest.Must(e.T, err)
	return slices.DeleteFunc(sbs, func(sb *sandbox.Sandbox) bool { return sb.Spec.Pool == "" })
}

// fakePod is a class that cannot freeze processes (a Kubernetes pod).
var fakePod = node.Class{Name: "fake-pod", Caps: node.Caps{PortsViaAgent: true}}

// On a class that cannot freeze, pausing a persistent sandbox stops it
// (files kept, the record says stopped, its event says why); an ephemeral
// one cannot be paused (501) and cannot be made to pause when idle (400).
func TestPauseIsStopWhereClassCannotFreeze(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(fakePod))
	// In the workspace: a persistent sandbox's root layer goes with a stop
	// (unless persist_root), on the double as on a real node.
	sb := e.Create(engine.CreateRequest{Persistent: true})
	e.WriteFile(sb.ID, "/workspace/kept", "x")
	got, err := e.Engine.Pause(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if got.State != sandbox.StateStopped {
		t.Fatalf("pause on %s left the sandbox %s; want stopped", fakePod.Name, got.State)
	}
	evs, _, err := e.Engine.Events(e.Ctx, sb.ID, 0, store.Page{})
	enginetest.Must(t, err)
	if last := evs[len(evs)-1]; last.To != sandbox.StateStopped || !strings.Contains(last.Reason, "cannot freeze") {
		t.Fatalf("last event %+v: want a stop saying the class cannot freeze", last)
	}
	if _, err := e.Engine.Start(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(sb.ID, sandbox.StateRunning)
	if b, err := e.ReadFile(sb.ID, "/workspace/kept"); err != nil || b != "x" {
		t.Fatalf("file after pause-as-stop and start: %q %v", b, err)
	}

	eph := e.Create(engine.CreateRequest{})
	_, err = e.Engine.Pause(e.Ctx, eph.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrNotSupported)
	if g := e.Get(eph.ID); g.State != sandbox.StateRunning {
		t.Fatalf("a refused pause changed the sandbox to %s", g.State)
	}
	_, err = e.Engine.Create(e.Ctx, &engine.CreateRequest{Policy: sandbox.Policy{IdleTimeout: time.Minute}}, engine.CreateOptions{Actor: "test"})
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	// Stopping when idle is fine.
	e.Create(engine.CreateRequest{Policy: sandbox.Policy{IdleTimeout: time.Minute, OnIdle: sandbox.ActionStop}})
}

// A class whose root layer goes with its pod (Caps.RootLayer false)
// refuses persist_root at create, before anything is made, and says why;
// the same request on a class with a root layer of its own is made.
func TestPersistRootNeedsRootLayer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(fakePod, fakeKata))
	before, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	enginetest.Must(t, err)
	_, err = e.Engine.Create(e.Ctx, &engine.CreateRequest{Runtime: fakePod.Name, Persistent: true, PersistRoot: true}, engine.CreateOptions{Actor: "test"})
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	if !strings.Contains(err.Error(), "persist_root") || !strings.Contains(err.Error(), fakePod.Name) {
		t.Fatalf("refusal %q does not name persist_root and the class", err)
	}
	after, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	enginetest.Must(t, err)
	if len(after) != len(before) {
		t.Fatalf("a refused create left a record: %d sandboxes before, %d after", len(before), len(after))
	}
	e.Create(engine.CreateRequest{Runtime: fakeKata.Name, Persistent: true, PersistRoot: true})
}

// A create asking for sudo is refused on a class without it, and leaves
// nothing; the E2B door's "where offered" leaves it out there and gives
// it where the class has it; the spec records which.
func TestSudoNeedsTheClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(fakePod, memnode.FakeRunc))
	before, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	enginetest.Must(t, err)
	_, err = e.Engine.Create(e.Ctx, &engine.CreateRequest{Runtime: fakePod.Name, Sudo: true}, engine.CreateOptions{Actor: "test"})
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	if !strings.Contains(err.Error(), "sudo") || !strings.Contains(err.Error(), fakePod.Name) {
		t.Fatalf("refusal %q does not name sudo and the class", err)
	}
	after, _, err := e.Engine.List(e.Ctx, false, store.Page{})
	enginetest.Must(t, err)
	if len(after) != len(before) {
		t.Fatalf("a refused create left a record: %d sandboxes before, %d after", len(before), len(after))
	}
	if sb := e.Create(engine.CreateRequest{Runtime: fakePod.Name, SudoWhereOffered: true}); sb.Spec.Sudo {
		t.Errorf("sudo where offered, on a class without it: the spec says sudo")
	}
	if sb := e.Create(engine.CreateRequest{Runtime: memnode.FakeRunc.Name, SudoWhereOffered: true}); !sb.Spec.Sudo {
		t.Errorf("sudo where offered, on a class with it: the spec says no sudo")
	}
	if sb := e.Create(engine.CreateRequest{Runtime: memnode.FakeRunc.Name, Sudo: true}); !sb.Spec.Sudo {
		t.Errorf("sudo asked on a class with it: the spec says no sudo")
	}
	if sb := e.Create(engine.CreateRequest{Runtime: memnode.FakeRunc.Name}); sb.Spec.Sudo {
		t.Errorf("a create that did not ask has sudo")
	}
}

// A create with sudo never gets a pool member: members are started
// without it, and sudo is fixed at container start.
func TestSudoCreateNeverClaimsPoolMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakeRunc))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	member := e.WaitPoolMember()
	for _, req := range []engine.CreateRequest{{Sudo: true}, {SudoWhereOffered: true}} {
		if sb := e.Create(req); sb.ID == member.ID || !sb.Spec.Sudo {
			t.Fatalf("a create with sudo (%+v) got the pool member, or no sudo", req)
		}
	}
	if sb := e.Create(engine.CreateRequest{}); sb.ID != member.ID {
		t.Fatalf("a create without sudo did not claim the member")
	}
}
