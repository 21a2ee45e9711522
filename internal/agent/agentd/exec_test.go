package agentd

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

func run(t *testing.T, c *agent.Client, req agent.ExecRequest, stdin io.Reader) (agent.Exit, string, string) {
	t.Helper()
	if req.Env == nil {
		req.Env = testEnv
	}
	var stdout, stderr bytes.Buffer
	ex, err := c.Exec(testCtx(t), req, agent.ExecIO{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return ex, stdout.String(), stderr.String()
}

func TestExec(t *testing.T) {
	a := startAgent(t)
	dir := t.TempDir()
	tests := []struct {
		name       string
		req        agent.ExecRequest
		code       int
		signal     string
		stdout     string
		stderr     string
		stdoutPref bool
	}{
		{name: "echo", req: agent.ExecRequest{Argv: []string{"echo", "hello", "world"}}, stdout: "hello world\n"},
		{name: "exit code", req: agent.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, code: 3},
		{name: "stderr", req: agent.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2"}}, stdout: "out\n", stderr: "err\n"},
		{name: "signal", req: agent.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, code: 128 + 15, signal: "SIGTERM"},
		{name: "env", req: agent.ExecRequest{Argv: []string{"sh", "-c", "echo $FOO"}, Env: append([]string{"FOO=bar baz"}, testEnv...)}, stdout: "bar baz\n"},
		{name: "empty env", req: agent.ExecRequest{Argv: []string{"/usr/bin/env"}, Env: []string{}}, stdout: ""},
		{name: "dir", req: agent.ExecRequest{Argv: []string{"pwd"}, Dir: dir}, stdout: dir + "\n"},
		{name: "default dir", req: agent.ExecRequest{Argv: []string{"pwd"}}, stdout: "/\n"},
		{name: "own process group", req: agent.ExecRequest{Argv: []string{"sh", "-c", `test "$(ps -o pgid= $$ | tr -d ' ')" = $$ && echo leader`}}, stdout: "leader\n"},
		{name: "user", req: agent.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g; id -G"}, User: "65534"}, stdout: "65534\n65534\n65534\n"},
		{name: "user:group", req: agent.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g"}, User: "65534:1234"}, stdout: "65534\n1234\n"},
		{name: "no stdin", req: agent.ExecRequest{Argv: []string{"cat"}}, stdout: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, stdout, stderr := run(t, a.client, tt.req, nil)
			if ex.Code != tt.code || ex.Signal != tt.signal || ex.TimedOut {
				t.Errorf("exit = %+v, want code %d signal %q", ex, tt.code, tt.signal)
			}
			if stdout != tt.stdout || stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", stdout, stderr, tt.stdout, tt.stderr)
			}
			if ex.DurationMS <= 0 {
				t.Errorf("duration %v", ex.DurationMS)
			}
		})
	}
}

func TestExecErrors(t *testing.T) {
	a := startAgent(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  agent.ExecRequest
		cat  error
	}{
		{"empty argv", agent.ExecRequest{}, errdefs.ErrInvalid},
		{"missing dir", agent.ExecRequest{Argv: []string{"true"}, Dir: "/no/such/dir"}, errdefs.ErrNotFound},
		{"dir is a file", agent.ExecRequest{Argv: []string{"true"}, Dir: plain}, errdefs.ErrInvalid},
		{"relative dir", agent.ExecRequest{Argv: []string{"true"}, Dir: "tmp"}, errdefs.ErrInvalid},
		{"unknown user", agent.ExecRequest{Argv: []string{"true"}, User: "nobody-here"}, errdefs.ErrNotFound},
		{"bad user", agent.ExecRequest{Argv: []string{"true"}, User: "1:2:3"}, errdefs.ErrInvalid},
		{"NUL", agent.ExecRequest{Argv: []string{"echo", "a\x00b"}}, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.req.Env == nil {
				tt.req.Env = testEnv
			}
			_, err := a.client.Exec(testCtx(t), tt.req, agent.ExecIO{})
			wantCategory(t, err, tt.cat)
		})
	}
}

// A command that does not exist exits 127 and one that cannot be executed
// 126, with the reason on stderr (stdout under a TTY), as shells do.
func TestExecCommandExitCodes(t *testing.T) {
	a := startAgent(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("\x7fELFnot really"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		argv []string
		tty  bool
		code int
		msg  string
	}{
		{"missing binary", []string{"no-such-binary-xyz"}, false, 127, "not found"},
		{"missing path", []string{"/no/such/binary"}, false, 127, "no such file"},
		{"missing under tty", []string{"no-such-binary-xyz"}, true, 127, "not found"},
		{"not executable", []string{plain}, false, 126, "permission denied"},
		{"bad format", []string{garbage}, false, 126, "exec"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ex, out, errOut := run(t, a.client, agent.ExecRequest{Argv: tt.argv, TTY: tt.tty}, nil)
			if ex.Code != tt.code {
				t.Fatalf("exit %+v, want %d (stdout %q stderr %q)", ex, tt.code, out, errOut)
			}
			got := errOut
			if tt.tty {
				got = out
			}
			if !strings.Contains(got, tt.msg) || !strings.HasPrefix(got, "berth: ") {
				t.Fatalf("message %q lacks %q", got, tt.msg)
			}
		})
	}
}

// Under a TTY, TERM is xterm-256color unless the caller sets it.
func TestExecTTYTerm(t *testing.T) {
	a := startAgent(t)
	_, out, _ := run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "printf '%s' \"$TERM\""}, TTY: true}, nil)
	if out != "xterm-256color" {
		t.Fatalf("TERM under tty = %q", out)
	}
	_, out, _ = run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "printf '%s' \"$TERM\""}, TTY: true,
		Env: append(append([]string{}, testEnv...), "TERM=vt100")}, nil)
	if out != "vt100" {
		t.Fatalf("caller's TERM = %q", out)
	}
	_, out, _ = run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "printf '%s' \"${TERM-unset}\""}}, nil)
	if out != "unset" {
		t.Fatalf("TERM without tty = %q", out)
	}
}

