package e2e

import (
	"fmt"
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
		Scoped    []any    `json:"scoped"`
		Expanded  string   `json:"expanded"`
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
	if fmt.Sprint(got.Scoped) != "[0 bar 0 ]" {
		t.Errorf("E2B's `bash command scoped env vars` (echo $FOO with envs, then sudo echo \"$FOO\" without): %v, want [0 bar 0 ]", got.Scoped)
	}
	if got.Expanded != "bar" {
		t.Errorf("sudo echo \"$FOO\" with envs FOO=bar: %q, want bar", got.Expanded)
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

// TestE2BReadmeExamples runs the README examples of e2b-dev/E2B, the e2b
// SDK's and the code interpreter's (test/e2b/readme.mjs): each prints
// what the README says it prints. e2b's as written imports the SDK's
// default export, which e2b 2.51.0 makes its namespace, so it fails in the
// SDK before any request (recorded, not berth's); it runs with the named
// import.
func TestE2BReadmeExamples(t *testing.T) {
	parallel(t)
	_, url, key := e2bDaemon(t)
	var got struct {
		OK            bool     `json:"ok"`
		Failure       string   `json:"failure"`
		Printed       []string `json:"printed"`
		DefaultImport string   `json:"defaultImport"`
	}
	runE2BScript(t, "readme.mjs", url, key, &got)
	t.Logf("e2b's example with the README's default import: %s", got.DefaultImport)
	if !got.OK {
		t.Fatalf("the README examples failed: %s", got.Failure)
	}
	if want := []string{"Hello from E2B!\n", "2"}; !slices.Equal(got.Printed, want) {
		t.Errorf("the README examples printed %q, want %q", got.Printed, want)
	}
}
