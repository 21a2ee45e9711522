package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCrashWhileFrozen kills the daemon while a sandbox is frozen — its
// cgroup by a pause, its cgroup and filesystems (FIFREEZE) by a fork —
// before the operation's record is written. The restarted daemon must come
// up at once (a frozen volume would block its first mkdir there for ever),
// find the sandbox alive in its recorded state with its processes, thawed,
// and nothing left frozen or orphaned.
func TestCrashWhileFrozen(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		point string
		op    func(d *daemon, id string) error
	}{
		{"pause.after-freeze", func(d *daemon, id string) error {
			_, err := d.c.Pause(context.Background(), id)
			return err
		}},
		{"capture.frozen", func(d *daemon, id string) error {
			_, err := d.c.Fork(context.Background(), id, api.ForkRequest{Count: 1})
			return err
		}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			d := startDaemon(t)
			ctx := context.Background()
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
			if err != nil {
				t.Fatal(err)
			}
			counter := func() int {
				t.Helper()
				out, code, err := runIn(d, sb.ID, "cat /workspace/count", nil)
				n, cerr := strconv.Atoi(strings.TrimSpace(out))
				if err != nil || code != 0 || cerr != nil {
					t.Fatalf("reading the counter: exit %d, %v: %q", code, err, out)
				}
				return n
			}
			if out, code, err := runIn(d, sb.ID, `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /workspace/count.tmp && mv /workspace/count.tmp /workspace/count; sleep 0.05; done' >/dev/null 2>&1 & sleep 0.3`, nil); err != nil || code != 0 {
				t.Fatalf("starting the counter: %d %v %s", code, err, out)
			}
			d.stop()
			d.startWithEnv("BERTH_FAILPOINTS=" + tc.point)
			if err := tc.op(d, sb.ID); err == nil {
				t.Fatalf("%s: the operation succeeded; the daemon should have died at the failpoint", tc.point)
			}
			d.waitExit()

			begin := time.Now()
			d.startWithEnv()
			if took := time.Since(begin); took > 5*time.Second {
				t.Errorf("API up %v after a crash with a frozen sandbox, want < 5s", took)
			}
			got, err := d.c.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != "running" {
				t.Fatalf("sandbox is %s (%s) after the restart, want running as recorded", got.State, got.Reason)
			}
			a := counter()
			time.Sleep(400 * time.Millisecond)
			if b := counter(); b <= a {
				t.Fatalf("the sandbox's process did not run on after the restart (counter %d then %d): still frozen or restarted", a, b)
			}
			if out, code, err := runIn(d, sb.ID, "touch /workspace/after && echo writable", nil); err != nil || code != 0 || !strings.Contains(out, "writable") {
				t.Fatalf("workspace after the restart: exit %d, %v: %q", code, err, out)
			}
			if rep, err := d.c.Doctor(ctx, false); err != nil || !rep.Healthy {
				t.Fatalf("doctor after the restart: %+v %v", rep, err)
			}
			// The interrupted operation can be done again.
			if err := tc.op(d, sb.ID); err != nil {
				t.Fatalf("%s again after the restart: %v", tc.point, err)
			}
		})
	}
}
