package pools_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/store"
)

// newLayer is the base template's layer after a change.
const newLayer = "sha256:0000000000000000000000000000000000000000000000000000000000000002"

// readyRunning waits until template base's pool holds n members that are
// running (the class cannot freeze them) on layers, none of skip, and no
// member is being made (its maker may still hold a running member's lock,
// and a claim passes a locked member by), and returns them.
func (e *env) readyRunning(n int, layers []string, skip ...string) []*sandbox.Sandbox {
	e.T.Helper()
	var ms []*sandbox.Sandbox
	if !enginetest.Poll(func() bool {
		ms = ms[:0]
		for _, sb := range e.PoolMembersOf("", "base") {
			if sb.State == sandbox.StateRunning && slices.Equal(sb.Spec.Layers, layers) && !slices.Contains(skip, sb.ID) {
				ms = append(ms, sb)
			}
		}
		p, err := e.Engine.Pool(e.Ctx, "base")
		enginetest.Must(e.T, err)
		return len(ms) == n && p.Starting == 0
	}) {
		e.T.Fatalf("pool has %d running members on %v, want %d", len(ms), layers, n)
	}
	return ms
}

// TestPoolWithoutFreeze: on a class that can keep pool members but can
// neither freeze nor rename them (memnode.FakePod, as a Kubernetes pod),
// members wait running and are reported ready; a create without a name
// claims one as it is (no freeze, thaw or rename on the node; a state
// event running -> running; the claimant's env, secret env and secret
// files reach it); a create with a name is made cold (the member's host
// name cannot become the name); the pool refills, rolls members over to
// a changed template, and sized 0 leaves nothing on the node.
func TestPoolWithoutFreeze(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakePod))
	k, _ := secrets.NewKey()
	kr, _ := secrets.NewKeyring(k)
	v := vault.New(e.Store, kr)
	e.Engine.SetSecrets(v)
	if _, _, err := v.Put(e.Ctx, "t1", "TOKEN", []byte("tok-51c2")); err != nil {
		t.Fatal(err)
	}

	_, err := e.Engine.SetPool(e.Ctx, "base", 2)
	enginetest.Must(t, err)
	members := e.readyRunning(2, []string{enginetest.Layer})
	ids := []string{members[0].ID, members[1].ID}
	// No reconciler round turns them into anything else.
	time.Sleep(200 * time.Millisecond)
	for _, id := range ids {
		if got := e.Get(id); got.State != sandbox.StateRunning || got.Spec.Pool != "base" {
			t.Fatalf("member %s became %s (pool %q)", id, got.State, got.Spec.Pool)
		}
		e.WantNodeStatus(id, node.StatusRunning)
		if calls := e.Node.Methods(id, "Freeze", "Thaw", "SetHostname"); len(calls) != 0 {
			t.Fatalf("member %s: node calls %v on a class that cannot freeze or rename", id, calls)
		}
	}
	p, err := e.Engine.Pool(e.Ctx, "base")
	if err != nil || p.Ready != 2 || p.Starting != 0 {
		t.Fatalf("pool %+v %v: want 2 ready, none starting", p, err)
	}

	// A named create cannot be given its name as hostname: made cold,
	// the members untouched, no miss counted (it was never the pool's).
	named := e.Create(engine.CreateRequest{Name: "named"})
	if slices.Contains(ids, named.ID) {
		t.Fatalf("a named create claimed member %s, whose host name cannot change", named.ID)
	}
	if s, _ := e.Node.Get(named.ID); s.Hostname != "named" {
		t.Fatalf("the cold named sandbox's host name %q", s.Hostname)
	}

	// An unnamed create claims a member as it runs.
	marks := map[string]int{ids[0]: e.Mark(ids[0]), ids[1]: e.Mark(ids[1])}
	sb, err := e.CreateAs("t1", engine.CreateRequest{Env: map[string]string{"K": "v"},
		Secrets: []sandbox.SecretRef{{Name: "TOKEN", Env: "GH_TOKEN"}, {Name: "TOKEN", File: "/run/secrets/tok"}}})
	enginetest.Must(t, err)
	if !slices.Contains(ids, sb.ID) || sb.State != sandbox.StateRunning || sb.Spec.Pool != "" || sb.Tenant != "t1" {
		t.Fatalf("unnamed create = %s %s pool %q tenant %q; want a claimed member of %v", sb.ID, sb.State, sb.Spec.Pool, sb.Tenant, ids)
	}
	if calls := e.CallsAfter(sb.ID, marks[sb.ID], "Freeze", "Thaw", "SetHostname", "Provision", "Stop", "Remove"); len(calls) != 0 {
		t.Fatalf("the claim made node calls %v; want none (the member is taken as it runs)", calls)
	}
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	if s, _ := e.Node.Get(sb.ID); s.Hostname != sb.Hostname() || !strings.HasPrefix(s.Hostname, "sb-") {
		t.Fatalf("claimed host name %q, record says %q", s.Hostname, sb.Hostname())
	}
	if _, out, err := e.Exec(sb.ID, "sh", "-c", `printf '%s/%s' "$K" "$GH_TOKEN"`); err != nil || out != "v/tok-51c2" {
		t.Fatalf("the claimant's env and secret in an exec: %q %v", out, err)
	}
	// The secret files are written by the transition-to-running hook,
	// which runs behind the create: its event may come a moment later.
	var evs []*sandbox.Event
	var handover, secretFiles bool
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, _, err = e.Store.ListEvents(e.Ctx, store.AnyOwner, sb.ID, 0, store.Page{})
		enginetest.Must(t, err)
		handover, secretFiles = false, false
		for _, ev := range evs {
			if ev.Type == "state" && ev.From == sandbox.StateRunning && ev.To == sandbox.StateRunning && ev.Reason == "create (warm pool)" && ev.Cause == sandbox.CauseUser {
				handover = true
			}
			// memnode's /run/secrets is no tmpfs, so the agent refuses the
			// write; the event says the claim asked for it.
			if ev.Type == "secrets" && strings.HasPrefix(ev.Message, "running") {
				secretFiles = true
			}
		}
		if handover && secretFiles || time.Now().After(deadline) {
			break
		}
	}
	if !handover || !secretFiles {
		t.Fatalf("events of the claim (handover %v, secret files written %v): %+v", handover, secretFiles, evs)
	}
	if p, _ := e.Engine.Pool(e.Ctx, "base"); p.Hits != 1 {
		t.Fatalf("pool after the claim: %+v", p)
	}

	// Refilled to two running members.
	rest := e.readyRunning(2, []string{enginetest.Layer}, sb.ID)

	// A changed template rolls the running members over.
	enginetest.Must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Name: "base", Layers: []string{newLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	e.Engine.Host().WakeReconciler()
	e.readyRunning(2, []string{newLayer})
	for _, old := range rest {
		e.WaitState(old.ID, sandbox.StateDeleted)
		if _, ok := e.Node.Get(old.ID); ok {
			t.Fatalf("rolled-over member %s is still on the node", old.ID)
		}
	}

	// Size 0: no member is left, on record or on the node; the claimed
	// sandbox and the cold one stay.
	_, err = e.Engine.SetPool(e.Ctx, "base", 0)
	enginetest.Must(t, err)
	if !enginetest.Poll(func() bool { return len(e.PoolMembersOf("", "base")) == 0 }) {
		t.Fatalf("members left after sizing the pool to 0: %d", len(e.PoolMembersOf("", "base")))
	}
	all, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner, IncludeDeleted: true}, store.Page{})
	enginetest.Must(t, err)
	for _, r := range all {
		if _, ok := e.Node.Get(r.ID); ok != (r.ID == sb.ID || r.ID == named.ID) {
			t.Errorf("sandbox %s (%s, pool %q): on the node %v", r.ID, r.State, r.Spec.Pool, ok)
		}
	}
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	e.Healthy()
}

