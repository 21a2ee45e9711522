package nodetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// classRun is the state the cases of one runtime class share: e is an
// ephemeral sandbox most cases use in turn, p a persistent one (owned
// workspace volume, persist_root), child a sandbox made from a capture of
// e.
type classRun struct {
	*suite
	class string
	caps  node.Caps
	e, p  *sandbox.Sandbox
	child *sandbox.Sandbox
	layer string // CommitLayer's result
	// captureName is e's capture that testCaptureMaterialize made and
	// testStopRevertDiscard reverts to and drops.
	captureName string
}

// runClass runs the per-class cases in order; each builds on the state
// the ones before left, so the first failure ends the class.
func (s *suite) runClass(t *testing.T, class string) {
	caps, ok := node.ClassCaps(s.b, class)
	if !ok {
		t.Fatalf("class %s not offered", class)
	}
	c := &classRun{suite: s, class: class, caps: caps}
	t0 := time.Now()
	defer func() { t.Logf("class %s: %s", class, time.Since(t0).Round(time.Millisecond)) }()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Provision", c.testProvision},
		{"ProvisionIdempotent", c.testProvisionAgain},
		{"Accounting", c.testAccounting},
		{"FreezeThaw", c.testFreezeThaw},
		{"Ports", c.testPorts},
		{"SetHostname", c.testSetHostname},
		{"Storage", c.testStorage},
		{"Checkpoint", c.testCheckpoint},
		{"CaptureMaterialize", c.testCaptureMaterialize},
		{"StopRevertDiscard", c.testStopRevertDiscard},
		{"PersistentRoot", c.testPersistent},
		{"CapturePersistent", c.testCapturePersistent},
		{"Wipe", c.testWipe},
		{"CommitLayer", c.testCommitLayer},
		{"SweepFindsLeak", c.testSweepLeak},
		{"KillAllRemove", c.testKillAllRemove},
	} {
		if !t.Run(tc.name, tc.fn) {
			t.Fatalf("%s failed; the cases after it build on it", tc.name)
		}
	}
}

// refused asserts that err refuses what on a class that lacks the
// capability: not supported (the backend cannot) or a conflict (the
// class cannot), never nil, and with a reason.
func (c *classRun) refused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s on class %s (caps %+v) succeeded; want it refused", what, c.class, c.caps)
		return
	}
	if !errors.Is(err, errdefs.ErrNotSupported) && !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("%s on class %s = %v; want not-supported or a conflict", what, c.class, err)
	}
	t.Logf("%s refused on class %s: %v", what, c.class, err)
}

// alive asserts that sb still runs and answers after a refusal.
func (c *classRun) alive(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	if st := c.status(t, sb); st != node.StatusRunning {
		t.Errorf("Status after a refused operation = %s, want running", st)
	}
	if _, err := c.b.Agent(sb).Ping(t.Context()); err != nil {
		t.Errorf("ping after a refused operation: %v", err)
	}
}

// testProvision: a new sandbox's agent answers a ping and an exec, its
// status is running, it has not exited, and its isolation names its class.
func (c *classRun) testProvision(t *testing.T) {
	c.e = c.newSandbox(t, c.class, sbOpts{})
	c.provision(t, c.e)
	if _, err := c.b.Agent(c.e).Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if !c.h.Model {
		if out := c.sh(t, c.e, "echo hello; cat /proc/sys/kernel/hostname"); out != "hello\n"+c.e.Hostname()+"\n" {
			t.Errorf("exec output %q", out)
		}
		// Every sandbox's default working directory is there, volume or not.
		if out := c.sh(t, c.e, "[ -d /workspace ] && echo dir"); out != "dir\n" {
			t.Errorf("/workspace in a new sandbox: %q, want a directory", out)
		}
	} else if fi, err := c.b.Agent(c.e).Stat(t.Context(), "/workspace"); err != nil || !fi.IsDir {
		t.Errorf("/workspace in a new sandbox: %+v, %v; want a directory", fi, err)
	}
	if st := c.status(t, c.e); st != node.StatusRunning {
		t.Errorf("Status = %s, want running", st)
	}
	if c.b.Exited(c.e) {
		t.Error("Exited reports a running sandbox exited")
	}
	if err := c.b.WaitReady(t.Context(), c.e); err != nil {
		t.Errorf("WaitReady of a running sandbox: %v", err)
	}
	if iso := c.b.Isolation(c.e); iso.Runtime != c.class {
		t.Errorf("Isolation.Runtime = %q, want %q", iso.Runtime, c.class)
	}
	_ = c.b.InitLog(c.e, 1024, 0) // what the agent printed: anything, but it must not block
	// A restart's recovery and the reconciler's tick leave a healthy
	// sandbox alone and report nothing about it.
	if err := c.b.Recover(t.Context(), []*sandbox.Sandbox{c.e}); err != nil {
		t.Errorf("Recover: %v", err)
	}
	c.b.Tick(t.Context(), []*sandbox.Sandbox{c.e})
	if _, err := c.b.Agent(c.e).Ping(t.Context()); err != nil {
		t.Errorf("ping after Recover and Tick: %v", err)
	}
	c.mu.Lock()
	for _, ev := range c.events {
		if ev.SandboxID == c.e.ID {
			t.Errorf("an event about a healthy sandbox: %+v", ev)
		}
	}
	c.mu.Unlock()
}

