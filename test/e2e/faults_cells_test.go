package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/secrets"
)

// The error-injection matrix's cells for volume attach, a warm pool's
// refill, hibernate and wake, and the secrets master key's rotation
// (faults_test.go holds the matrix and its runner).

// volumeAttachSteps: a create attaching a named volume that fails after
// the volume was recorded attached, or after it was mounted, gives the
// volume back: available again, its files as they were, and the next
// create attaches it.
func volumeAttachSteps() []faultStep {
	const vol = "attach-me"
	var steps []faultStep
	for _, p := range []string{"volume.attach.after-record", "volume.attach.after-mount"} {
		steps = append(steps, faultStep{op: "volume attach", point: p, soak: p != "volume.attach.after-mount",
			setup: func(t *testing.T, f *faultEnv) string {
				ctx := context.Background()
				if _, err := f.d.c.CreateVolume(ctx, api.CreateVolumeRequest{Name: vol}); err != nil {
					t.Fatal(err)
				}
				withVolume(t, f, vol, "echo kept-7f2 > /workspace/file")
				return ""
			},
			run: func(ctx context.Context, f *faultEnv, _ string) error {
				_, err := f.d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: vol}}})
				return err
			},
			check: func(t *testing.T, f *faultEnv, _ string) {
				v, err := f.d.c.GetVolume(context.Background(), vol)
				if err != nil || v.State != "available" || v.AttachedTo != "" {
					t.Fatalf("the volume after a failed attach: %+v %v", v, err)
				}
				if out := withVolume(t, f, vol, "cat /workspace/file"); out != "kept-7f2" {
					t.Fatalf("the volume's file after a failed attach: %q", out)
				}
				if err := f.d.c.DeleteVolume(context.Background(), vol); err != nil {
					t.Fatal(err)
				}
			}})
	}
	return steps
}

// withVolume runs script in a new sandbox with volume vol at /workspace,
// then deletes the sandbox (the volume is available again).
func withVolume(t *testing.T, f *faultEnv, vol, script string) string {
	t.Helper()
	ctx := context.Background()
	sb, err := f.d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: vol}}})
	if err != nil {
		t.Fatalf("create with volume %s: %v", vol, err)
	}
	out := sh(t, f.d, sb.ID, script)
	if _, err := f.d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	return out
}

// poolRefillSteps: a warm pool's refill runs behind the answer, so no
// request fails: the member whose step failed (its create's, or one after
// it) is removed, its tombstone and the daemon's log naming the point;
// the pool reaches its size once the point is disarmed (it fails its first
// hit only), and doctor finds no member stuck.
func poolRefillSteps() []faultStep {
	var steps []faultStep
	for _, p := range []string{"create.after-mount", "pool.refill.after-launch", "pool.refill.before-pause"} {
		steps = append(steps, faultStep{op: "pool refill", point: p, background: true, soak: p != "pool.refill.after-launch",
			run: func(ctx context.Context, f *faultEnv, _ string) error {
				_, err := f.d.c.SetPool(ctx, "base", 1)
				return err
			},
			check: func(t *testing.T, f *faultEnv, _ string) {
				ctx := context.Background()
				// The refill's log line names the member and the point
				// (after the member's undo: a create that failed tears
				// it down first).
				re := regexp.MustCompile(`refilling warm pool.* sandbox=(\S+) .*failpoint ` + regexp.QuoteMeta(p) + `: `)
				var m []string
				waitFor(t, "the refill's log line naming its failed member", func() bool {
					m = re.FindStringSubmatch(f.d.logs.String())
					return m != nil
				})
				waitFor(t, "the failed member "+m[1]+" removed", func() bool {
					sb, err := f.d.c.GetSandbox(ctx, m[1])
					return err == nil && sb.State == "deleted"
				})
				if sb, _ := f.d.c.GetSandbox(ctx, m[1]); !strings.Contains(sb.Reason+" "+sb.Error, "failpoint "+p) {
					t.Fatalf("the failed member's tombstone does not name the point: %+v", sb)
				}
				waitPoolState(t, f, "refilled to its size", func(p *api.Pool) bool {
					return p.Min == 1 && p.Ready == 1 && p.Starting == 0
				})
				assertDoctorClean(t, f.d)
				if _, err := f.d.c.SetPool(ctx, "base", 0); err != nil {
					t.Fatal(err)
				}
				waitPoolEmpty(t, f)
			}})
	}
	return steps
}

// waitPoolEmpty waits for every member of a pool made 0 to be gone, its
// directory too (a member being removed is no longer counted).
func waitPoolEmpty(t *testing.T, f *faultEnv) {
	t.Helper()
	waitPoolState(t, f, "emptied", func(p *api.Pool) bool { return p.Ready == 0 && p.Starting == 0 })
	waitFor(t, "every member's directory removed", func() bool {
		ents, err := os.ReadDir(filepath.Join(f.d.dataDir, "sandboxes"))
		return err == nil && len(ents) == 0
	})
}

func waitPoolState(t *testing.T, f *faultEnv, what string, ok func(p *api.Pool) bool) {
	t.Helper()
	var p *api.Pool
	var err error
	waitFor(t, "pool "+what, func() bool {
		p, err = f.d.c.GetPool(context.Background(), "base")
		return err == nil && ok(p)
	})
}

