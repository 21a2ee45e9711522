package agentd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"

	"golang.org/x/sys/unix"
)

// startMain runs Main in a child process (the test binary, see TestMain),
// as PID 1 of a new PID namespace when the kernel lets us, and returns its
// command and a client.
func startMain(t *testing.T, extra ...string) (*exec.Cmd, *agent.Client, bool) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "a.sock")
	args := append([]string{"--socket", sock, "--root", t.TempDir(), "--init", "--log-level", "debug"}, extra...)
	var stderr bytes.Buffer
	start := func(newPID bool) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), mainEnv+"=1")
		cmd.Stderr = &stderr
		if newPID {
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		}
		return cmd, cmd.Start()
	}
	pid1 := true
	cmd, err := start(true)
	if err != nil {
		t.Logf("no new PID namespace (%v): testing --init as a plain process", err)
		pid1 = false
		if cmd, err = start(false); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", stderr.String())
		}
	})
	c := agent.NewClient(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Ping(testCtx(t)); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("agent did not come up: %v\n%s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, c, pid1
}

// zombiesOf lists the zombie children of pid (host view).
func zombiesOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func TestMainPID1(t *testing.T) {
	cmd, c, pid1 := startMain(t, "--shutdown-grace", "3s")
	ctx := testCtx(t)
	info, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid1 && info.PID != 1 {
		t.Fatalf("agent pid %d in its namespace, want 1", info.PID)
	}

	// Exec works under the reaper, exit codes included.
	var out bytes.Buffer
	ex, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "echo hi; exit 5"}, Env: testEnv}, agent.ExecIO{Stdout: &out})
	if err != nil || ex.Code != 5 || out.String() != "hi\n" {
		t.Fatalf("exec: %+v %q %v", ex, out.String(), err)
	}
	// Orphans (double-forked, so reparented to the agent) are reaped.
	for range 5 {
		ex, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "(sleep 0.1 >/dev/null 2>&1 &) ; true"}, Env: testEnv}, agent.ExecIO{})
		if err != nil || ex.Code != 0 {
			t.Fatalf("exec: %+v %v", ex, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	waitForT(t, 3*time.Second, func() bool { return len(zombiesOf(cmd.Process.Pid)) == 0 }, "zombies left under the agent")

	// Many short execs racing the reaper all get their own status.
	for i := range 30 {
		ex, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "exit " + strconv.Itoa(i)}, Env: testEnv}, agent.ExecIO{})
		if err != nil || ex.Code != i {
			t.Fatalf("exec %d: %+v %v", i, ex, err)
		}
	}

	// As PID 1 the agent is not stopped by signals: the sandbox's own
	// processes are the only ones that can send it one, and the daemon
	// ends a sandbox through its cgroup. An exec running beside it is
	// untouched and the agent keeps answering.
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, agent.ExecRequest{
			Argv: []string{"sh", "-c", `trap 'echo term; exit 7' TERM INT HUP; echo ready; while :; do sleep 0.05; done`},
			Env:  testEnv,
		}, agent.ExecIO{Stdout: &stdout})
		done <- err
	}()
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2, unix.SIGPWR} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("agent after signals: %v", err)
	}
	if strings.Contains(stdout.String(), "term") {
		t.Fatalf("a signal to PID 1 reached the exec'd process: %q", stdout.String())
	}
	select {
	case err := <-done:
		t.Fatalf("exec ended after signals to PID 1: %v", err)
	default:
	}
}

func TestMainSIGTERMGrace(t *testing.T) {
	cmd, c, _ := startMain(t, "--shutdown-grace", "500ms", "--init=false")
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), agent.ExecRequest{
			Argv: []string{"sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`}, Env: testEnv,
		}, agent.ExecIO{Stdout: &stdout})
		done <- err
	}()
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	begin := time.Now()
	cmd.Process.Signal(unix.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	if el := time.Since(begin); el < 400*time.Millisecond || el > 3*time.Second {
		t.Fatalf("agent exited after %v, want about the 500ms grace", el)
	}
	<-done // the connection closed with the agent; the error does not matter
}

func waitForT(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMainFlags(t *testing.T) {
	if code := Main([]string{"--no-such-flag"}); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if code := Main([]string{"extra"}); code != 2 {
		t.Fatalf("extra arg: exit %d", code)
	}
}
