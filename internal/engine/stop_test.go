package engine_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// startTrap starts a background process that runs script (which must
// print "ready" once its traps are set) and waits for "ready".
func (e *env) startTrap(id, script string) {
	e.T.Helper()
	p, err := e.Engine.StartProcess(e.Ctx, id, &procs.StartRequest{ExecRequest: engine.ExecRequest{
		Cmd: []string{"sh", "-c", script}}}, "test")
	if err != nil {
		e.T.Fatal(err)
	}
	var out bytes.Buffer
	if !enginetest.Poll(func() bool {
		out.Reset()
		_, err := e.Engine.AttachProcess(e.Ctx, id, p.ID, false, procs.AttachIO{Stdout: &out}, "test")
		return err == nil && strings.Contains(out.String(), "ready")
	}) {
		e.T.Fatalf("process never got ready: %q", out.String())
	}
}

// TestStopGraceful: stop sends the template's stop signal (SIGTERM by
// default, SIGINT for a template that says so) to a running sandbox's
// processes and waits for them; a process ignoring it is killed once the
// grace has passed, and the stop takes about the grace, not longer; delete
// does not wait.
func TestStopGraceful(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	marker := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}

	sb := e.Create(engine.CreateRequest{Template: "base", Persistent: true})
	e.startTrap(sb.ID, `trap "echo got-term > `+dir+`/term; exit 0" TERM; echo ready; while :; do sleep 0.05; done`)
	begin := time.Now()
	if _, err := e.Engine.Stop(e.Ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if got := marker("term"); got != "got-term" {
		t.Fatalf("after stop the TERM trap wrote %q, want got-term", got)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("stop of a process that exits on TERM took %s", d)
	}
	e.WaitState(sb.ID, sandbox.StateStopped)

	// A template whose image says STOPSIGNAL SIGINT.
	base, err := e.Store.GetTemplate(e.Ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	intTpl := *base
	intTpl.Name = "int-stop"
	intTpl.Config.StopSignal = "SIGINT"
	if err := e.Store.PutTemplate(e.Ctx, &intTpl); err != nil {
		t.Fatal(err)
	}
	sb2 := e.Create(engine.CreateRequest{Template: "int-stop", Persistent: true})
	e.startTrap(sb2.ID, `trap "echo got-term > `+dir+`/int; exit 0" TERM; trap "echo got-int > `+dir+`/int; exit 0" INT; echo ready; while :; do sleep 0.05; done`)
	if _, err := e.Engine.Stop(e.Ctx, sb2.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if got := marker("int"); got != "got-int" {
		t.Fatalf("stop of a STOPSIGNAL SIGINT template: trap wrote %q, want got-int", got)
	}

	// A process that ignores the signal: killed after the grace.
	sb3 := e.Create(engine.CreateRequest{Template: "base", Persistent: true})
	e.startTrap(sb3.ID, `trap "echo ignored > `+dir+`/ign" TERM; echo ready; while :; do sleep 0.05; done`)
	const grace = 1500 * time.Millisecond
	begin = time.Now()
	if _, err := e.Engine.StopGrace(e.Ctx, sb3.ID, "test", grace); err != nil {
		t.Fatal(err)
	}
	d := time.Since(begin)
	if d < grace-100*time.Millisecond || d > grace+3*time.Second {
		t.Errorf("stop of a process ignoring TERM took %s, want about the grace %s", d, grace)
	}
	if got := marker("ign"); got != "ignored" {
		t.Errorf("the ignoring process never got TERM (marker %q)", got)
	}
	if st := e.WaitState(sb3.ID, sandbox.StateStopped); st.State != sandbox.StateStopped {
		t.Fatalf("state %s", st.State)
	}

	// Bad grace: refused before anything happens.
	if _, err := e.Engine.StopGrace(e.Ctx, sb3.ID, "test", -time.Second); err == nil {
		t.Fatal("negative grace accepted")
	}

	// Delete of a running sandbox does not wait out a grace.
	sb4 := e.Create(engine.CreateRequest{Template: "base"})
	e.startTrap(sb4.ID, `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	begin = time.Now()
	if _, err := e.Engine.Delete(e.Ctx, sb4.ID, "test", sandbox.CauseUser, "test"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("delete of a running sandbox took %s", d)
	}
}
