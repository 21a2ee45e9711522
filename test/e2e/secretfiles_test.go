package e2e

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFilesRunc and TestSecretFilesRunsc: a file reference puts the
// value at its path on a tmpfs at /run/secrets, 0400 and owned by the
// sandbox's default user; it is in no diff, archive, fork's writable
// layer, inspect, event, log or data-dir file; it is back after a
// stop/start; a replaced value is pushed to the running sandbox; rm
// removes it from the running sandbox and it stays gone after a start.
func TestSecretFilesRunc(t *testing.T) {
	parallel(t)
	testSecretFiles(t, "runc")
}
func TestSecretFilesRunsc(t *testing.T) {
	parallel(t)
	testSecretFiles(t, "runsc")
}

func testSecretFiles(t *testing.T, rt string) {
	d := startDaemon(t)
	v1, v2 := randomValue(t, "f1-"), randomValue(t, "f2-")
	if _, errOut, code := d.cliIn(v1, "secret", "set", "DBPASS"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	// Refusals: a path outside /run/secrets, one with .., a path twice.
	for _, bad := range [][]string{
		{"--secret", "DBPASS=file:/etc/dbpass"},
		{"--secret", "DBPASS=file:/run/secrets/../x"},
		{"--secret", "DBPASS=file:/run/secrets/a", "--secret", "DBPASS=file:/run/secrets/a"},
		{"--secret", "NOPE=file:/run/secrets/nope"},
	} {
		if _, errOut, code := d.cli(append([]string{"create", "--runtime", rt}, bad...)...); code == 0 || errOut == "" {
			t.Fatalf("create %v accepted", bad)
		}
	}
	// A file and an env var of one secret are two references: fine.
	id, errOut, code := d.cli("create", "--runtime", rt, "--user", "1000:1000",
		"--secret", "DBPASS=file:/run/secrets/db/pass", "--secret", "DBPASS=env:DBPASS")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id = strings.TrimSpace(id)

	check := func(when, want string) {
		t.Helper()
		out, errOut, code := d.cli("exec", "-u", "0", id, "--", "sh", "-c", "stat -c '%a %u %g' /run/secrets/db/pass && cat /run/secrets/db/pass")
		if want == "" {
			if code == 0 {
				t.Fatalf("%s: the file is still there: %q", when, out)
			}
			return
		}
		if code != 0 || out != "400 1000 1000\n"+want {
			t.Fatalf("%s: %q %d %s", when, out, code, errOut)
		}
	}
	check("after create", v1)
	// The default user reads it; /run/secrets is a tmpfs.
	if out, errOut, code := d.cli("exec", id, "--", "cat", "/run/secrets/db/pass"); code != 0 || out != v1 {
		t.Fatalf("the default user reads: %q %s", out, errOut)
	}
	out, _, _ := d.cli("exec", id, "--", "cat", "/proc/mounts")
	if !hasMount(out, "/run/secrets", "tmpfs") {
		t.Fatalf("/run/secrets is not a tmpfs:\n%s", out)
	}

	// Not in the writable layer: diff, an archive of /run, a fork child's
	// layer (the child gets its own file at its own start).
	if out, errOut, code := d.cli("diff", id); code != 0 || strings.Contains(out, "secrets") {
		t.Fatalf("diff shows the secrets (%d %s):\n%s", code, errOut, out)
	}
	tarPath := filepath.Join(t.TempDir(), "run.tar")
	if _, errOut, code := d.cli("export", id, "/run", "-o", tarPath); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	if names := tarNames(t, tarPath); strings.Contains(strings.Join(names, " "), "pass") {
		t.Fatalf("the export holds the file: %v", names)
	}
	if b, _ := os.ReadFile(tarPath); bytes.Contains(b, []byte(v1)) {
		t.Fatal("the export holds the value")
	}
	kid, errOut, code := d.cli("fork", id)
	if code != 0 {
		t.Fatalf("fork: %s", errOut)
	}
	kid = strings.TrimSpace(kid)
	if out, errOut, code := d.cli("diff", kid); code != 0 || strings.Contains(out, "secrets") {
		t.Fatalf("the child's diff shows the secrets (%d %s):\n%s", code, errOut, out)
	}
	if out, errOut, code := d.cli("exec", kid, "--", "cat", "/run/secrets/db/pass"); code != 0 || out != v1 {
		t.Fatalf("the child's own file: %q %s", out, errOut)
	}
	if _, errOut, code := d.cli("rm", "-f", kid); code != 0 {
		t.Fatalf("rm child: %s", errOut)
	}

	// Back after stop/start; while stopped, nothing of it is on disk
	// (the tmpfs went with the container): the diff shows none.
	if _, errOut, code := d.cli("stop", id); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	if out, errOut, code := d.cli("diff", id); code != 0 || strings.Contains(out, "secrets") {
		t.Fatalf("the stopped sandbox's diff shows the secrets (%d %s):\n%s", code, errOut, out)
	}
	if _, errOut, code := d.cli("start", id); code != 0 {
		t.Fatalf("start: %s", errOut)
	}
	check("after stop/start", v1)

	// The sandbox's root replaces the directory with a symlink to /etc
	// and plants a file: the push of a new value follows no symlink (no
	// /etc/pass), writes the file on the tmpfs and removes the plant.
	if out, errOut, code := d.cli("exec", "-u", "0", id, "--", "sh", "-c", "rm -rf /run/secrets/db && ln -s /etc /run/secrets/db && echo x > /run/secrets/planted"); code != 0 {
		t.Fatalf("plant: %q %s", out, errOut)
	}
	if _, errOut, code := d.cliIn(v2, "secret", "set", "DBPASS"); code != 0 {
		t.Fatalf("secret set again: %s", errOut)
	}
	check("after replacing", v2)
	if out, _, code := d.cli("exec", "-u", "0", id, "--", "sh", "-c", "ls -A /run/secrets; test ! -e /etc/pass"); code != 0 || out != "db\n" {
		t.Fatalf("after the push over a planted symlink: %q %d", out, code)
	}

	// Nowhere in clear: inspect, events, the log, the data dir.
	for _, args := range [][]string{{"inspect", id, "-o", "json"}, {"events", id, "-o", "json"}} {
		if out, _, _ := d.cli(args...); strings.Contains(out, v1) || strings.Contains(out, v2) {
			t.Fatalf("berth %v shows a value:\n%s", args, out)
		}
	}
	if out, _, _ := d.cli("inspect", id, "-o", "json"); !strings.Contains(out, "/run/secrets/db/pass") {
		t.Fatalf("inspect does not show the file reference:\n%s", out)
	}
	if hits := dataDirHolds(t, d.dataDir, v1, v2); len(hits) > 0 {
		t.Fatalf("files under the data dir hold a value in clear: %v", hits)
	}
	if log := d.logs.String(); strings.Contains(log, v1) || strings.Contains(log, v2) {
		t.Fatal("the daemon's log holds a value")
	}

	// rm: gone from the running sandbox, and after a start.
	if _, errOut, code := d.cli("secret", "rm", "DBPASS"); code != 0 {
		t.Fatalf("secret rm: %s", errOut)
	}
	check("after rm (running)", "")
	if _, errOut, code := d.cli("stop", id); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	if _, errOut, code := d.cli("start", id); code != 0 {
		t.Fatalf("start: %s", errOut)
	}
	check("after rm and start", "")
	if out, _, _ := d.cli("events", id, "-o", "json"); !strings.Contains(out, "secret DBPASS changed") {
		t.Fatalf("no event of the push:\n%s", out)
	}
}

func hasMount(mounts, dir, fstype string) bool {
	for _, l := range strings.Split(mounts, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[1] == dir && f[2] == fstype {
			return true
		}
	}
	return false
}

func tarNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}
