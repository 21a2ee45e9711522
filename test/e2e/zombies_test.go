package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestNoZombiesAfterSandboxesEnd: sandboxes of both runtime classes end
// in every way — their init exits (stop), memory runs out (the OOM killer
// kills in the sandbox, then it is deleted), the init is SIGKILLed from
// the host, or the sandbox is deleted — and no process the runtimes
// left to the daemon (container inits, gVisor's sandbox and gofer) stays a
// zombie under it. BERTH_SOAK runs 40 sandboxes per way and class.
func TestNoZombiesAfterSandboxesEnd(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	per := 1
	if os.Getenv("BERTH_SOAK") != "" {
		per = 40
	}
	ways := []struct {
		name string
		end  func(t *testing.T, sb *api.Sandbox)
	}{
		{"exit", func(t *testing.T, sb *api.Sandbox) {
			if _, err := d.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			d.c.DeleteSandbox(ctx, sb.ID, true)
		}},
		{"oom", func(t *testing.T, sb *api.Sandbox) {
			// Memory exhausted: the kernel's OOM killer (or, on runsc,
			// the sentry's, or the host's on the sentry) kills in the
			// sandbox; then the sandbox is deleted.
			d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", "b = bytearray(2 << 30)"},
				TimeoutSeconds: 60}, io.Discard, io.Discard)
			d.c.DeleteSandbox(ctx, sb.ID, true)
		}},
		{"sigkill-from-host", func(t *testing.T, sb *api.Sandbox) {
			b, err := os.ReadFile(filepath.Join(d.dataDir, "sandboxes", sb.ID, "bundle", "init.pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitEnded(t, d, sb.ID)
			d.c.DeleteSandbox(ctx, sb.ID, true)
		}},
		{"delete", func(t *testing.T, sb *api.Sandbox) {
			if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, rt := range []string{"runc", "runsc"} {
		for _, w := range ways {
			t.Run(rt+"/"+w.name, func(t *testing.T) {
				for range per {
					sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt,
						Resources: api.Resources{MemoryBytes: 256 << 20}})
					if err != nil {
						t.Fatal(err)
					}
					w.end(t, sb)
				}
				// The last sandbox's processes end a moment after its
				// delete returns; a zombie that stays is a leak.
				deadline := time.Now().Add(30 * time.Second)
				for {
					z := zombiesOf(t, d.pid())
					if len(z) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("zombies under the daemon after %d %s sandboxes ended by %s: %v", per, rt, w.name, z)
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
}

// waitEnded waits until the daemon saw sandbox id end (its state leaves
// running).
func waitEnded(t *testing.T, d *daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		sb, err := d.c.GetSandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != "running" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still running after its init was killed", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// zombiesOf lists the zombie children of process ppid ("pid (comm)").
func zombiesOf(t *testing.T, ppid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] != "Z" || f[1] != strconv.Itoa(ppid) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s", e.Name(), string(b[strings.IndexByte(string(b), '('):i+1])))
	}
	return out
}
