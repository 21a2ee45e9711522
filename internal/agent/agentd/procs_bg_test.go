package agentd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

func startProc(t *testing.T, a *testAgent, pr agent.ProcRequest, argv ...string) agent.ProcInfo {
	t.Helper()
	in, err := a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: argv, Env: testEnv}, pr)
	if err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	return in
}

func waitProc(t *testing.T, a *testAgent, ref string) agent.Exit {
	t.Helper()
	ex, err := a.client.WaitProc(testCtx(t), ref)
	if err != nil {
		t.Fatalf("wait %s: %v", ref, err)
	}
	return ex
}

func procByID(t *testing.T, a *testAgent, id string) agent.ProcInfo {
	t.Helper()
	_, ps, err := a.client.ListProcs(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("process %s not listed in %+v", id, ps)
	return agent.ProcInfo{}
}

// A background process outlives the connection that started it, is
// listed, and its exit is kept.
func TestProcLifecycle(t *testing.T) {
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{Tag: "job"}, "sh", "-c", "echo out; echo err >&2; sleep 0.3; exit 3")
	if in.ID == "" || in.State != wire.ProcRunning || in.PID == 0 || in.Tag != "job" {
		t.Fatalf("started %+v", in)
	}
	boot, ps, err := a.client.ListProcs(testCtx(t))
	if err != nil || boot == "" || len(ps) != 1 || ps[0].ID != in.ID {
		t.Fatalf("list: %q %+v %v", boot, ps, err)
	}
	info, err := a.client.Ping(testCtx(t))
	if err != nil || info.Boot != boot {
		t.Fatalf("ping boot %q, list boot %q (%v)", info.Boot, boot, err)
	}
	ex := waitProc(t, a, "job") // by tag
	if ex.Code != 3 {
		t.Fatalf("exit %+v", ex)
	}
	got := procByID(t, a, in.ID)
	if got.State != wire.ProcExited || got.Exit == nil || got.Exit.Code != 3 || got.PID != 0 {
		t.Fatalf("after exit %+v", got)
	}
	var out, errOut bytes.Buffer
	fex, err := a.client.AttachProc(testCtx(t), in.ID, false, agent.AttachIO{Stdout: &out, Stderr: &errOut})
	if err != nil || fex == nil || fex.Code != 3 || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Fatalf("replay: %v %+v %q %q", err, fex, out.String(), errOut.String())
	}
	_, err = a.client.AttachProc(testCtx(t), "nope", false, agent.AttachIO{})
	wantCategory(t, err, errdefs.ErrNotFound)
}

// Two attachers both see the earlier output, then the live output; the
// second one leaving does not touch the process; signals reach it.
func TestProcAttachSignal(t *testing.T) {
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{},
		"sh", "-c", `trap 'echo got-term; exit 9' TERM; echo first; while :; do sleep 0.05; done`)
	var early syncBuffer
	// Without follow: the replay of a running process, then nothing.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(early.String(), "first") && time.Now().Before(deadline) {
		ex, err := a.client.AttachProc(testCtx(t), in.ID, false, agent.AttachIO{Stdout: &early})
		if err != nil || ex != nil {
			t.Fatalf("replay of a running process: %+v %v", ex, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var one, two syncBuffer
	ctx2, cancel2 := context.WithCancel(testCtx(t))
	done1 := make(chan *agent.Exit, 1)
	go func() {
		ex, err := a.client.AttachProc(testCtx(t), in.ID, true, agent.AttachIO{Stdout: &one})
		if err != nil {
			t.Errorf("attach 1: %v", err)
		}
		done1 <- ex
	}()
	done2 := make(chan error, 1)
	go func() {
		_, err := a.client.AttachProc(ctx2, in.ID, true, agent.AttachIO{Stdout: &two})
		done2 <- err
	}()
	for !strings.Contains(two.String(), "first") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel2()
	<-done2
	if procByID(t, a, in.ID).State != wire.ProcRunning {
		t.Fatal("an attacher leaving ended the process")
	}
	if err := a.client.SignalProc(testCtx(t), in.ID, "TERM", false); err != nil {
		t.Fatal(err)
	}
	ex := <-done1
	if ex == nil || ex.Code != 9 || !strings.Contains(one.String(), "first\n") || !strings.Contains(one.String(), "got-term") {
		t.Fatalf("attacher 1: %+v %q", ex, one.String())
	}
	err := a.client.SignalProc(testCtx(t), in.ID, "TERM", false)
	wantCategory(t, err, errdefs.ErrConflict)
	err = a.client.SignalProc(testCtx(t), "1", "NOSUCHSIG", false)
	if err == nil {
		t.Fatal("unknown signal accepted")
	}
}

// Stdin reaches a background cat, also in several pieces, and closing it
// ends cat.
func TestProcStdin(t *testing.T) {
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{Tag: "cat"}, "cat")
	if err := a.client.ProcStdin(testCtx(t), "cat", strings.NewReader("hello "), false); err != nil {
		t.Fatal(err)
	}
	if err := a.client.ProcStdin(testCtx(t), in.ID, strings.NewReader("world\n"), true); err != nil {
		t.Fatal(err)
	}
	if ex := waitProc(t, a, in.ID); ex.Code != 0 {
		t.Fatalf("cat exit %+v", ex)
	}
	var out bytes.Buffer
	if _, err := a.client.AttachProc(testCtx(t), in.ID, true, agent.AttachIO{Stdout: &out}); err != nil || out.String() != "hello world\n" {
		t.Fatalf("cat output %q %v", out.String(), err)
	}
	err := a.client.ProcStdin(testCtx(t), in.ID, strings.NewReader("late"), true)
	wantCategory(t, err, errdefs.ErrConflict)
}

