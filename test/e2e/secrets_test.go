package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/secrets"
)

func randomValue(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// dataDirHolds reports which of the files under dir (the daemon's data
// dir, sandboxes' bundles and the database with its WAL included) hold
// any of values in clear. Mounted sandbox roots are not walked: what a
// sandbox may hold in its own memory is not the question here.
func dataDirHolds(t *testing.T, dir string, values ...string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return nil // vanishing files of a live daemon
		}
		if de.IsDir() {
			switch de.Name() {
			case "rootfs", "layers", "rw", "pool", "images", "share", "run", "userns":
				return filepath.SkipDir
			}
			return nil
		}
		if !de.Type().IsRegular() {
			return nil
		}
		fi, err := de.Info()
		if err != nil || fi.Size() > 64<<20 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// TestSecretsEnvInjection: a secret set from stdin reaches the execs of the
// sandbox that references it as an env var, and nowhere else: not inspect,
// events, the daemon's log, argv in the sandbox, another sandbox, the
// bundle's config.json or the database file in clear. A new value reaches
// the next exec; the master key rotates while the daemon serves (values
// still open, after a restart too, with the old key gone); rm stops it at
// the next exec.
func TestSecretsEnvInjection(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	if !strings.Contains(d.logs.String(), "generated the secrets master key") {
		t.Fatalf("the daemon did not say it generated the master key:\n%s", tail(d.logs.String(), 2000))
	}
	if fi, err := os.Stat(filepath.Join(d.dataDir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.key: %v %v", fi, err)
	}
	v1, v2 := randomValue(t, "v1-"), randomValue(t, "v2-")
	if out, errOut, code := d.cliIn(v1, "secret", "set", "TOKEN"); code != 0 || out != "TOKEN\n" {
		t.Fatalf("secret set: %q %s", out, errOut)
	}
	if _, errOut, code := d.cliIn("", "secret", "set", "EMPTY"); code == 0 || !strings.Contains(errOut, "no value") {
		t.Fatalf("empty value accepted: %s", errOut)
	}
	out, _, code := d.cli("secret", "ls", "-o", "json")
	var list []api.Secret
	jsonDecode(t, out, &list)
	if code != 0 || len(list) != 1 || list[0].Name != "TOKEN" || strings.Contains(out, v1) {
		t.Fatalf("secret ls: %s", out)
	}
	oldKeyID := list[0].KeyID

	// A reference to a secret the tenant lacks is a 400 and makes nothing.
	if _, errOut, code := d.cli("create", "--secret", "NOPE"); code == 0 || !strings.Contains(errOut, `secret "NOPE" does not exist`) {
		t.Fatalf("create with a missing secret: %d %s", code, errOut)
	}
	if _, errOut, code := d.cli("create", "--secret", "TOKEN=egress:api.test"); code == 0 || !strings.Contains(errOut, "needs network mode egress") {
		t.Fatalf("egress reference: %d %s", code, errOut)
	}
	if _, errOut, code := d.cli("create", "--secret", "TOKEN=env:1BAD"); code == 0 || !strings.Contains(errOut, "env var") {
		t.Fatalf("bad env var: %d %s", code, errOut)
	}

	if _, errOut, code := d.cli("create", "--secret", "TOKEN", "--secret", "TOKEN"); code == 0 || !strings.Contains(errOut, "given twice") {
		t.Fatalf("one env var twice: %d %s", code, errOut)
	}
	id, errOut, code := d.cli("create", "--name", "withsecret", "--secret", "TOKEN=env:GH_TOKEN")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id = strings.TrimSpace(id)
	other, errOut, code := d.cli("create", "--name", "plain")
	if code != 0 {
		t.Fatalf("create plain: %s", errOut)
	}
	other = strings.TrimSpace(other)

	printenv := func(sb string) (string, int) {
		t.Helper()
		out, _, code := d.cli("exec", sb, "--", "printenv", "GH_TOKEN")
		return strings.TrimSpace(out), code
	}
	if got, code := printenv(id); code != 0 || got != v1 {
		t.Fatalf("exec env: %q %d", got, code)
	}
	if got, code := printenv(other); code == 0 || got != "" {
		t.Fatalf("the other sandbox got the secret: %q", got)
	}
	// Not in any process's argv in the sandbox, nor in its init's view.
	out, _, _ = d.cli("exec", id, "--", "sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null; cat /proc/1/environ 2>/dev/null; true")
	if strings.Contains(out, v1) {
		t.Fatalf("the value is in a cmdline or in init's environ:\n%s", out)
	}
	for _, args := range [][]string{{"inspect", id, "-o", "json"}, {"inspect", id}, {"events", id, "-o", "json"}, {"ls", "-o", "json"}} {
		if out, _, _ := d.cli(args...); strings.Contains(out, v1) {
			t.Fatalf("berth %v shows the value:\n%s", args, out)
		}
	}
	if out, _, _ := d.cli("inspect", id, "-o", "json"); !strings.Contains(out, "GH_TOKEN") {
		t.Fatalf("inspect does not show the reference:\n%s", out)
	}

	// A new value reaches the next exec.
	if _, errOut, code := d.cliIn(v2, "secret", "set", "TOKEN"); code != 0 {
		t.Fatalf("secret set again: %s", errOut)
	}
	if got, _ := printenv(id); got != v2 {
		t.Fatalf("after replacing: %q", got)
	}

	// Rotation while serving: every secret re-wrapped under the new key,
	// which alone is left in the key file; values still open.
	nk, err := secrets.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyDir := t.TempDir()
	kf := filepath.Join(keyDir, "new.key")
	if err := os.WriteFile(kf, []byte(nk.Encode()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = d.cli("secret", "rotate-key", "--new-key-file", kf)
	if code != 0 || !strings.Contains(out, nk.ID) || !strings.Contains(out, "1 secrets re-wrapped") || !strings.Contains(out, oldKeyID) {
		t.Fatalf("rotate-key: %q %s", out, errOut)
	}
	if got, _ := printenv(id); got != v2 {
		t.Fatalf("after rotation: %q", got)
	}
	out, _, _ = d.cli("secret", "ls", "-o", "json")
	jsonDecode(t, out, &list)
	if len(list) != 1 || list[0].KeyID != nk.ID {
		t.Fatalf("key id after rotation: %s", out)
	}
	kb, err := os.ReadFile(filepath.Join(d.dataDir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseKeys(kb)
	if err != nil || len(keys) != 1 || keys[0].ID != nk.ID {
		t.Fatalf("key file after rotation: %v %v", keys, err)
	}
	// The restarted daemon reads the rotated key file and opens the value.
	d.stop()
	d.start()
	if got, code := printenv(id); code != 0 || got != v2 {
		t.Fatalf("after restart: %q %d\n%s", got, code, tail(d.logs.String(), 2000))
	}
	// A daemon whose keyring lacks the key the stored secrets are sealed
	// under does not start (it would serve and fail every create naming
	// one): the refusal names the key id and the flag that brings it. With
	// that key back in the file it starts again.
	foreign, err := secrets.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	d.stop()
	if err := os.WriteFile(filepath.Join(d.dataDir, "secrets.key"), []byte(foreign.Encode()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.tryStart(); err == nil {
		t.Fatal("a daemon started without the master key its store's secrets are sealed under")
	} else if !strings.Contains(err.Error(), nk.ID) || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("the refusal does not name key %s and the flag: %v", nk.ID, err)
	}
	if err := os.WriteFile(filepath.Join(d.dataDir, "secrets.key"), append(kb, []byte(foreign.Encode()+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	if got, code := printenv(id); code != 0 || got != v2 {
		t.Fatalf("after restart with the key back: %q %d", got, code)
	}

	// Never in clear in the database (with its WAL), the bundle, the log.
	if hits := dataDirHolds(t, d.dataDir, v1, v2); len(hits) > 0 {
		t.Fatalf("files under the data dir hold a value in clear: %v", hits)
	}
	if log := d.logs.String(); strings.Contains(log, v1) || strings.Contains(log, v2) {
		t.Fatal("the daemon's log holds a value")
	}

	// Revocation: the next exec no longer gets it.
	if _, errOut, code := d.cli("secret", "rm", "TOKEN"); code != 0 {
		t.Fatalf("secret rm: %s", errOut)
	}
	if got, code := printenv(id); code == 0 || got != "" {
		t.Fatalf("after rm: %q %d", got, code)
	}
	if _, errOut, code := d.cli("secret", "rm", "TOKEN"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("rm twice: %s", errOut)
	}
}

// TestSecretsSealedInPostgres: with PostgreSQL as the store and the master
// key from --secrets-key-file, the secrets row holds the name and key id
// but not the value, and the value still reaches an exec.
func TestSecretsSealedInPostgres(t *testing.T) {
	parallel(t)
	url := pgURL(t)
	k, err := secrets.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	kf := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(kf, []byte(k.Encode()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonWith(t, "--store", url, "--secrets-key-file", kf)
	if !strings.Contains(d.logs.String(), "source=file") || strings.Contains(d.logs.String(), k.Encode()) {
		t.Fatalf("keyring source not logged, or the key logged:\n%s", tail(d.logs.String(), 2000))
	}
	v := randomValue(t, "pg-")
	if _, errOut, code := d.cliIn(v, "secret", "set", "PGTOKEN"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	rows, err := exec.Command("psql", "-v", "ON_ERROR_STOP=1", "-At", url, "-c", "SELECT * FROM secrets").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v %s", err, rows)
	}
	if !strings.Contains(string(rows), "PGTOKEN") || !strings.Contains(string(rows), k.ID) || strings.Contains(string(rows), v) {
		t.Fatalf("secrets rows: want the name and key id, not the value:\n%s", rows)
	}
	id, errOut, code := d.cli("create", "--secret", "PGTOKEN")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	out, _, code := d.cli("exec", strings.TrimSpace(id), "--", "printenv", "PGTOKEN")
	if code != 0 || strings.TrimSpace(out) != v {
		t.Fatalf("exec env: %q %d", out, code)
	}
}

// TestSecretsEnvRunsc: the runsc class gets secret env the same way (over
// the agent channel, per exec), and its spec holds no value.
func TestSecretsEnvRunsc(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	v := randomValue(t, "gv-")
	if _, errOut, code := d.cliIn(v, "secret", "set", "GV"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	id, errOut, code := d.cli("create", "--runtime", "runsc", "--secret", "GV=env:GV_TOKEN")
	if code != 0 {
		t.Fatalf("create runsc: %s", errOut)
	}
	id = strings.TrimSpace(id)
	out, errOut, code := d.cli("exec", id, "--", "sh", "-c", `printf %s "$GV_TOKEN"`)
	if code != 0 || out != v {
		t.Fatalf("runsc exec env: %q %d %s", out, code, errOut)
	}
	if hits := dataDirHolds(t, d.dataDir, v); len(hits) > 0 {
		t.Fatalf("files under the data dir hold the value: %v", hits)
	}
}
