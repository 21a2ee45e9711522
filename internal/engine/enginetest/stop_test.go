package enginetest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// startTrap starts a background process that runs script (which must
// print "ready" once its traps are set) and waits for "ready".
func (e *env) startTrap(id, script string) {
	e.t.Helper()
	p, err := e.m.StartProcess(e.ctx, id, &procs.StartRequest{ExecRequest: engine.ExecRequest{
		Cmd: []string{"sh", "-c", script}}}, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	var out bytes.Buffer
	if !poll(func() bool {
		out.Reset()
		_, err := e.m.AttachProcess(e.ctx, id, p.ID, false, procs.AttachIO{Stdout: &out}, "test")
		return err == nil && strings.Contains(out.String(), "ready")
	}) {
		e.t.Fatalf("process never got ready: %q", out.String())
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

	sb := e.create(engine.CreateRequest{Template: "base", Persistent: true})
	e.startTrap(sb.ID, `trap "echo got-term > `+dir+`/term; exit 0" TERM; echo ready; while :; do sleep 0.05; done`)
	begin := time.Now()
	if _, err := e.m.Stop(e.ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if got := marker("term"); got != "got-term" {
		t.Fatalf("after stop the TERM trap wrote %q, want got-term", got)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("stop of a process that exits on TERM took %s", d)
	}
	e.waitState(sb.ID, sandbox.StateStopped)

	// A template whose image says STOPSIGNAL SIGINT.
	base, err := e.st.GetTemplate(e.ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	intTpl := *base
	intTpl.Name = "int-stop"
	intTpl.Config.StopSignal = "SIGINT"
	if err := e.st.PutTemplate(e.ctx, &intTpl); err != nil {
		t.Fatal(err)
	}
	sb2 := e.create(engine.CreateRequest{Template: "int-stop", Persistent: true})
	e.startTrap(sb2.ID, `trap "echo got-term > `+dir+`/int; exit 0" TERM; trap "echo got-int > `+dir+`/int; exit 0" INT; echo ready; while :; do sleep 0.05; done`)
	if _, err := e.m.Stop(e.ctx, sb2.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if got := marker("int"); got != "got-int" {
		t.Fatalf("stop of a STOPSIGNAL SIGINT template: trap wrote %q, want got-int", got)
	}

	// A process that ignores the signal: killed after the grace.
	sb3 := e.create(engine.CreateRequest{Template: "base", Persistent: true})
	e.startTrap(sb3.ID, `trap "echo ignored > `+dir+`/ign" TERM; echo ready; while :; do sleep 0.05; done`)
	const grace = 1500 * time.Millisecond
	begin = time.Now()
	if _, err := e.m.StopGrace(e.ctx, sb3.ID, "test", grace); err != nil {
		t.Fatal(err)
	}
	d := time.Since(begin)
	if d < grace-100*time.Millisecond || d > grace+3*time.Second {
		t.Errorf("stop of a process ignoring TERM took %s, want about the grace %s", d, grace)
	}
	if got := marker("ign"); got != "ignored" {
		t.Errorf("the ignoring process never got TERM (marker %q)", got)
	}
	if st := e.waitState(sb3.ID, sandbox.StateStopped); st.State != sandbox.StateStopped {
		t.Fatalf("state %s", st.State)
	}

	// Bad grace: refused before anything happens.
	if _, err := e.m.StopGrace(e.ctx, sb3.ID, "test", -time.Second); err == nil {
		t.Fatal("negative grace accepted")
	}

	// Delete of a running sandbox does not wait out a grace.
	sb4 := e.create(engine.CreateRequest{Template: "base"})
	e.startTrap(sb4.ID, `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	begin = time.Now()
	if _, err := e.m.Delete(e.ctx, sb4.ID, "test", sandbox.CauseUser, "test"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("delete of a running sandbox took %s", d)
	}
}
