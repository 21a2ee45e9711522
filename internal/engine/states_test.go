package engine_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Every transition of the state machine the API reaches, with what the
// node sees after each.

func TestCreateRunsAndRecordsEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Name: "one"})
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	if got := e.Get(sb.ID); got.State != sandbox.StateRunning || got.StartedAt.IsZero() || got.Spec.IDs == nil {
		t.Fatalf("record %+v: want running, started, with a host id range", got)
	}
	if s, _ := e.Node.Get(sb.ID); s.Hostname != "one" {
		t.Fatalf("host name %q, want one", s.Hostname)
	}
	if got, want := e.StateEvents(sb.ID), []string{">creating", "creating>running"}; !slices.Equal(got, want) {
		t.Fatalf("state events %v, want %v", got, want)
	}
	exit, out, err := e.Exec(sb.ID, "sh", "-c", "echo hello; exit 3")
	if err != nil || exit.Code != 3 || strings.TrimSpace(out) != "hello" {
		t.Fatalf("exec: %+v %q %v", exit, out, err)
	}
	e.WriteFile(sb.ID, "/greeting", "hi")
	if got, err := e.ReadFile(sb.ID, "/greeting"); err != nil || got != "hi" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if got, err := e.Engine.Get(e.Ctx, "one"); err != nil || got.ID != sb.ID {
		t.Fatalf("get by name: %v, %v", got, err)
	}
	e.Healthy()
}