// hibernateSteps: on runsc (runc cannot checkpoint). A hibernate failing
// at a step leaves the sandbox running with the processes it had (a step
// after the save wakes it from its image); a wake failing at a step
// leaves it hibernated, its image whole, and the next wake brings back
// its processes. Ephemeral sandboxes: the kind a wrong judgement deletes.
// (wake.before-running is past the image's removal, where a wake only
// goes forward: a kill point, in TestCrashMidHibernateAndWake.)
func hibernateSteps() []faultStep {
	withProcess := func(t *testing.T, f *faultEnv) string {
		t.Helper()
		sb, err := f.d.c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Runtime: "runsc"})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID + " " + sh(t, f.d, sb.ID, "nohup sleep 100000 >/dev/null 2>&1 & echo $!")
	}
	kept := func(t *testing.T, f *faultEnv, target string) {
		t.Helper()
		id, pid, _ := strings.Cut(target, " ")
		if out := sh(t, f.d, id, "kill -0 "+pid+" && echo kept"); out != "kept" {
			t.Fatalf("the process started before is gone: %q", out)
		}
	}
	// make test: one step after the save (the hibernate undone by a wake
	// from the image) and one wake step with the container restored;
	// make soak: every step.
	quick := map[string]bool{"hibernate.after-stophost": true, "wake.after-restore": true}
	var steps []faultStep
	for _, p := range []string{"hibernate.after-quiesce", "hibernate.after-checkpoint", "hibernate.after-marker",
		"hibernate.after-stopping", "hibernate.after-stophost"} {
		steps = append(steps, faultStep{op: "hibernate", point: p, soak: !quick[p], setup: withProcess,
			run: func(ctx context.Context, f *faultEnv, target string) error {
				id, _, _ := strings.Cut(target, " ")
				_, err := f.d.c.Hibernate(ctx, id)
				return err
			},
			check: func(t *testing.T, f *faultEnv, target string) {
				id, _, _ := strings.Cut(target, " ")
				if sb, err := f.d.c.GetSandbox(context.Background(), id); err != nil || sb.State != "running" {
					t.Fatalf("after a failed hibernate: %+v %v", sb, err)
				}
				kept(t, f, target)
			}})
	}
	for _, p := range []string{"wake.after-starting", "wake.before-restore", "wake.after-restore", "wake.after-ready",
		"wake.after-marker"} {
		steps = append(steps, faultStep{op: "wake", point: p, soak: !quick[p],
			setup: func(t *testing.T, f *faultEnv) string {
				target := withProcess(t, f)
				id, _, _ := strings.Cut(target, " ")
				if _, err := f.d.c.Hibernate(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				return target
			},
			run: func(ctx context.Context, f *faultEnv, target string) error {
				id, _, _ := strings.Cut(target, " ")
				_, err := f.d.c.Wake(ctx, id)
				return err
			},
			check: func(t *testing.T, f *faultEnv, target string) {
				ctx := context.Background()
				id, _, _ := strings.Cut(target, " ")
				if sb, err := f.d.c.GetSandbox(ctx, id); err != nil || sb.State != "stopped" || sb.Reason != "hibernated" {
					t.Fatalf("after a failed wake: %+v %v", sb, err)
				}
				if _, err := f.d.c.Wake(ctx, id); err != nil {
					t.Fatalf("wake after the failed one: %v", err)
				}
				kept(t, f, target)
			}})
	}
	return steps
}

// rotationSteps: a master key rotation failing while it re-wraps, or
// after, keeps both keys (in memory and in the key file): every secret
// still opens, and rotating again finishes the job.
func rotationSteps() []faultStep {
	const value = "rotated-value-4d9a"
	printenv := func(t *testing.T, f *faultEnv, id string) string {
		t.Helper()
		return sh(t, f.d, id, "printenv ROTATED")
	}
	rotate := func(ctx context.Context, f *faultEnv) error {
		k, err := secrets.NewKey()
		if err != nil {
			return err
		}
		_, err = f.d.c.RotateSecretsKey(ctx, k.Encode())
		return err
	}
	var steps []faultStep
	for _, p := range []string{"secrets.rewrap", "secrets.rotate.after-rewrap"} {
		steps = append(steps, faultStep{op: "secret rotation", point: p, soak: p != "secrets.rewrap",
			setup: func(t *testing.T, f *faultEnv) string {
				ctx := context.Background()
				if _, err := f.d.c.SetSecret(ctx, "ROTATE", value); err != nil {
					t.Fatal(err)
				}
				sb, err := f.d.c.CreateSandbox(ctx, api.CreateSandboxRequest{
					Secrets: []api.SecretRef{{Name: "ROTATE", Env: "ROTATED"}}})
				if err != nil {
					t.Fatal(err)
				}
				return sb.ID
			},
			run: func(ctx context.Context, f *faultEnv, _ string) error { return rotate(ctx, f) },
			check: func(t *testing.T, f *faultEnv, id string) {
				if got := printenv(t, f, id); got != value {
					t.Fatalf("the secret after a failed rotation: %q", got)
				}
				kb, err := os.ReadFile(filepath.Join(f.d.dataDir, "secrets.key"))
				if err != nil {
					t.Fatal(err)
				}
				if keys, err := secrets.ParseKeys(kb); err != nil || len(keys) < 2 {
					t.Fatalf("the key file after a failed rotation holds %d keys (%v), want the old and the new", len(keys), err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := rotate(ctx, f); err != nil {
					t.Fatalf("rotating again: %v", err)
				}
				if got := printenv(t, f, id); got != value {
					t.Fatalf("the secret after rotating again: %q", got)
				}
			}})
	}
	return steps
}