// Tags are unique among running processes and well-formed; the count of
// running processes is capped.
func TestProcTagsAndCap(t *testing.T) {
	a := startAgent(t)
	first := startProc(t, a, agent.ProcRequest{Tag: "web"}, "sleep", "30")
	_, err := a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, Env: testEnv}, agent.ProcRequest{Tag: "web"})
	wantCategory(t, err, errdefs.ErrConflict)
	for _, bad := range []string{"1abc", "a b", "a/b", strings.Repeat("a", wire.MaxTagBytes+1)} {
		_, err := a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, Env: testEnv}, agent.ProcRequest{Tag: bad})
		wantCategory(t, err, errdefs.ErrInvalid)
	}
	_, err = a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, Env: testEnv}, agent.ProcRequest{Restart: "sometimes"})
	wantCategory(t, err, errdefs.ErrInvalid)
	for i := 1; i < wire.MaxProcs; i++ {
		startProc(t, a, agent.ProcRequest{}, "sleep", "30")
	}
	_, err = a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, Env: testEnv}, agent.ProcRequest{})
	wantCategory(t, err, errdefs.ErrExhausted)
	// Killing one makes room, and its tag is free again.
	if err := a.client.SignalProc(testCtx(t), "web", "KILL", true); err != nil {
		t.Fatal(err)
	}
	if ex := waitProc(t, a, first.ID); ex.Signal != "SIGKILL" || ex.Code != 137 {
		t.Fatalf("killed exit %+v", ex)
	}
	if got := procByID(t, a, first.ID); got.State != wire.ProcKilled {
		t.Fatalf("killed state %+v", got)
	}
	second := startProc(t, a, agent.ProcRequest{Tag: "web"}, "true")
	waitProc(t, a, "web")
	// The tag names the newest process with it once none runs.
	if got := procByID(t, a, second.ID); got.Tag != "web" || got.State != wire.ProcExited {
		t.Fatalf("second %+v", got)
	}
}

// Ended processes are kept up to wire.MaxProcExits, oldest dropped first.
func TestProcExitRetention(t *testing.T) {
	a := startAgent(t)
	var ids []string
	for i := 0; i < wire.MaxProcExits+5; i++ {
		in := startProc(t, a, agent.ProcRequest{}, "sh", "-c", fmt.Sprintf("exit %d", i%100))
		waitProc(t, a, in.ID)
		ids = append(ids, in.ID)
	}
	// The last one's wait may answer a moment before its record moves to
	// the ended list and the oldest is dropped: poll, boundedly.
	var ps []agent.ProcInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if _, ps, err = a.client.ListProcs(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if len(ps) <= wire.MaxProcExits || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ps) != wire.MaxProcExits {
		t.Fatalf("%d processes kept, want %d", len(ps), wire.MaxProcExits)
	}
	if ps[0].ID != ids[5] || ps[len(ps)-1].ID != ids[len(ids)-1] {
		t.Fatalf("kept %s..%s, want %s..%s", ps[0].ID, ps[len(ps)-1].ID, ids[5], ids[len(ids)-1])
	}
	_, err := a.client.WaitProc(testCtx(t), ids[0])
	wantCategory(t, err, errdefs.ErrNotFound)
}

// The ring keeps the last ProcRingBytes; an attacher that comes late is
// told how much it missed.
func TestProcRingBounds(t *testing.T) {
	var r ring
	r.cap = 100
	for i := range 30 {
		r.add(wire.FrameStdout, []byte(fmt.Sprintf("%09d\n", i))) // 10 bytes each
	}
	if r.bytes > 100 || r.end != 300 {
		t.Fatalf("ring holds %d bytes, end %d", r.bytes, r.end)
	}
	chunks, skipped, next := r.since(0)
	if skipped != 200 || next != 300 || len(chunks) != 10 || string(chunks[0].data) != "000000020\n" {
		t.Fatalf("since(0): %d chunks, skipped %d, next %d", len(chunks), skipped, next)
	}
	if c, s, _ := r.since(next); len(c) != 0 || s != 0 {
		t.Fatal("since(end) returned output")
	}
	r.add(wire.FrameStderr, bytes.Repeat([]byte("x"), 250)) // bigger than the ring
	if r.bytes != 100 || r.end != 550 || len(r.chunks) != 1 || r.chunks[0].t != wire.FrameStderr {
		t.Fatalf("oversized add: %d bytes, end %d, %d chunks", r.bytes, r.end, len(r.chunks))
	}

	// End to end: 3 MiB of output, attached only at the end.
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{}, "sh", "-c", "head -c 3145728 /dev/zero; echo tail")
	waitProc(t, a, in.ID)
	var out bytes.Buffer
	var gap int64
	if _, err := a.client.AttachProc(testCtx(t), in.ID, false, agent.AttachIO{Stdout: &out, Gap: func(n int64) { gap += n }}); err != nil {
		t.Fatal(err)
	}
	if out.Len() > wire.ProcRingBytes || out.Len() < wire.ProcRingBytes-wire.DataChunk || gap+int64(out.Len()) != 3<<20+5 {
		t.Fatalf("replayed %d bytes with a gap of %d", out.Len(), gap)
	}
	if !strings.HasSuffix(out.String(), "tail\n") {
		t.Fatal("replay lost the newest output")
	}
}