func TestExecUserFromPasswd(t *testing.T) {
	a := startAgent(t)
	writeFile(t, a.root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nalice:x:1500:1600::/home/alice:/bin/sh\n")
	writeFile(t, a.root, "etc/group", "root:x:0:\nalices:x:1600:\ndev:x:1700:alice,bob\nops:x:1800:bob\n")
	ex, out, _ := run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g; id -G"}, User: "alice"}, nil)
	if ex.Code != 0 || out != "1500\n1600\n1600 1700\n" {
		t.Fatalf("alice: %+v %q", ex, out)
	}
	_, out, _ = run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g"}, User: "1500:ops"}, nil)
	if out != "1500\n1800\n" {
		t.Fatalf("1500:ops: %q", out)
	}
	_, err := a.client.Exec(testCtx(t), agent.ExecRequest{Argv: []string{"true"}, User: "alice:nogroup", Env: testEnv}, agent.ExecIO{})
	wantCategory(t, err, errdefs.ErrNotFound)
}

// pgroupGone waits until no process is left in group pgid.
func pgroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := unix.Kill(-pgid, 0); err == unix.ESRCH {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process group %d still exists", pgid)
}

func TestExecTimeout(t *testing.T) {
	a := startAgent(t)
	begin := time.Now()
	ex, out, _ := run(t, a.client, agent.ExecRequest{
		Argv:    []string{"sh", "-c", "echo $$; sleep 10 & sleep 10"},
		Timeout: 200 * time.Millisecond,
	}, nil)
	if el := time.Since(begin); el > 3*time.Second {
		t.Fatalf("took %v", el)
	}
	if !ex.TimedOut || ex.Code != 137 || ex.Signal != "SIGKILL" {
		t.Fatalf("exit = %+v", ex)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	pgroupGone(t, pgid)
}

func TestExecStdin(t *testing.T) {
	a := startAgent(t)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	ex, out, _ := run(t, a.client, agent.ExecRequest{Argv: []string{"cat"}}, bytes.NewReader(data))
	if ex.Code != 0 || out != string(data) {
		t.Fatalf("exit %+v, %d bytes back of %d", ex, len(out), len(data))
	}
	// Streaming: the process answers line by line while stdin stays open.
	pr, pw := io.Pipe()
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := a.client.Exec(testCtx(t), agent.ExecRequest{Argv: []string{"sh", "-c", "while read l; do echo got $l; done"}, Env: testEnv},
			agent.ExecIO{Stdin: pr, Stdout: &stdout})
		done <- err
	}()
	for i := range 3 {
		fmt.Fprintf(pw, "line%d\n", i)
		want := fmt.Sprintf("got line%d\n", i)
		waitFor(t, func() bool { return strings.Contains(stdout.String(), want) })
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExecTTY(t *testing.T) {
	a := startAgent(t)
	ex, out, _ := run(t, a.client, agent.ExecRequest{Argv: []string{"tty"}, TTY: true}, nil)
	if ex.Code != 0 || !strings.HasPrefix(out, "/dev/pts/") {
		t.Fatalf("tty: %+v %q", ex, out)
	}
	_, out, _ = run(t, a.client, agent.ExecRequest{Argv: []string{"stty", "size"}, TTY: true, Rows: 30, Cols: 100}, nil)
	if strings.TrimSpace(out) != "30 100" {
		t.Fatalf("stty size = %q", out)
	}
	// A resize reaches the terminal, and the process is its session leader.
	pr, pw := io.Pipe()
	resize := make(chan agent.Resize)
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		ex, err := a.client.Exec(testCtx(t), agent.ExecRequest{
			Argv: []string{"sh", "-c", `stty size; [ "$(ps -o sid= $$ | tr -d ' ')" = $$ ] && echo leader; read x; stty size`},
			Env:  testEnv, TTY: true,
		}, agent.ExecIO{Stdin: pr, Stdout: &stdout, Resize: resize})
		if err == nil && ex.Code != 0 {
			err = fmt.Errorf("exit %+v", ex)
		}
		done <- err
	}()
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "leader") })
	resize <- agent.Resize{Rows: 50, Cols: 120}
	time.Sleep(100 * time.Millisecond)
	io.WriteString(pw, "go\n")
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := stdout.String()
	if !strings.Contains(got, "24 80") || !strings.Contains(got, "50 120") {
		t.Fatalf("output %q", got)
	}
}

