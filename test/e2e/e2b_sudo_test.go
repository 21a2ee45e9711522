package e2e

import (
	"slices"
	"strings"
	"testing"
)

// TestE2BSudo (#33) drives berth's sudo through the door with the
// unmodified e2b SDK (test/e2b/sudo.mjs): a sandbox the door makes gives
// its user passwordless sudo, as E2B's templates do — sudo echo, sudo id
// -u as 0, the environment reset unless -E, a file written as root that
// the user cannot read, exit codes — and E2B's own `bash command scoped
// env vars` command passes.
func TestE2BSudo(t *testing.T) {
	parallel(t)
	d, url, key := e2bDaemon(t)
	var got struct {
		OK        bool     `json:"ok"`
		Failure   string   `json:"failure"`
		Echo      string   `json:"echo"`
		IDs       []string `json:"ids"`
		Scoped    string   `json:"scoped"`
		Preserved []string `json:"preserved"`
		Reset     []string `json:"reset"`
		RootFile  string   `json:"rootFile"`
		RootRead  string   `json:"rootRead"`
		UserRead  string   `json:"userRead"`
		Etc       string   `json:"etc"`
		Exit      any      `json:"exit"`
	}
	runE2BScript(t, "sudo.mjs", url, key, &got)
	t.Logf("the SDK saw: %+v", got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s", got.Failure)
	}
	if got.Echo != "hello" {
		t.Errorf("sudo echo hello: %q", got.Echo)
	}
	if !slices.Equal(got.IDs, []string{"1000", "0"}) {
		t.Errorf("id -u; sudo id -u: %q, want 1000 then 0", got.IDs)
	}
	if got.Scoped != "bar" {
		t.Errorf("E2B's `bash command scoped env vars` (sudo echo \"$FOO\"): %q, want bar", got.Scoped)
	}
	if !slices.Equal(got.Preserved, []string{"FOO=kept"}) || len(got.Reset) != 0 {
		t.Errorf("sudo -E env: %q (want FOO=kept); sudo env: %q (want none)", got.Preserved, got.Reset)
	}
	if got.RootFile != "0:600" || strings.TrimSpace(got.RootRead) != "root-data" || got.UserRead != "exit 1" {
		t.Errorf("a file written through sudo: %q, read as root %q, as user %q; want 0:600, root-data, exit 1",
			got.RootFile, got.RootRead, got.UserRead)
	}
	if got.Etc != "0" {
		t.Errorf("sudo tee /etc/...: owner %q, want 0", got.Etc)
	}
	if n, ok := got.Exit.(float64); !ok || n != 3 {
		t.Errorf("sudo sh -c 'exit 3' through the SDK: %v, want a CommandExitError with 3", got.Exit)
	}
	if out, _, code := d.cli("ls"); code != 0 || strings.Count(strings.TrimSpace(out), "\n") > 0 {
		t.Errorf("berth ls after the script: %q (exit %d)", out, code)
	}
}