// Restart policies: on-failure restarts a failing process up to its cap,
// always restarts a clean exit too, and a stop signal ends supervision.
func TestProcRestart(t *testing.T) {
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{Restart: wire.RestartOnFailure, MaxRestarts: 2}, "sh", "-c", "echo run; exit 4")
	ex := waitProc(t, a, in.ID)
	got := procByID(t, a, in.ID)
	if ex.Code != 4 || got.Restarts != 2 || got.State != wire.ProcExited {
		t.Fatalf("on-failure: %+v %+v", ex, got)
	}
	var out bytes.Buffer
	a.client.AttachProc(testCtx(t), in.ID, false, agent.AttachIO{Stdout: &out})
	if strings.Count(out.String(), "run\n") != 3 {
		t.Fatalf("output of 3 runs: %q", out.String())
	}
	ok := startProc(t, a, agent.ProcRequest{Restart: wire.RestartOnFailure}, "true")
	if waitProc(t, a, ok.ID); procByID(t, a, ok.ID).Restarts != 0 {
		t.Fatal("on-failure restarted a clean exit")
	}
	al := startProc(t, a, agent.ProcRequest{Tag: "svc", Restart: wire.RestartAlways}, "sh", "-c", "sleep 0.1")
	deadline := time.Now().Add(10 * time.Second)
	for procByID(t, a, al.ID).Restarts < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if procByID(t, a, al.ID).Restarts < 1 {
		t.Fatal("always did not restart")
	}
	if err := a.client.SignalProc(testCtx(t), "svc", "KILL", true); err != nil {
		t.Fatal(err)
	}
	waitProc(t, a, al.ID)
	n := procByID(t, a, al.ID).Restarts
	time.Sleep(600 * time.Millisecond)
	if got := procByID(t, a, al.ID); got.Restarts != n || (got.State != wire.ProcKilled && got.State != wire.ProcExited) {
		t.Fatalf("restarted after stop: %+v", got)
	}
}

// A PTY background process is reattached: its output and input go
// through the terminal.
func TestProcPTYReattach(t *testing.T) {
	a := startAgent(t)
	in, err := a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"sh", "-c", `echo "term=$TERM"; read x; echo "got $x"`}, Env: testEnv, TTY: true}, agent.ProcRequest{})
	if err != nil || !in.TTY {
		t.Fatalf("start: %+v %v", in, err)
	}
	var out syncBuffer
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "term=xterm-256color") && time.Now().Before(deadline) {
		out = syncBuffer{}
		a.client.AttachProc(testCtx(t), in.ID, false, agent.AttachIO{Stdout: &out})
		time.Sleep(20 * time.Millisecond)
	}
	var live syncBuffer
	ex, err := a.client.AttachProc(testCtx(t), in.ID, true, agent.AttachIO{Stdout: &live, Stdin: strings.NewReader("ping\n"), KeepStdin: true})
	if err != nil || ex == nil || ex.Code != 0 || !strings.Contains(live.String(), "got ping") || !strings.Contains(live.String(), "term=xterm-256color") {
		t.Fatalf("reattach: %+v %v %q", ex, err, live.String())
	}
}

// A command that cannot run still makes a process, which exits 127.
func TestProcMissingCommand(t *testing.T) {
	a := startAgent(t)
	in := startProc(t, a, agent.ProcRequest{}, "no-such-binary-xyz")
	if ex := waitProc(t, a, in.ID); ex.Code != 127 {
		t.Fatalf("exit %+v", ex)
	}
	_, err := a.client.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, Env: testEnv, Dir: "/no/such/dir"}, agent.ProcRequest{})
	wantCategory(t, err, errdefs.ErrNotFound)
}

// The agent's shutdown ends its background processes, supervised ones
// too (and the leak check of TestMain proves their goroutines are gone).
func TestProcShutdown(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	s, err := newServer(Config{Socket: filepath.Join(sockDir, "a.sock"), Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx) }()
	c := agent.NewClient(filepath.Join(sockDir, "a.sock"))
	in, err := c.StartProc(testCtx(t), agent.ExecRequest{Argv: []string{"sleep", "60"}, Env: testEnv}, agent.ProcRequest{Restart: wire.RestartAlways})
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return")
	}
	pgroupGone(t, in.PID)
	if _, _, err := c.ListProcs(testCtx(t)); err == nil {
		t.Fatal("agent still answers")
	}
}