func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, req := range map[string]engine.CreateRequest{
		"bad name":         {Name: "-x"},
		"unknown runtime":  {Runtime: "nope"},
		"unknown tpl":      {Template: "nope"},
		"allow, no egress": {Allow: []string{"example.com"}},
	} {
		_, err := e.Engine.Create(e.Ctx, &req, engine.CreateOptions{})
		if err == nil {
			t.Errorf("%s: created", name)
		}
	}
	if ids := e.Live(); len(ids) != 0 {
		t.Fatalf("refused creates left sandboxes %v", ids)
	}
	e.Create(engine.CreateRequest{Name: "dup"})
	_, err := e.Engine.Create(e.Ctx, &engine.CreateRequest{Name: "dup"}, engine.CreateOptions{})
	enginetest.WantErr(t, err, errdefs.ErrConflict)
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{})
	if _, err := e.Engine.Pause(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.WantNodeStatus(sb.ID, node.StatusPaused)
	if got := e.Get(sb.ID); got.State != sandbox.StatePaused || got.PausedAt.IsZero() {
		t.Fatalf("record %s, paused at %v", got.State, got.PausedAt)
	}
	_, err := e.Engine.Pause(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	_, _, err = e.Exec(sb.ID, "true") // no auto_resume
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	if _, err := e.Engine.Resume(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	e.WaitState(sb.ID, sandbox.StateRunning)
	_, err = e.Engine.Resume(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	if exit, _, err := e.Exec(sb.ID, "true"); err != nil || exit.Code != 0 {
		t.Fatalf("exec after resume: %+v %v", exit, err)
	}
}

func TestStopStart(t *testing.T) {
	t.Parallel()
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "ephemeral", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// The workspace: what of a persistent sandbox a stop keeps
			// (its root layer too only with persist_root).
			sb := e.Create(engine.CreateRequest{Persistent: persistent})
			e.WriteFile(sb.ID, "/workspace/kept", "x")
			if _, err := e.Engine.Stop(e.Ctx, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			e.WantNodeStatus(sb.ID, node.StatusStopped)
			if got := e.Get(sb.ID); got.State != sandbox.StateStopped || got.StoppedAt.IsZero() {
				t.Fatalf("record %s stopped at %v", got.State, got.StoppedAt)
			}
			_, err := e.Engine.Stop(e.Ctx, sb.ID, "test")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
			_, err = e.Engine.Pause(e.Ctx, sb.ID, "test")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
			if _, err := e.Engine.Start(e.Ctx, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			e.WantNodeStatus(sb.ID, node.StatusRunning)
			_, err = e.Engine.Start(e.Ctx, sb.ID, "test")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
			got, err := e.ReadFile(sb.ID, "/workspace/kept")
			if persistent && got != "x" {
				t.Fatalf("persistent sandbox lost its files across stop: %q, %v", got, err)
			}
			if !persistent && err == nil {
				t.Fatalf("ephemeral sandbox kept its writable layer across stop: %q", got)
			}
			want := []string{">creating", "creating>running", "running>stopping", "stopping>stopped",
				"stopped>starting", "starting>running"}
			if got := e.StateEvents(sb.ID); !slices.Equal(got, want) {
				t.Fatalf("state events %v, want %v", got, want)
			}
			e.Healthy()
		})
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Persistent: true})
	e.WriteFile(sb.ID, "/scratch", "x")
	if _, err := e.Engine.Reset(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(sb.ID, sandbox.StateRunning)
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	if _, err := e.ReadFile(sb.ID, "/scratch"); err == nil {
		t.Fatal("reset kept the files")
	}
	// A stopped sandbox is reset in place and stays stopped.
	e.WriteFile(sb.ID, "/scratch", "y")
	if _, err := e.Engine.Stop(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	mark := e.Mark(sb.ID)
	if _, err := e.Engine.Reset(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(sb.ID, sandbox.StateStopped)
	if got := e.CallsAfter(sb.ID, mark, "Wipe", "Provision"); !slices.Equal(got, []string{"Wipe"}) {
		t.Fatalf("reset of a stopped sandbox called %v, want [Wipe]", got)
	}
	// Quarantined: refused.
	if _, err := e.Engine.Quarantine(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := e.Engine.Reset(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
}

// Quarantine from each state it may be entered from, and release back to
// it; the node's processes and rules follow.
func TestQuarantineRelease(t *testing.T) {
	t.Parallel()
	for _, from := range []sandbox.State{sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped} {
		t.Run(string(from), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			sb := e.Create(engine.CreateRequest{Network: "egress", Allow: []string{"example.com"}, Persistent: true})
			e.WriteFile(sb.ID, "/workspace/evidence", "kept") // kept by a stop
			switch from {
			case sandbox.StatePaused:
				_, err := e.Engine.Pause(e.Ctx, sb.ID, "test")
				enginetest.Must(t, err)
			case sandbox.StateStopped:
				_, err := e.Engine.Stop(e.Ctx, sb.ID, "test")
				enginetest.Must(t, err)
			}
			before := e.NodeStatus(sb.ID)
			q, err := e.Engine.Quarantine(e.Ctx, sb.ID, "admin")
			enginetest.Must(t, err)
			if q.State != sandbox.StateQuarantined || q.PrevState != from {
				t.Fatalf("quarantined record %s prev %s", q.State, q.PrevState)
			}
			if s, _ := e.Node.Get(sb.ID); !s.RulesCut {
				t.Fatal("quarantine left the network up")
			}
			if from == sandbox.StateRunning {
				e.WantNodeStatus(sb.ID, node.StatusPaused)
			} else {
				e.WantNodeStatus(sb.ID, before)
			}
			// Reads are served; exec and writes are refused.
			if got, err := e.ReadFile(sb.ID, "/workspace/evidence"); err != nil || got != "kept" {
				t.Fatalf("reading a quarantined sandbox: %q, %v", got, err)
			}
			_, _, err = e.Exec(sb.ID, "true")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
			_, err = e.Engine.Files(e.Ctx, sb.ID, true, "test")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
			for name, op := range map[string]func(string, string) (*sandbox.Sandbox, error){
				"pause": func(r, a string) (*sandbox.Sandbox, error) { return e.Engine.Pause(e.Ctx, r, a) },
				"stop":  func(r, a string) (*sandbox.Sandbox, error) { return e.Engine.Stop(e.Ctx, r, a) },
				"start": func(r, a string) (*sandbox.Sandbox, error) { return e.Engine.Start(e.Ctx, r, a) },
				"quarantine": func(r, a string) (*sandbox.Sandbox, error) {
					return e.Engine.Quarantine(e.Ctx, r, a)
				},
			} {
				if _, err := op(sb.ID, "test"); !errorsIsConflict(err) {
					t.Errorf("%s of a quarantined sandbox: %v, want a conflict", name, err)
				}
			}
			mark := e.Mark(sb.ID)
			r, err := e.Engine.Release(e.Ctx, sb.ID, "admin")
			enginetest.Must(t, err)
			if r.State != from || r.PrevState != "" {
				t.Fatalf("released record %s prev %q, want %s", r.State, r.PrevState, from)
			}
			e.WantNodeStatus(sb.ID, before)
			if s, _ := e.Node.Get(sb.ID); s.RulesCut || !slices.Equal(s.Rules, []string{"example.com"}) {
				t.Fatalf("after release rules cut=%v %v", s.RulesCut, s.Rules)
			}
			want := []string{"SetRules:apply"}
			if from == sandbox.StateRunning {
				want = append(want, "Thaw")
			}
			if got := e.CallsAfter(sb.ID, mark, "SetRules", "Thaw", "Freeze"); !slices.Equal(got, want) {
				t.Fatalf("release called %v, want %v", got, want)
			}
			_, err = e.Engine.Release(e.Ctx, sb.ID, "admin")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
		})
	}
}

func TestDeleteFromEachState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	setups := map[string]func(id string){
		"running": func(string) {},
		"paused":  func(id string) { _, err := e.Engine.Pause(e.Ctx, id, "test"); enginetest.Must(t, err) },
		"stopped": func(id string) { _, err := e.Engine.Stop(e.Ctx, id, "test"); enginetest.Must(t, err) },
		"quarantined": func(id string) {
			_, err := e.Engine.Quarantine(e.Ctx, id, "test")
			enginetest.Must(t, err)
		},
		"quarantined-stopped": func(id string) {
			_, err := e.Engine.Stop(e.Ctx, id, "test")
			enginetest.Must(t, err)
			_, err = e.Engine.Quarantine(e.Ctx, id, "test")
			enginetest.Must(t, err)
		},
		"hibernated": func(id string) { _, err := e.Engine.Hibernate(e.Ctx, id, "test"); enginetest.Must(t, err) },
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			req := engine.CreateRequest{Persistent: true}
			if name == "hibernated" {
				req.Runtime = memnode.FakeRunsc.Name
			}
			sb := e.Create(req)
			vol := sb.Spec.Volumes[0].VolumeID
			setup(sb.ID)
			del, err := e.Engine.Delete(e.Ctx, sb.ID, "test", sandbox.CauseUser, "deleted by user")
			enginetest.Must(t, err)
			if del.State != sandbox.StateDeleted || del.DeletedAt.IsZero() {
				t.Fatalf("after delete: %s at %v", del.State, del.DeletedAt)
			}
			if _, ok := e.Node.Get(sb.ID); ok {
				t.Fatal("the node still holds the deleted sandbox")
			}
			if slices.Contains(e.Node.Volumes(), vol) {
				t.Fatal("the owned workspace volume was not deleted")
			}
			// Deleting a tombstone returns it.
			again, err := e.Engine.Delete(e.Ctx, sb.ID, "test", sandbox.CauseUser, "again")
			if err != nil || again.State != sandbox.StateDeleted {
				t.Fatalf("second delete: %v, %v", again, err)
			}
			_, err = e.Engine.Start(e.Ctx, sb.ID, "test")
			enginetest.WantErr(t, err, errdefs.ErrConflict)
		})
	}
	slots, err := e.Store.ListIDSlots(e.Ctx, "")
	enginetest.Must(t, err)
	if len(slots) != 0 {
		t.Fatalf("id slots still held: %v", slots)
	}
	e.Healthy()
}

func TestHibernateWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Runtime: memnode.FakeRunsc.Name})
	e.WriteFile(sb.ID, "/state", "in memory")
	h, err := e.Engine.Hibernate(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if h.State != sandbox.StateStopped || h.Reason != engine.ReasonHibernated || !e.Engine.Host().Hibernated(h) {
		t.Fatalf("hibernated record %s %q hibernated=%v", h.State, h.Reason, e.Engine.Host().Hibernated(h))
	}
	e.WantNodeStatus(sb.ID, node.StatusStopped)
	w, err := e.Engine.Wake(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if w.State != sandbox.StateRunning || e.Engine.Host().Hibernated(w) {
		t.Fatalf("woken record %s", w.State)
	}
	if got, err := e.ReadFile(sb.ID, "/state"); err != nil || got != "in memory" {
		t.Fatalf("after wake: %q, %v", got, err)
	}
	// Paused → hibernate; start of a hibernated sandbox wakes it.
	_, err = e.Engine.Pause(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	_, err = e.Engine.Hibernate(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	mark := e.Mark(sb.ID)
	s, err := e.Engine.Start(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if s.State != sandbox.StateRunning {
		t.Fatalf("start of a hibernated sandbox: %s", s.State)
	}
	if got := e.CallsAfter(sb.ID, mark, "Restore", "Provision"); !slices.Equal(got, []string{"Restore"}) {
		t.Fatalf("start of a hibernated sandbox called %v, want [Restore]", got)
	}
	// Wake of a plainly stopped one is refused, naming start.
	_, err = e.Engine.Stop(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	_, err = e.Engine.Wake(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	if !strings.Contains(errdefs.Message(err), "use start") {
		t.Fatalf("wake of a stopped sandbox: %v", err)
	}
}

func TestHibernateRefusedWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{}) // fake-runc: no Checkpoint
	mark := e.Mark(sb.ID)
	_, err := e.Engine.Hibernate(e.Ctx, sb.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	if got := e.CallsAfter(sb.ID, mark, "Checkpoint", "Stop"); len(got) != 0 {
		t.Fatalf("a refused hibernate called %v", got)
	}
	e.WaitState(sb.ID, sandbox.StateRunning)
	e.WantNodeStatus(sb.ID, node.StatusRunning)
}

func TestAutoResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{AutoResume: true}})
	_, err := e.Engine.Pause(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if exit, _, err := e.Exec(sb.ID, "true"); err != nil || exit.Code != 0 {
		t.Fatalf("exec on a paused auto_resume sandbox: %+v %v", exit, err)
	}
	e.WaitState(sb.ID, sandbox.StateRunning)
	_, err = e.Engine.Stop(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	e.writeFileAuto(sb.ID)
	e.WaitState(sb.ID, sandbox.StateRunning)
	e.WantNodeStatus(sb.ID, node.StatusRunning)
}

func (e *env) writeFileAuto(id string) {
	e.T.Helper()
	e.WriteFile(id, "/auto", "started for this")
}

func TestTouch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{})
	e.Clock.Advance(42 * time.Second)
	got, err := e.Engine.Touch(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	if !got.LastActivityAt.Equal(e.Clock.Now()) {
		t.Fatalf("last activity %v, want %v", got.LastActivityAt, e.Clock.Now())
	}
}

func TestDialPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{})
	e.Node.Listen(sb.ID, 8080, func(c net.Conn) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	})
	c, got, err := e.Engine.DialPort(e.Ctx, sb.ID, 8080)
	enginetest.Must(t, err)
	if got.ID != sb.ID {
		t.Fatalf("dialled %s", got.ID)
	}
	io.WriteString(c, "ping\n")
	reply, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if reply != "echo ping\n" {
		t.Fatalf("reply %q", reply)
	}
	_, _, err = e.Engine.DialPort(e.Ctx, sb.ID, 9)
	enginetest.WantErr(t, err, errdefs.ErrUnreachable)
	_, _, err = e.Engine.DialPort(e.Ctx, sb.ID, 0)
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	_, err = e.Engine.Pause(e.Ctx, sb.ID, "test")
	enginetest.Must(t, err)
	_, _, err = e.Engine.DialPort(e.Ctx, sb.ID, 8080)
	enginetest.WantErr(t, err, errdefs.ErrConflict)
}

func TestUpdateNetworkRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Network: "egress", Allow: []string{"a.example"}})
	rules, err := e.Engine.UpdateNetworkRules(e.Ctx, sb.ID, &netrules.Request{
		Allow: []string{"B.example", "A.EXAMPLE"}, Deny: []string{"a.example"}}, "test")
	enginetest.Must(t, err)
	if !slices.Equal(rules.Allow, []string{"B.example"}) || rules.IPv4 == "" {
		t.Fatalf("rules %+v", rules)
	}
	if s, _ := e.Node.Get(sb.ID); !slices.Equal(s.Rules, []string{"B.example"}) {
		t.Fatalf("node applied %v", s.Rules)
	}
	// The rules' grammar is the real one (package egressrule), not the
	// double's: a rule that does not parse.
	_, err = e.Engine.UpdateNetworkRules(e.Ctx, sb.ID, &netrules.Request{Allow: []string{"not a rule!"}}, "test")
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	if got := e.Get(sb.ID).Spec.Allow; !slices.Equal(got, []string{"B.example"}) {
		t.Fatalf("a refused update changed the record: %v", got)
	}
	// Replace (the E2B door's updateNetwork): the list becomes Allow,
	// deduplicated, the rules before gone; empty is deny all.
	rules, err = e.Engine.UpdateNetworkRules(e.Ctx, sb.ID, &netrules.Request{
		Allow: []string{"c.example", "C.EXAMPLE", "10.0.0.0/8"}, Replace: true}, "test")
	enginetest.Must(t, err)
	if !slices.Equal(rules.Allow, []string{"c.example", "10.0.0.0/8"}) {
		t.Fatalf("replaced rules %+v", rules)
	}
	if s, _ := e.Node.Get(sb.ID); !slices.Equal(s.Rules, rules.Allow) {
		t.Fatalf("node applied %v", s.Rules)
	}
	rules, err = e.Engine.UpdateNetworkRules(e.Ctx, sb.ID, &netrules.Request{Replace: true}, "test")
	enginetest.Must(t, err)
	if len(rules.Allow) != 0 {
		t.Fatalf("replaced by nothing: %+v", rules)
	}
	none := e.Create(engine.CreateRequest{})
	_, err = e.Engine.UpdateNetworkRules(e.Ctx, none.ID, &netrules.Request{Allow: []string{"x"}}, "test")
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
}

