package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunTTYShell: `berth run -it -- sh` gives the shell a terminal in a
// fresh sandbox, exits with the shell's code and deletes the sandbox, as
// docker run --rm -it does. Stdin here is a pipe, not a terminal, so the
// client sends no size and leaves its own terminal alone; the sandbox side
// is a real PTY all the same.
func TestRunTTYShell(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	out, errOut, code := d.cliIn("echo out=$((6*7)); tty; exit 5\n", "run", "-it", "--", "sh")
	if code != 5 || !strings.Contains(out, "out=42") || !strings.Contains(out, "/dev/pts/") {
		t.Fatalf("run -it: code %d stdout %q stderr %q", code, out, errOut)
	}
	sbs, err := d.c.ListSandboxes(context.Background(), true)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("want one sandbox record, got %+v %v", sbs, err)
	}
	waitState(t, d, sbs[0].ID, "deleted", 5*time.Second)
	if sbs[0].Policy.OnIdle != "stop" || sbs[0].Policy.RetentionSeconds == 0 {
		t.Errorf("run -t sandbox has no backstop policy: %+v", sbs[0].Policy)
	}
}
