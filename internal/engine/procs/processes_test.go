package procs_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

func (e *env) procs(id string) []procs.Process {
	e.T.Helper()
	ps, err := e.Engine.ListProcesses(e.Ctx, id)
	if err != nil {
		e.T.Fatalf("list processes of %s: %v", id, err)
	}
	return ps
}

// findProc returns the last listed process with id or tag id.
func findProc(ps []procs.Process, id string) (procs.Process, bool) {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].ID == id || ps[i].Tag == id {
			return ps[i], true
		}
	}
	return procs.Process{}, false
}

// Background processes through the engine: start, list, replay, stdin,
// signal, wait; a stop ends them and the list says so; an id of the
// earlier boot is refused after the start.
func TestProcesses(t *testing.T) {
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Template: "base", Persistent: true})
	web, err := e.Engine.StartProcess(e.Ctx, sb.ID, &procs.StartRequest{ExecRequest: engine.ExecRequest{
		Cmd: []string{"sh", "-c", `trap 'echo bye; exit 5' TERM; echo hello; while :; do sleep 0.05; done`}}, Tag: "web"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if web.State != "running" || web.Tag != "web" || !strings.Contains(web.ID, "-") {
		t.Fatalf("started %+v", web)
	}
	cat, err := e.Engine.StartProcess(e.Ctx, sb.ID, &procs.StartRequest{ExecRequest: engine.ExecRequest{Cmd: []string{"cat"}}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.procs(sb.ID)) != 2 {
		t.Fatalf("list %+v", e.procs(sb.ID))
	}
	var out bytes.Buffer
	if !enginetest.Poll(func() bool {
		out.Reset()
		_, err := e.Engine.AttachProcess(e.Ctx, sb.ID, "web", false, procs.AttachIO{Stdout: &out}, "test")
		return err == nil && strings.Contains(out.String(), "hello")
	}) {
		t.Fatalf("replay %q", out.String())
	}
	if err := e.Engine.ProcessStdin(e.Ctx, sb.ID, cat.ID, strings.NewReader("meow\n"), true, "test"); err != nil {
		t.Fatal(err)
	}
	if ex, err := e.Engine.WaitProcess(e.Ctx, sb.ID, cat.ID, "test"); err != nil || ex.Code != 0 {
		t.Fatalf("cat: %+v %v", ex, err)
	}
	out.Reset()
	if ex, err := e.Engine.AttachProcess(e.Ctx, sb.ID, cat.ID, true, procs.AttachIO{Stdout: &out}, "test"); err != nil || ex == nil || out.String() != "meow\n" {
		t.Fatalf("cat replay %q %+v %v", out.String(), ex, err)
	}
	if err := e.Engine.SignalProcess(e.Ctx, sb.ID, web.ID, "TERM", false, "test"); err != nil {
		t.Fatal(err)
	}
	if ex, err := e.Engine.WaitProcess(e.Ctx, sb.ID, "web", "test"); err != nil || ex.Code != 5 {
		t.Fatalf("web: %+v %v", ex, err)
	}
	err = e.Engine.SignalProcess(e.Ctx, sb.ID, "web", "NOT A SIGNAL", false, "test")
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	_, err = e.Engine.WaitProcess(e.Ctx, sb.ID, "../x", "test")
	enginetest.WantErr(t, err, errdefs.ErrInvalid)
	_, err = e.Engine.StartProcess(e.Ctx, sb.ID, &procs.StartRequest{ExecRequest: engine.ExecRequest{Cmd: []string{"true"}}, Tag: "abcdef-1"}, "test")
	enginetest.WantErr(t, err, errdefs.ErrInvalid)

	// A stop ends what runs; the list keeps what it saw.
	sleeper, err := e.Engine.StartProcess(e.Ctx, sb.ID, &procs.StartRequest{ExecRequest: engine.ExecRequest{Cmd: []string{"sleep", "60"}}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Engine.Stop(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if p, ok := findProc(e.procs(sb.ID), sleeper.ID); !ok || p.State != "stopped" || p.Reason == "" {
		t.Fatalf("after stop: %+v", e.procs(sb.ID))
	}
	if _, err := e.Engine.Start(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	ps := e.procs(sb.ID)
	if p, ok := findProc(ps, sleeper.ID); !ok || p.State != "stopped" {
		t.Fatalf("after start: %+v", ps)
	}
	if p, ok := findProc(ps, web.ID); !ok || p.State != "exited" || p.Exit == nil || p.Exit.Code != 5 {
		t.Fatalf("web after start: %+v", ps)
	}
	_, err = e.Engine.WaitProcess(e.Ctx, sb.ID, sleeper.ID, "test")
	enginetest.WantErr(t, err, errdefs.ErrConflict)
	_, err = e.Engine.AttachProcess(e.Ctx, sb.ID, "ffffff-1", false, procs.AttachIO{}, "test")
	enginetest.WantErr(t, err, errdefs.ErrNotFound)
}

// A template's service starts at create and again at every start, and is
// restarted by its policy when it ends.
func TestService(t *testing.T) {
	e := newEnv(t)
	if err := e.Store.PutTemplate(e.Ctx, &store.Template{Name: "svc", Layers: []string{enginetest.Layer}, Source: "test", CreatedAt: e.Clock.Now(),
		Config: store.TemplateConfig{Service: &store.ServiceSpec{Cmd: []string{"sh", "-c", "echo up; exec sleep 60"}, Restart: store.RestartAlways}}}); err != nil {
		t.Fatal(err)
	}
	sb := e.Create(engine.CreateRequest{Template: "svc", Persistent: true})
	running := func() (procs.Process, bool) {
		ps, err := e.Engine.ListProcesses(e.Ctx, sb.ID)
		if err != nil {
			return procs.Process{}, false
		}
		for _, p := range ps {
			if p.Tag == store.ServiceTag && p.State == "running" {
				return p, true
			}
		}
		return procs.Process{}, false
	}
	var first procs.Process
	if !enginetest.Poll(func() bool { var ok bool; first, ok = running(); return ok }) {
		t.Fatalf("no service after create: %+v", e.procs(sb.ID))
	}
	// Ended by a signal (no stop): always restarts it, same id.
	if err := e.Engine.SignalProcess(e.Ctx, sb.ID, store.ServiceTag, "KILL", false, "test"); err != nil {
		t.Fatal(err)
	}
	if !enginetest.Poll(func() bool { p, ok := running(); return ok && p.Restarts >= 1 && p.ID == first.ID }) {
		t.Fatalf("service not restarted: %+v", e.procs(sb.ID))
	}
	if _, err := e.Engine.Stop(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Engine.Start(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if !enginetest.Poll(func() bool { p, ok := running(); return ok && p.ID != first.ID }) {
		t.Fatalf("no new service after start: %+v", e.procs(sb.ID))
	}
	// A pause and resume keeps the one that runs.
	if _, err := e.Engine.Pause(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	p, _ := findProc(e.procs(sb.ID), store.ServiceTag)
	if p.State != "paused" {
		t.Fatalf("service of a paused sandbox: %+v", p)
	}
	if _, err := e.Engine.Resume(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	n := 0
	for _, p := range e.procs(sb.ID) {
		if p.Tag == store.ServiceTag && p.State == "running" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d services running after resume: %+v", n, e.procs(sb.ID))
	}
}
