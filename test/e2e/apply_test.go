package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestApplyBuildsOnceAndRollsPool(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", "main.sh"), []byte("echo from-app\n"), 0o755)
	file := filepath.Join(dir, "tools.yaml")
	write := func(version string) {
		os.WriteFile(file, []byte(`name: tools
from: base
steps:
  - run: mkdir -p /opt/tools && echo `+version+` > /opt/tools/version
  - copy: {src: ./app, dst: /opt/app}
  - env: {TOOLS: "yes"}
  - workdir: /opt/app
resources: {cpus: 1, memory: 256Mi, pids: 128}
pool: {min: 1}
`), 0o644)
	}
	write("v1")
	out, errOut, code := d.cli("apply", "-f", file)
	if code != 0 || strings.TrimSpace(out) != "tools" {
		t.Fatalf("apply: %q %q", out, errOut)
	}
	if strings.Contains(errOut, "(cached)") {
		t.Fatalf("first apply used a cache: %s", errOut)
	}
	run := func() string {
		t.Helper()
		o, e, c := d.cli("run", "--template", "tools", "--", "sh", "-c", "cat /opt/tools/version; sh ./main.sh; echo $TOOLS; pwd")
		if c != 0 {
			t.Fatalf("run in applied template: %q %q", o, e)
		}
		return o
	}
	if got := run(); got != "v1\nfrom-app\nyes\n/opt/app\n" {
		t.Fatalf("applied template: %q", got)
	}
	// Applying the same file again builds nothing.
	_, errOut, code = d.cli("apply", "-f", file)
	if code != 0 || strings.Count(errOut, "(cached)") != 2 || !strings.Contains(errOut, "up to date") {
		t.Fatalf("second apply was not a no-op:\n%s", errOut)
	}
	// The pool fills with the build.
	waitReady := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := d.c.GetPool(ctx, "tools")
			if err == nil && p.Ready == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tools pool: %+v %v", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReady()
	// A change rebuilds from the changed step on and rolls the pool over.
	write("v2")
	_, errOut, code = d.cli("apply", "-f", file)
	if code != 0 || strings.Contains(errOut, "step 1/4: run mkdir -p /opt/tools && echo v2 > /opt/tools/version (cached)") {
		t.Fatalf("changed apply:\n%s", errOut)
	}
	waitReady()
	if got := run(); got != "v2\nfrom-app\nyes\n/opt/app\n" {
		t.Fatalf("after change: %q (a pool member of the old build was handed out?)", got)
	}
	// A bad file gets one clear line.
	os.WriteFile(file, []byte("name: x\nfrom: base\nsteps:\n  - run: a\n    workdir: /b\n"), 0o644)
	if _, e, c := d.cli("apply", "-f", file); c == 0 || !strings.Contains(e, "exactly one") {
		t.Fatalf("bad file: %d %q", c, e)
	}
}