// TestPoolWithoutFreezeClaimRollsBack: a claim of a running member whose
// record cannot be written leaves it in the pool as it was (running,
// unnamed, a member); the create is made cold; the next claims it.
func TestPoolWithoutFreezeClaimRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakePod))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	member := e.readyRunning(1, []string{enginetest.Layer})[0]
	mark := e.Mark(member.ID)
	e.Store.FailUpdate(member.ID, enginetest.ErrInjected)
	sb := e.Create(engine.CreateRequest{Env: map[string]string{"K": "v"}})
	if sb.ID == member.ID {
		t.Fatal("the failed claim handed out the member")
	}
	unused := e.Store.Pending(member.ID)
	if unused != 0 {
		t.Fatal("the create never tried to claim the member (its record's injected failure is unused)")
	}
	got := e.Get(member.ID)
	if got.State != sandbox.StateRunning || got.Spec.Pool != "base" || got.Name != "" || got.Tenant != "" || len(got.Spec.Env) != 0 {
		t.Fatalf("member after a failed claim: %s pool %q name %q tenant %q env %v", got.State, got.Spec.Pool, got.Name, got.Tenant, got.Spec.Env)
	}
	e.WantNodeStatus(member.ID, node.StatusRunning)
	if calls := e.CallsAfter(member.ID, mark, "Freeze", "Thaw", "SetHostname", "Stop", "Remove"); len(calls) != 0 {
		t.Fatalf("the failed claim made node calls %v", calls)
	}
	if next := e.Create(engine.CreateRequest{}); next.ID != member.ID {
		t.Fatalf("next create made %s, not the member %s", next.ID, member.ID)
	}
}

// TestPoolMemberNotIdle: a member kept running has no idle policy (it is
// waiting, not idle), so a template's idle stop never touches it; the
// claimant's own policy applies once claimed.
func TestPoolMemberNotIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithClasses(memnode.FakePod))
	enginetest.Must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Name: "base", Layers: []string{enginetest.Layer}, Source: "test", CreatedAt: e.Clock.Now(),
		Config: store.TemplateConfig{Policy: &sandbox.Policy{IdleTimeout: time.Minute, OnIdle: sandbox.ActionStop}}}))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	member := e.readyRunning(1, []string{enginetest.Layer})[0]
	if member.Spec.Policy.IdleTimeout != 0 {
		t.Fatalf("member's idle timeout %v, want none", member.Spec.Policy.IdleTimeout)
	}
	e.Clock.Advance(10 * time.Minute)
	time.Sleep(200 * time.Millisecond) // ~10 reconciler rounds
	if got := e.Get(member.ID); got.State != sandbox.StateRunning || got.Spec.Pool != "base" {
		t.Fatalf("idle member became %s (%s)", got.State, got.Reason)
	}
	sb := e.Create(engine.CreateRequest{})
	if sb.ID != member.ID || sb.Spec.Policy.IdleTimeout != time.Minute || sb.Spec.Policy.OnIdle != sandbox.ActionStop {
		t.Fatalf("claimed %s with policy %+v; want member %s with the template's idle stop", sb.ID, sb.Spec.Policy, member.ID)
	}
	e.Clock.Advance(2 * time.Minute)
	e.WaitState(sb.ID, sandbox.StateStopped)
}
