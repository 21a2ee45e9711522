package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCLILinksNoDaemon keeps the CLI build small: what only the daemon,
// the bench and the attack suite need (the engine, the backends, the
// stores, the Kubernetes client, the test harness) must not reach
// bin/berth, or every `berth exec` pays its start-up again.
func TestCLILinksNoDaemon(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "berthcli", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{
		"github.com/berth-sh/berth/internal/engine",
		"github.com/berth-sh/berth/internal/daemon",
		"github.com/berth-sh/berth/internal/node",
		"github.com/berth-sh/berth/internal/store/", // the drivers; the store's types may come with internal/access
		"github.com/berth-sh/berth/internal/testenv",
		"github.com/berth-sh/berth/internal/bench",
		"github.com/berth-sh/berth/internal/selftest",
		"k8s.io/",
		"github.com/jackc/pgx",
		"modernc.org/sqlite",
	}
	pkgs := strings.Fields(string(out))
	for _, p := range pkgs {
		for _, b := range banned {
			if strings.HasPrefix(p, b) {
				t.Errorf("the CLI build links %s", p)
			}
		}
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list gave %d packages: %q", len(pkgs), out)
	}
	t.Logf("the CLI links %d packages", len(pkgs))
}