func TestForkAndSnapshots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parent := e.Create(engine.CreateRequest{Persistent: true})
	e.WriteFile(parent.ID, "/data", "v1")
	kids, _, err := e.Engine.Fork(e.Ctx, parent.ID, &snapshots.ForkRequest{Count: 2, NamePrefix: "kid"}, "test")
	enginetest.Must(t, err)
	if len(kids) != 2 {
		t.Fatalf("%d children", len(kids))
	}
	for _, k := range kids {
		if k.Spec.Parent != parent.ID || k.State != sandbox.StateRunning {
			t.Fatalf("child %+v", k)
		}
		if got, err := e.ReadFile(k.ID, "/data"); err != nil || got != "v1" {
			t.Fatalf("child %s sees %q, %v", k.ID, got, err)
		}
	}
	if c := e.Node.Captures(); len(c) != 0 {
		t.Fatalf("fork left captures %v", c)
	}
	e.WantNodeStatus(parent.ID, node.StatusRunning)

	sn, err := e.Engine.CreateSnapshot(e.Ctx, parent.ID, &snapshots.SnapshotRequest{Name: "snap"}, "test")
	enginetest.Must(t, err)
	e.WriteFile(parent.ID, "/data", "v2")
	r, err := e.Engine.RestoreSnapshot(e.Ctx, "snap", "test")
	enginetest.Must(t, err)
	if r.State != sandbox.StateRunning {
		t.Fatalf("restored sandbox %s", r.State)
	}
	if got, _ := e.ReadFile(parent.ID, "/data"); got != "v1" {
		t.Fatalf("after restore %q", got)
	}
	from := e.Create(engine.CreateRequest{Snapshot: sn.ID})
	if got, _ := e.ReadFile(from.ID, "/data"); got != "v1" || from.Spec.FromSnapshot != sn.ID {
		t.Fatalf("from snapshot: %q, from %q", got, from.Spec.FromSnapshot)
	}
	e.Healthy()
	enginetest.Must(t, e.Engine.DeleteSnapshot(e.Ctx, sn.ID))
	if c := e.Node.Captures(); len(c) != 0 {
		t.Fatalf("deleted snapshot left captures %v", c)
	}
}

func TestDoctorFindsAndFixesOrphans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{})
	// A node-side sandbox no record accounts for: provisioned behind the
	// engine's back.
	orphan := &sandbox.Sandbox{ID: "orphan0000000000", Spec: sandbox.Spec{Layers: []string{enginetest.Layer}}}
	enginetest.Must(t, e.Node.Provision(e.Ctx, orphan))
	rep, err := e.Engine.Doctor(e.Ctx, false)
	enginetest.Must(t, err)
	if rep.Healthy || len(rep.Findings) != 1 || rep.Findings[0].ID != orphan.ID {
		t.Fatalf("doctor: %+v", rep)
	}
	rep, err = e.Engine.Doctor(e.Ctx, true)
	enginetest.Must(t, err)
	if !rep.Healthy || !rep.Findings[0].Fixed {
		t.Fatalf("doctor --fix: %+v", rep)
	}
	if _, ok := e.Node.Get(orphan.ID); ok {
		t.Fatal("the orphan is still there")
	}
	e.WantNodeStatus(sb.ID, node.StatusRunning)
	e.Healthy()
}

func errorsIsConflict(err error) bool { return errors.Is(err, errdefs.ErrConflict) }