// testProvisionAgain: Provision of a sandbox that is already made (a
// restarted create) leaves it running, with what its writable layer holds.
func (c *classRun) testProvisionAgain(t *testing.T) {
	c.write(t, c.e, "/root/before-reprovision", "kept")
	c.provision(t, c.e)
	if st := c.status(t, c.e); st != node.StatusRunning {
		t.Fatalf("Status after a second Provision = %s", st)
	}
	if out := c.read(t, c.e, "/root/before-reprovision"); out != "kept\n" {
		t.Errorf("the writable layer lost a file over a second Provision: %q", out)
	}
}

// testAccounting: CPU time used inside shows in CPUUsage; nothing was
// OOM-killed.
func (c *classRun) testAccounting(t *testing.T) {
	// A backend may answer its latest sample and refresh it behind (one
	// that asks the agent must not wait on it): the first figure may take
	// a moment to come, and later ones to catch up.
	var before time.Duration
	var err error
	if !eventually(10*time.Second, func() bool {
		before, err = c.b.CPUUsage(c.e)
		return err == nil
	}) {
		t.Fatalf("CPUUsage: %v", err)
	}
	if c.h.Model { // no process burns CPU in a model's sandbox
		if n, err := c.b.OOMKills(c.e); err != nil || n != 0 {
			t.Errorf("OOMKills = %d, %v", n, err)
		}
		return
	}
	c.sh(t, c.e, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	var after time.Duration
	if !eventually(10*time.Second, func() bool {
		after, err = c.b.CPUUsage(c.e)
		return err == nil && after-before >= 10*time.Millisecond
	}) {
		t.Errorf("CPUUsage %s before and %s (%v) after a busy loop", before, after, err)
	}
	if n, err := c.b.OOMKills(c.e); err != nil || n != 0 {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
}

// tickerScript writes an increasing counter (a shell variable, so memory
// state) to /var/tick every 50 ms, and its pid to /var/tick.pid.
const tickerScript = `(echo $(exec sh -c 'echo $PPID') > /var/tick.pid; i=0; while :; do i=$((i+1)); echo $i > /var/tick.new; mv /var/tick.new /var/tick; sleep 0.05; done) </dev/null >/dev/null 2>&1 &
while [ ! -s /var/tick ]; do sleep 0.01; done`

func (c *classRun) tick(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(c.sh(t, c.e, "cat /var/tick")))
	if err != nil {
		t.Fatalf("reading /var/tick: %v", err)
	}
	return n
}

// testFreezeThaw: a frozen sandbox is paused, its processes make no
// progress (read from outside through QuarantineFiles) and an exec does
// not complete; a capture of it leaves it paused; after Thaw it runs on.
func (c *classRun) testFreezeThaw(t *testing.T) {
	if !c.caps.Freeze {
		c.refused(t, "Freeze", c.freeze(t.Context(), c.e))
		c.refused(t, "Thaw", c.thaw(t.Context(), c.e))
		_, err := c.quarantineFiles(t.Context(), c.e)
		c.refused(t, "QuarantineFiles", err)
		c.refused(t, "SetRules(cut)", c.setRules(t.Context(), c.e, true))
		c.alive(t, c.e)
		return
	}
	if c.h.Model {
		// No ticker runs in a model's sandbox: a counter it left.
		c.write(t, c.e, "/var/tick", "7")
	} else {
		c.sh(t, c.e, tickerScript)
		if a := c.tick(t); !eventually(2*time.Second, func() bool { return c.tick(t) > a }) {
			t.Fatal("the ticker does not tick")
		}
	}
	ctx := t.Context()
	if err := c.freeze(ctx, c.e); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	c.e.State = sandbox.StatePaused
	thawed := false
	defer func() {
		if !thawed {
			_ = c.thaw(context.WithoutCancel(ctx), c.e)
			c.e.State = sandbox.StateRunning
		}
	}()
	if st := c.status(t, c.e); st != node.StatusPaused {
		t.Errorf("Status of a frozen sandbox = %s, want paused", st)
	}
	t0 := time.Now()
	if c.h.Model {
		pctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		if _, err := c.b.Agent(c.e).Ping(pctx); err == nil {
			t.Error("the agent of a frozen sandbox answered")
		}
		cancel()
	} else if _, _, _, err := c.run(ctx, c.e, "echo through", 1500*time.Millisecond); err == nil {
		t.Error("an exec completed in a frozen sandbox")
	}
	t.Logf("exec into the frozen sandbox gave up after %s", time.Since(t0).Round(time.Millisecond))
	// The host-side reader: no process of the sandbox runs to serve it.
	first := c.quarantineRead(t, "/var/tick")
	time.Sleep(300 * time.Millisecond)
	if second := c.quarantineRead(t, "/var/tick"); first != second || first == "" {
		t.Errorf("a frozen sandbox's counter moved: %q then %q", first, second)
	}
	// WaitReady honours its context: a frozen agent never answers.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	t0 = time.Now()
	err := c.b.WaitReady(wctx, c.e)
	cancel()
	if err == nil {
		t.Error("WaitReady of a frozen sandbox returned nil")
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("WaitReady with a 300ms context returned after %s: it does not honour its context", d.Round(time.Millisecond))
	}
	// A capture of a paused sandbox leaves it paused.
	name := c.newCaptureName(c.e.ID)
	capt, release, err := c.capture(ctx, c.e, name)
	if err != nil {
		t.Fatalf("Capture of a paused sandbox: %v", err)
	}
	release()
	if err := c.dropCapture(capt.Name); err != nil {
		t.Errorf("DropCapture: %v", err)
	}
	if st := c.status(t, c.e); st != node.StatusPaused {
		t.Errorf("Status after a capture of a paused sandbox = %s, want paused", st)
	}
	if err := c.thaw(ctx, c.e); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	thawed = true
	c.e.State = sandbox.StateRunning
	if st := c.status(t, c.e); st != node.StatusRunning {
		t.Errorf("Status after Thaw = %s", st)
	}
	if err := c.b.WaitReady(ctx, c.e); err != nil {
		t.Fatalf("WaitReady after Thaw: %v", err)
	}
	if c.h.Model {
		if got := strings.TrimSpace(c.read(t, c.e, "/var/tick")); got != first {
			t.Errorf("after Thaw the sandbox reads %q, its files said %q", got, first)
		}
		return
	}
	n, _ := strconv.Atoi(strings.TrimSpace(first))
	if !eventually(2*time.Second, func() bool { return c.tick(t) > n }) {
		t.Error("the counter does not move after Thaw")
	}
}

// quarantineRead reads path of e from the host side (QuarantineFiles).
func (c *classRun) quarantineRead(t *testing.T, path string) string {
	t.Helper()
	fs, err := c.quarantineFiles(t.Context(), c.e)
	if err != nil {
		t.Fatalf("QuarantineFiles: %v", err)
	}
	defer fs.Close()
	ac, p, err := fs.Client(t.Context(), path)
	if err != nil {
		t.Fatalf("QuarantineFiles client for %s: %v", path, err)
	}
	var buf bytes.Buffer
	if _, err := ac.ReadFile(t.Context(), p, &buf); err != nil {
		t.Fatalf("reading %s of a frozen sandbox: %v", path, err)
	}
	return strings.TrimSpace(buf.String())
}

// testPorts: DialPort reaches a server listening on the sandbox's
// loopback; a port nothing listens on is ErrUnreachable.
func (c *classRun) testPorts(t *testing.T) {
	const port = 8080
	if c.h.Model { // nothing listens in a model's sandbox
		if conn, err := c.b.DialPort(t.Context(), c.e, port); !errors.Is(err, errdefs.ErrUnreachable) {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("DialPort of a port nothing listens on = %v, want ErrUnreachable", err)
		}
		return
	}
	c.sh(t, c.e, fmt.Sprintf("mkdir -p /var/www && echo nodetest-%s > /var/www/index.html && busybox httpd -p 127.0.0.1:%d -h /var/www", c.class, port))
	ctx := t.Context()
	var conn net.Conn
	var err error
	if !eventually(5*time.Second, func() bool {
		conn, err = c.b.DialPort(ctx, c.e, port)
		return err == nil
	}) {
		t.Fatalf("DialPort(%d) with httpd listening: %v", port, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil || !bytes.HasPrefix(resp, []byte("HTTP/1.")) || !bytes.Contains(resp, []byte("nodetest-"+c.class)) {
		t.Errorf("response through DialPort: %q, %v", resp, err)
	}
	if conn, err := c.b.DialPort(ctx, c.e, port+1); !errors.Is(err, errdefs.ErrUnreachable) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("DialPort of a port nothing listens on = %v, want ErrUnreachable", err)
	}
}

// testSetHostname: the name changes inside, as a named pool claim needs.
// A class without Caps.Rename may refuse it, but must not report a change
// it did not make.
func (c *classRun) testSetHostname(t *testing.T) {
	err := c.setHostname(t.Context(), c.e, "nodetest-renamed")
	if err != nil {
		if c.caps.Rename {
			t.Fatalf("SetHostname: %v", err)
		}
		if !(errors.Is(err, errdefs.ErrConflict) && strings.Contains(err.Error(), c.class)) && !errors.Is(err, errdefs.ErrNotSupported) {
			t.Errorf("SetHostname refused on class %s with %v: want a conflict naming the class, or not supported", c.class, err)
		}
		if !c.h.Model {
			if got := strings.TrimSpace(c.sh(t, c.e, "cat /proc/sys/kernel/hostname")); got != c.e.Hostname() {
				t.Errorf("a refused SetHostname changed the hostname to %q", got)
			}
		}
		t.Logf("SetHostname refused on class %s (Caps.Rename false): %v", c.class, err)
		return
	}
	if c.h.Model { // no kernel to ask
		return
	}
	if got := strings.TrimSpace(c.sh(t, c.e, "cat /proc/sys/kernel/hostname")); got != "nodetest-renamed" {
		t.Errorf("SetHostname returned nil, but the hostname inside is %q", got)
	}
}

// testStorage: the disk cap is reported and enforced, use shows in it,
// Diff lists what was written.
func (c *classRun) testStorage(t *testing.T) {
	if !c.caps.RootLayer {
		// The root layer is the runtime's: its cap may be recorded but
		// the backend neither enforces nor sees it, and says so.
		if d := c.b.DiskUsage(c.e); d != nil && (d.Enforced || d.Note == "") {
			t.Errorf("DiskUsage = %+v on a class without a root layer: want it not enforced, with a note", d)
		}
		_, err := c.diff(t.Context(), c.e)
		c.refused(t, "Diff", err)
		c.alive(t, c.e)
		return
	}
	if c.h.Model {
		// No filesystem of its own enforces a cap: what it wrote is listed.
		c.write(t, c.e, "/root/four-mib", "x")
		c.checkDiff(t)
		return
	}
	c.sh(t, c.e, "head -c 4194304 /dev/zero > /root/four-mib && sync")
	d := c.b.DiskUsage(c.e)
	if d == nil {
		t.Fatal("DiskUsage of a capped sandbox is nil")
	}
	if !d.Enforced || d.CapBytes <= 0 || d.CapBytes > diskCap || d.UsedBytes < 4<<20 {
		t.Errorf("DiskUsage = %+v, want an enforced cap of at most %d with 4 MiB used", d, diskCap)
	}
	if n := c.b.Committed(c.e); n < 0 || n > diskCap {
		t.Errorf("Committed = %d, want 0..%d", n, diskCap)
	}
	// The cap is the filesystem's: writing past it fails inside.
	if _, _, code, err := c.run(t.Context(), c.e, fmt.Sprintf("head -c %d /dev/zero > /root/too-big", diskCap+(8<<20)), 60*time.Second); err != nil || code == 0 {
		t.Errorf("writing past the disk cap: exit %d, %v; want a failure", code, err)
	}
	c.sh(t, c.e, "rm -f /root/too-big /root/four-mib")
	c.checkDiff(t)
}

// checkDiff: Diff lists a file written (and kept) as added, one removed
// (/root/four-mib) not as present.
func (c *classRun) checkDiff(t *testing.T) {
	if c.h.Model {
		if err := c.b.Agent(c.e).Remove(t.Context(), "/root/four-mib", false); err != nil {
			t.Fatalf("removing /root/four-mib: %v", err)
		}
	}
	changes, err := c.diff(t.Context(), c.e)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if !slices.ContainsFunc(changes, func(ch node.Change) bool { return ch.Path == "/root/before-reprovision" && ch.Kind == "added" }) {
		t.Errorf("Diff does not list /root/before-reprovision as added: %+v", changes)
	}
	if slices.ContainsFunc(changes, func(ch node.Change) bool { return ch.Path == "/root/four-mib" && ch.Kind != "removed" }) {
		t.Errorf("Diff lists a removed file as present: %+v", changes)
	}
}

// testCheckpoint: where the class can, memory state survives a
// checkpoint and restore (the ticker keeps its pid and its count); where
// it cannot, Checkpoint is refused as a conflict and the sandbox runs on.
func (c *classRun) testCheckpoint(t *testing.T) {
	ctx := t.Context()
	if node.Hibernated(c.b, c.e) {
		t.Fatal("Hibernated of a running sandbox")
	}
	if !c.caps.Checkpoint {
		_, alive, err := c.checkpoint(ctx, c.e)
		if !alive {
			t.Errorf("a refused Checkpoint on class %s reports the sandbox not alive", c.class)
		}
		if !(errors.Is(err, errdefs.ErrConflict) && strings.Contains(err.Error(), c.class)) && !errors.Is(err, errdefs.ErrNotSupported) {
			t.Errorf("Checkpoint on class %s = %v; want a conflict naming the class, or not supported", c.class, err)
		}
		if _, err := c.b.Agent(c.e).Ping(ctx); err != nil {
			t.Errorf("ping after a refused checkpoint: %v", err)
		}
		c.e.State = sandbox.StateStopped // as a hibernated record would be
		err = c.restore(ctx, c.e)
		c.e.State = sandbox.StateRunning
		c.refused(t, "Restore of a sandbox with no checkpoint", err)
		return
	}
	var pid string
	var before int
	if c.h.Model {
		c.write(t, c.e, "/var/tick", "9")
	} else {
		pid = strings.TrimSpace(c.sh(t, c.e, "cat /var/tick.pid"))
		before = c.tick(t)
	}
	cp, alive, err := c.checkpoint(ctx, c.e)
	if err != nil {
		t.Fatalf("Checkpoint: %v (alive %v)", err, alive)
	}
	if alive || cp.Took <= 0 || cp.SizeBytes <= 0 {
		t.Errorf("Checkpoint = %+v, alive %v", cp, alive)
	}
	t.Logf("checkpoint: %s, %d bytes", cp.Took.Round(time.Millisecond), cp.SizeBytes)
	c.e.State = sandbox.StateStopping
	if err := c.b.Stop(ctx, c.e); err != nil { // the engine's hibernate: unmount, keep the layer
		t.Fatalf("Stop after Checkpoint: %v", err)
	}
	c.e.State = sandbox.StateStopped
	if !node.Hibernated(c.b, c.e) {
		t.Fatal("Hibernated is false after a checkpoint")
	}
	if st := c.status(t, c.e); st != node.StatusGone && st != node.StatusStopped {
		t.Errorf("Status of a hibernated sandbox = %s", st)
	}
	c.e.State = sandbox.StateStarting
	if err := c.restore(ctx, c.e); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	c.e.State = sandbox.StateRunning
	if node.Hibernated(c.b, c.e) {
		t.Error("Hibernated after Restore")
	}
	if c.h.Model { // its files, not its memory
		if got := c.read(t, c.e, "/var/tick"); got != "9\n" {
			t.Errorf("after Restore /var/tick = %q", got)
		}
		return
	}
	if got := strings.TrimSpace(c.sh(t, c.e, "cat /var/tick.pid; kill -0 $(cat /var/tick.pid) && echo alive")); got != pid+"\nalive" {
		t.Errorf("the ticker after Restore: %q, want pid %s alive", got, pid)
	}
	// Its count is in its memory: a new process would start again at 1.
	if !eventually(3*time.Second, func() bool { return c.tick(t) > before }) {
		t.Errorf("the counter did not go on from %d after Restore (now %d)", before, c.tick(t))
	}
}

// testCaptureMaterialize: a capture of a running sandbox freezes it only
// briefly, a second capture under the same name is refused, and a sandbox
// materialized from it has the parent's files as at the capture.
func (c *classRun) testCaptureMaterialize(t *testing.T) {
	ctx := t.Context()
	c.write(t, c.e, "/root/captured", "parent")
	if !c.caps.Capture {
		name := c.newCaptureName(c.e.ID)
		_, release, err := c.capture(ctx, c.e, name)
		c.refused(t, "Capture", err)
		if release != nil {
			release()
		}
		child := c.newChild(t, c.e)
		c.refused(t, "Materialize", c.materialize(ctx, child, name))
		c.remove(t, child)
		c.alive(t, c.e)
		return
	}
	name := c.newCaptureName(c.e.ID)
	if other := c.newCaptureName(c.e.ID); other == name {
		t.Errorf("CaptureName returned %q twice", name)
	}
	capt, release, err := c.capture(ctx, c.e, name)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	c.captureName = name
	c.captures = append(c.captures, name)
	if release == nil {
		t.Fatal("Capture returned no release func")
	}
	t.Logf("capture: frozen %s, %d bytes", capt.Frozen, capt.SizeBytes)
	if capt.Name != name || capt.Frozen <= 0 || capt.Frozen > 5*time.Second {
		t.Errorf("Capture = %+v: want name %s and a brief freeze", capt, name)
	}
	if st := c.status(t, c.e); st != node.StatusRunning {
		t.Errorf("Status after Capture = %s, want running", st)
	}
	if _, r2, err := c.capture(ctx, c.e, name); err == nil {
		r2()
		t.Error("a second Capture under the same name succeeded")
	}
	c.write(t, c.e, "/root/after-capture", "later")
	c.child = c.newChild(t, c.e)
	if err := c.materialize(ctx, c.child, name); err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	release()
	c.provision(t, c.child)
	if out := c.read(t, c.child, "/root/captured"); out != "parent\n" {
		t.Errorf("the child reads %q from the parent's file", out)
	}
	if c.exists(t, c.child, "/root/after-capture") {
		t.Error("the child has a file the parent wrote after the capture")
	}
	// The capture stays for Revert (StopRevertDiscard).
	nobody := c.newChild(t, c.e)
	if err := c.materialize(ctx, nobody, "no-such-capture"); !errors.Is(err, node.ErrNoCapture) {
		t.Errorf("Materialize of a missing capture = %v, want ErrNoCapture", err)
	}
	c.remove(t, nobody)
}

// testStopRevertDiscard: Stop (twice) ends the processes; Revert puts the
// captured files back in place; Discard drops an ephemeral writable layer;
// a stopped sandbox provisions again.
func (c *classRun) testStopRevertDiscard(t *testing.T) {
	ctx := t.Context()
	c.e.State = sandbox.StateStopping
	for i := range 2 {
		if err := c.b.Stop(ctx, c.e); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	c.e.State = sandbox.StateStopped
	if st := c.status(t, c.e); st != node.StatusGone && st != node.StatusStopped {
		t.Errorf("Status after Stop = %s", st)
	}
	if !c.b.Exited(c.e) {
		t.Error("Exited is false after Stop")
	}
	if !c.caps.Capture {
		c.refused(t, "Revert", c.revert(ctx, c.e, c.newCaptureName(c.e.ID)))
		if err := c.b.Discard(ctx, c.e); err != nil {
			t.Fatalf("Discard: %v", err)
		}
		c.startsClean(t)
		return
	}
	name := c.captureName
	if err := c.revert(ctx, c.e, name); err != nil {
		t.Fatalf("Revert: %v", err)
	}
	if err := c.revert(ctx, c.e, "no-such-capture"); !errors.Is(err, node.ErrNoCapture) {
		t.Errorf("Revert to a missing capture = %v, want ErrNoCapture", err)
	}
	c.provision(t, c.e)
	if out := c.read(t, c.e, "/root/captured"); out != "parent\n" {
		t.Errorf("after Revert /root/captured = %q", out)
	}
	if c.exists(t, c.e, "/root/after-capture") {
		t.Error("after Revert a file written after the capture is still there")
	}
	for i := range 2 {
		if err := c.dropCapture(name); err != nil {
			t.Errorf("DropCapture #%d: %v", i+1, err)
		}
	}
	if err := c.revert(ctx, c.e, name); !errors.Is(err, node.ErrNoCapture) {
		t.Errorf("Revert to a dropped capture = %v, want ErrNoCapture", err)
	}
	if err := c.dropCapture("../escape"); err == nil {
		t.Error("DropCapture of a path took it")
	}
	// Stop and Discard: an ephemeral sandbox starts again from its template.
	c.stop(t, c.e)
	c.startsClean(t)
}

// startsClean: stopped and discarded e provisions again from its template.
func (c *classRun) startsClean(t *testing.T) {
	c.provision(t, c.e)
	if c.exists(t, c.e, "/root/captured") {
		t.Error("the writable layer survived Stop and Discard of an ephemeral sandbox")
	}
}

// testPersistent: a persist_root sandbox keeps its writable layer and its
// workspace over Stop and Discard.
func (c *classRun) testPersistent(t *testing.T) {
	if !c.caps.RootLayer {
		c.testPersistentVolumesOnly(t)
		return
	}
	c.p = c.newSandbox(t, c.class, sbOpts{persistent: true, persistRoot: true})
	c.provision(t, c.p)
	c.write(t, c.p, "/root/kept", "root")
	c.write(t, c.p, "/workspace/kept", "ws")
	if d := c.b.DiskUsage(c.p); d != nil {
		t.Errorf("DiskUsage of a persist_root sandbox = %+v, want nil (its volume holds the layer)", d)
	}
	c.stopTwiceAndDiscard(t, c.p)
	// A model keeps no volume images: what a volume holds is not measured.
	if u, err := c.b.VolumeUsage(c.p.Spec.Volumes[0].VolumeID); err != nil || u.UsedBytes <= 0 && !c.h.Model {
		t.Errorf("VolumeUsage of a stopped sandbox's workspace = %+v, %v", u, err)
	}
	c.provision(t, c.p)
	if out := c.read(t, c.p, "/root/kept", "/workspace/kept"); out != "root\nws\n" {
		t.Errorf("after Stop, Discard and Provision: %q, want both files kept", out)
	}
}

// stopTwiceAndDiscard stops sb twice (Stop is idempotent) and discards
// what does not persist.
func (c *classRun) stopTwiceAndDiscard(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	sb.State = sandbox.StateStopping
	for i := range 2 {
		if err := c.b.Stop(t.Context(), sb); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := c.b.Discard(t.Context(), sb); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	sb.State = sandbox.StateStopped
}

// testPersistentVolumesOnly is testPersistent where the root layer goes
// with the sandbox's processes (a pod): persist_root is refused before
// anything runs, and a persistent sandbox keeps its workspace volume over
// Stop, Discard and Provision while its root starts again from the
// template.
func (c *classRun) testPersistentVolumesOnly(t *testing.T) {
	pr := c.newSandbox(t, c.class, sbOpts{persistent: true, persistRoot: true})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	err := c.b.Provision(ctx, pr)
	cancel()
	c.refused(t, "Provision with persist_root", err)
	if st, err := c.b.Status(t.Context(), pr); err != nil || st == node.StatusRunning {
		t.Errorf("Status of a refused persist_root sandbox = %s, %v", st, err)
	}
	c.remove(t, pr)

	c.p = c.newSandbox(t, c.class, sbOpts{persistent: true})
	c.provision(t, c.p)
	c.write(t, c.p, "/root/kept", "root")
	c.write(t, c.p, "/workspace/kept", "ws")
	c.stopTwiceAndDiscard(t, c.p)
	if u, err := c.b.VolumeUsage(c.p.Spec.Volumes[0].VolumeID); err != nil || u.ReadOnly {
		t.Errorf("VolumeUsage of a stopped sandbox's workspace = %+v, %v", u, err)
	}
	c.provision(t, c.p)
	if out, kept := c.read(t, c.p, "/workspace/kept"), c.exists(t, c.p, "/root/kept"); out != "ws\n" || kept {
		t.Errorf("after Stop, Discard and Provision: /workspace/kept %q, /root/kept there: %v; want the workspace file only", out, kept)
	}
}

// testCapturePersistent: a capture of a sandbox with an owned volume
// carries the volume (and the root layer on it) to a new sandbox, read
// without starting it (Diff of a stopped record).
func (c *classRun) testCapturePersistent(t *testing.T) {
	ctx := t.Context()
	name := c.newCaptureName(c.p.ID)
	if !c.caps.Capture {
		_, release, err := c.capture(ctx, c.p, name)
		c.refused(t, "Capture of a persistent sandbox", err)
		if release != nil {
			release()
		}
		c.alive(t, c.p)
		return
	}
	_, release, err := c.capture(ctx, c.p, name)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	defer func() {
		release()
		if err := c.dropCapture(name); err != nil {
			t.Errorf("DropCapture: %v", err)
		}
	}()
	q := c.newChild(t, c.p)
	c.makeVolumes(t, q)
	if err := c.materialize(ctx, q, name); err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	q.State = sandbox.StateStopped
	changes, err := c.diff(ctx, q)
	if err != nil {
		t.Fatalf("Diff of the materialized sandbox: %v", err)
	}
	for _, want := range []string{"/root/kept", "/workspace/kept"} {
		if !slices.ContainsFunc(changes, func(ch node.Change) bool { return ch.Path == want }) {
			t.Errorf("the materialized sandbox lacks %s: %+v", want, changes)
		}
	}
	c.remove(t, q)
}

// testWipe: a stopped sandbox's writable layer and workspace are emptied.
func (c *classRun) testWipe(t *testing.T) {
	c.stop(t, c.p)
	if err := c.b.Wipe(t.Context(), c.p); err != nil {
		t.Fatalf("Wipe: %v", err)
	}
	c.provision(t, c.p)
	if out, kept := c.entries(t, c.p, "/workspace"), c.exists(t, c.p, "/root/kept"); out != "" || kept {
		t.Errorf("after Wipe: %q left in /workspace, /root/kept there: %v", out, kept)
	}
	for i := range 2 {
		if err := c.b.Remove(t.Context(), c.p); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	c.release(t, c.p)
}

// testCommitLayer: what a build sandbox wrote becomes a layer a new
// sandbox sees.
func (c *classRun) testCommitLayer(t *testing.T) {
	if !c.caps.RootLayer {
		// Refused; the sandbox it was asked of is the next case's leak.
		d := c.child
		if d == nil {
			d = c.newSandbox(t, c.class, sbOpts{})
			c.provision(t, d)
		}
		_, err := c.commitLayer(t.Context(), d)
		c.refused(t, "CommitLayer", err)
		c.alive(t, d)
		c.child = d
		return
	}
	c.write(t, c.child, "/built", "built")
	layer, err := c.commitLayer(t.Context(), c.child)
	if err != nil || layer == "" {
		t.Fatalf("CommitLayer = %q, %v", layer, err)
	}
	c.remove(t, c.child)
	c.layer = layer
	d := c.newSandbox(t, c.class, sbOpts{layers: append(slices.Clone(c.h.Layers), layer)})
	c.provision(t, d)
	if out := c.read(t, d, "/built"); out != "built\n" {
		t.Errorf("a sandbox on the committed layer reads %q", out)
	}
	c.child = d // the leak of the next case
}

// testSweepLeak: with every sandbox recorded a sweep finds nothing; a
// running sandbox missing from the live records is reported, and the
// fixes remove all of it.
func (c *classRun) testSweepLeak(t *testing.T) {
	ctx := t.Context()
	for _, f := range c.sweep(ctx, c.sweepInput()) {
		t.Errorf("sweep with every sandbox recorded: %s", f)
	}
	leak := c.child
	found := c.sweep(ctx, c.sweepInput(leak.ID))
	var kinds []string
	for _, f := range found {
		if f.id != leak.ID {
			t.Errorf("sweep reports something else than the leak: %s", f)
			continue
		}
		kinds = append(kinds, f.kind)
		if f.fix == nil {
			t.Errorf("no fix for %s", f)
			continue
		}
		if err := f.fix(); err != nil {
			t.Errorf("fix of %s: %v", f, err)
		}
	}
	t.Logf("the leak was reported as %v", kinds)
	if len(kinds) == 0 {
		t.Fatal("sweep does not report a running sandbox no record accounts for")
	}
	if st := c.status(t, leak); st != node.StatusGone {
		t.Errorf("Status of the leaked sandbox after the fixes = %s, want gone", st)
	}
	for _, f := range c.sweep(ctx, c.sweepInput(leak.ID)) {
		t.Errorf("sweep after the fixes: %s", f)
	}
	// Nothing is left for Remove either.
	c.remove(t, leak)
	c.child = nil
}

// testKillAllRemove: KillAll ends every process from outside, Exited sees
// it, and Remove (twice) leaves nothing.
func (c *classRun) testKillAllRemove(t *testing.T) {
	ctx := t.Context()
	if err := c.b.KillAll(ctx, c.e); err != nil {
		t.Fatalf("KillAll: %v", err)
	}
	if !eventually(5*time.Second, func() bool { return c.b.Exited(c.e) }) {
		t.Error("Exited is false 5s after KillAll")
	}
	var st node.Status
	if !eventually(5*time.Second, func() bool {
		st = c.status(t, c.e)
		return st != node.StatusRunning && st != node.StatusPaused
	}) {
		t.Errorf("Status 5s after KillAll = %s", st)
	}
	for i := range 2 {
		if err := c.b.Remove(ctx, c.e); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if st := c.status(t, c.e); st != node.StatusGone {
		t.Errorf("Status after Remove = %s, want gone", st)
	}
	c.release(t, c.e)
	for _, f := range c.sweep(ctx, c.sweepInput()) {
		if f.id == c.e.ID {
			t.Errorf("sweep after Remove: %s", f)
		}
	}
}
