package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testProcesses: a supervised process's record is put, read back whole,
// replaced by key (its run of a new boot), listed per sandbox oldest
// first, deleted idempotently, and goes with its sandbox's delete.
func testProcesses(t *testing.T, s store.Store) {
	ctx := t.Context()
	sb := newSandbox("sp1", "", "sp1", sandbox.StateRunning, at(0))
	must(t, s.CreateSandbox(ctx, sb))
	p1 := &store.SupervisedProcess{SandboxID: "sp1", Key: "abc123-1", CreatedAt: at(time.Second),
		Spec: store.ProcessSpec{Cmd: []string{"sh", "-c", "exec server"}, Env: map[string]string{"K": "v=1"},
			Workdir: "/srv", User: "1000:1000", Tag: "web", Restart: "always", MaxRestarts: 5, ReadyPort: 8000},
		Boot: "abc123def", AgentID: "1"}
	must(t, s.PutProcess(ctx, p1))
	must(t, s.PutProcess(ctx, &store.SupervisedProcess{SandboxID: "sp1", Key: "abc123-2", CreatedAt: at(2 * time.Second),
		Spec: store.ProcessSpec{Cmd: []string{"loop"}, Restart: "on-failure"}}))
	must(t, s.PutProcess(ctx, &store.SupervisedProcess{SandboxID: "other", Key: "abc123-1", CreatedAt: at(0),
		Spec: store.ProcessSpec{Cmd: []string{"x"}, Restart: "always"}}))
	wantCategory(t, s.PutProcess(ctx, &store.SupervisedProcess{SandboxID: "sp1", Key: "k"}), errdefs.ErrInvalid)

	list, err := s.ListProcesses(ctx, "sp1")
	must(t, err)
	if len(list) != 2 || list[0].Key != "abc123-1" || list[1].Key != "abc123-2" {
		t.Fatalf("ListProcesses = %+v, want abc123-1, abc123-2", list)
	}
	want := *p1
	want.CreatedAt = stored(p1.CreatedAt)
	if !reflect.DeepEqual(list[0], &want) {
		t.Errorf("read back\n got %+v\nwant %+v", list[0], &want)
	}
	// A new boot's run replaces the record's run, not its creation.
	p1.Boot, p1.AgentID, p1.CreatedAt = "fff000aaa", "3", at(time.Hour)
	must(t, s.PutProcess(ctx, p1))
	list, _ = s.ListProcesses(ctx, "sp1")
	if len(list) != 2 || list[0].Boot != "fff000aaa" || list[0].AgentID != "3" || !list[0].CreatedAt.Equal(stored(at(time.Second))) {
		t.Errorf("after a put of a new run: %+v", list[0])
	}
	must(t, s.DeleteProcess(ctx, "sp1", "abc123-2"))
	must(t, s.DeleteProcess(ctx, "sp1", "abc123-2"))
	if list, _ = s.ListProcesses(ctx, "sp1"); len(list) != 1 {
		t.Errorf("after delete: %d records", len(list))
	}
	if list, _ = s.ListProcesses(ctx, "other"); len(list) != 1 {
		t.Errorf("another sandbox's records: %d, want 1", len(list))
	}
	// The sandbox's delete takes them.
	sb.State, sb.DeletedAt = sandbox.StateDeleted, at(time.Hour)
	must(t, s.UpdateSandbox(ctx, sb))
	if list, err = s.ListProcesses(ctx, "sp1"); err != nil || len(list) != 0 {
		t.Errorf("records outlived their sandbox's delete: %+v %v", list, err)
	}
	if list, _ = s.ListProcesses(ctx, "other"); len(list) != 1 {
		t.Errorf("a delete took another sandbox's records: %d left", len(list))
	}
}