// slowWriter counts bytes, sleeps now and then, and watches the heap.
type slowWriter struct {
	n, next int
	maxHeap uint64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	if w.n >= w.next {
		w.next += 8 << 20
		time.Sleep(2 * time.Millisecond)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.maxHeap = max(w.maxHeap, ms.HeapInuse)
	}
	return len(p), nil
}

func TestExecFloodBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("200 MB")
	}
	a := startAgent(t)
	const size = 200 << 20
	w := &slowWriter{}
	ex, err := a.client.Exec(testCtx(t), agent.ExecRequest{Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}, Env: testEnv},
		agent.ExecIO{Stdout: w})
	if err != nil || ex.Code != 0 {
		t.Fatalf("exec: %+v %v", ex, err)
	}
	if w.n != size {
		t.Fatalf("got %d bytes, want %d", w.n, size)
	}
	if w.maxHeap > 64<<20 {
		t.Fatalf("heap in use reached %d MiB", w.maxHeap>>20)
	}
	t.Logf("max heap in use %d MiB", w.maxHeap>>20)
}

// blockingWriter blocks until released: a client that stops reading.
// With after set, it stops only once after() holds (writes before that
// are taken).
type blockingWriter struct {
	release chan struct{}
	after   func() bool
}

func (w blockingWriter) Write(p []byte) (int, error) {
	if w.after == nil || w.after() {
		<-w.release
	}
	return len(p), nil
}

func TestExecBackpressure(t *testing.T) {
	a := startAgent(t)
	release := make(chan struct{})
	var stderr syncBuffer
	done := make(chan error, 1)
	// The client stops reading stdout once it has the shell's pid from
	// stderr: stdout and stderr share the stream, so a stdout frame the
	// agent sent first would otherwise hold the pid's frame behind it.
	gotPid := func() bool { return strings.HasSuffix(stderr.String(), "\n") }
	go func() {
		_, err := a.client.Exec(testCtx(t), agent.ExecRequest{Argv: []string{"sh", "-c", "echo $$ >&2; yes"}, Env: testEnv},
			agent.ExecIO{Stdout: blockingWriter{release: release, after: gotPid}, Stderr: &stderr})
		done <- err
	}()
	waitFor(t, gotPid)
	pgid, _ := strconv.Atoi(strings.TrimSpace(stderr.String()))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	time.Sleep(300 * time.Millisecond)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapInuse > before.HeapInuse+16<<20 {
		t.Errorf("heap grew from %d to %d while the client did not read", before.HeapInuse, after.HeapInuse)
	}
	unix.Kill(-pgid, unix.SIGKILL)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestExecCancelKills(t *testing.T) {
	a := startAgent(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := a.client.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "echo $$; sleep 10 & sleep 10"}, Env: testEnv},
			agent.ExecIO{Stdout: &stdout})
		done <- err
	}()
	waitFor(t, func() bool { return strings.HasSuffix(stdout.String(), "\n") })
	pgid, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("exec after cancel: %v", err)
	}
	pgroupGone(t, pgid)
}

func TestExecBackgroundChildDoesNotHold(t *testing.T) {
	a := startAgent(t)
	begin := time.Now()
	ex, out, _ := run(t, a.client, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 3 & echo started"}}, nil)
	if el := time.Since(begin); el > 1500*time.Millisecond {
		t.Fatalf("exec waited %v for a background child", el)
	}
	if ex.Code != 0 || out != "started\n" {
		t.Fatalf("%+v %q", ex, out)
	}
}

func TestExecConcurrent(t *testing.T) {
	a := startAgent(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			ex, err := a.client.Exec(testCtx(t), agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.1; echo $0", strconv.Itoa(i)}, Env: testEnv},
				agent.ExecIO{Stdout: &out})
			if err == nil && (ex.Code != 0 || out.String() != fmt.Sprintf("%d\n", i)) {
				err = fmt.Errorf("exec %d: %+v %q", i, ex, out.String())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestExecLatency(t *testing.T) {
	a := startAgent(t)
	ctx := testCtx(t)
	begin := time.Now()
	const n = 100
	for range n {
		if _, err := a.client.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ping round trip %v", time.Since(begin)/n)
}

func BenchmarkExecTrue(b *testing.B) {
	a := startAgent(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := a.client.Exec(ctx, agent.ExecRequest{Argv: []string{"/bin/true"}}, agent.ExecIO{}); err != nil {
			b.Fatal(err)
		}
	}
}
