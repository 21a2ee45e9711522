package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestCrashMidHibernateAndWake kills the daemon (SIGKILL, at a failpoint)
// at every step of a runsc hibernate and of a wake, restarts it, and
// checks that the sandbox is never lost: it runs as before, or it is
// hibernated with a complete image (a wake then brings it back); either
// way a process started before the hibernate still runs. Ephemeral
// sandboxes (gone if judged dead) and persistent ones alike. make test
// runs three points; BERTH_SOAK (make soak) runs every point with both
// kinds.
func TestCrashMidHibernateAndWake(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	points := []string{
		"hibernate.after-quiesce", "hibernate.after-checkpoint", "hibernate.after-marker",
		"hibernate.after-stopping", "hibernate.after-stophost",
		"wake.after-starting", "wake.after-restore", "wake.after-ready", "wake.after-marker", "wake.before-running",
	}
	// make test: three points (the agent told to listen again; a save
	// that finished made a hibernation, finished from its marker; a wake
	// started over), to keep within its time; make soak: every point,
	// both kinds.
	// The value: persistent (an ephemeral sandbox is the one a wrong
	// judgement destroys).
	quick := map[string]bool{"hibernate.after-quiesce": false, "hibernate.after-checkpoint": false,
		"wake.after-restore": false}
	soak := os.Getenv("BERTH_SOAK") != ""
	for _, fp := range points {
		persistent, ok := quick[fp]
		if !soak && !ok {
			continue
		}
		kinds := []bool{persistent}
		if soak {
			kinds = []bool{false, true}
		}
		for _, persistent := range kinds {
			name := fp + "/ephemeral"
			if persistent {
				name = fp + "/persistent"
			}
			t.Run(name, func(t *testing.T) {
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Persistent: persistent})
				if err != nil {
					t.Fatal(err)
				}
				defer d.c.DeleteSandbox(ctx, sb.ID, true)
				pid := sh(t, d, sb.ID, "nohup sleep 100000 >/dev/null 2>&1 & echo $!")
				wake := strings.HasPrefix(fp, "wake.")
				if wake {
					if _, err := d.c.Hibernate(ctx, sb.ID); err != nil {
						t.Fatal(err)
					}
				}
				d.stop()
				d.startWithEnv("BERTH_FAILPOINTS=" + fp)
				if wake {
					_, err = d.c.Wake(ctx, sb.ID)
				} else {
					_, err = d.c.Hibernate(ctx, sb.ID)
				}
				if err == nil {
					t.Fatal("the operation succeeded although the daemon should have died")
				}
				d.waitExit()
				d.startWithEnv()
				got, err := d.c.GetSandbox(ctx, sb.ID)
				if err != nil {
					t.Fatalf("the sandbox is lost: %v", err)
				}
				switch {
				case got.State == "running":
				case got.State == "stopped" && got.Reason == "hibernated":
					if _, err := d.c.Wake(ctx, sb.ID); err != nil {
						t.Fatalf("wake after the crash: %v", err)
					}
				default:
					t.Fatalf("after the crash the sandbox is %s (%s, %s): neither running nor hibernated", got.State, got.Reason, got.Error)
				}
				if out := sh(t, d, sb.ID, "kill -0 "+pid+" && echo kept"); out != "kept" {
					t.Fatalf("the process started before the hibernate is gone: %q", out)
				}
				assertDoctorClean(t, d)
			})
		}
	}
}
