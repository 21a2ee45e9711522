package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestCopiesOwnedBySandboxUser (#36 item 3): what berth cp and the files
// API create in a --user 1000 sandbox belongs to uid 1000, so the
// sandbox's own processes edit it (a file, a directory made by the copy,
// a file written through the API, a copy from another sandbox); --user
// gives it to another user; --preserve-owner keeps the source's owners.
// On runc and runsc.
func TestCopiesOwnedBySandboxUser(t *testing.T) {
	parallel(t)
	ownerScenario(t, startDaemon(t), "")
}

func TestCopiesOwnedBySandboxUserRunsc(t *testing.T) {
	parallel(t)
	ownerScenario(t, startRunscDaemon(t), "runsc")
}

func ownerScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{User: "1000", Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	for p, c := range map[string]string{"f.txt": "one\n", "tree/a.txt": "a\n", "tree/sub/b.txt": "b\n"} {
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp := func(args ...string) {
		t.Helper()
		if out, e, code := d.cli(append([]string{"cp"}, args...)...); code != 0 {
			t.Fatalf("cp %v: %d %q %q", args, code, out, e)
		}
	}
	owners := func(id string, paths ...string) string {
		t.Helper()
		return strings.Join(strings.Fields(execOut(t, d, id, append([]string{"stat", "-c", "%u:%g"}, paths...)...)), " ")
	}
	cp(filepath.Join(host, "f.txt"), sb.ID+":/tmp/f.txt")
	cp(filepath.Join(host, "tree"), sb.ID+":/tmp/tree")
	if _, err := d.c.WriteFile(ctx, sb.ID, "/tmp/w.txt", 0o644, strings.NewReader("w\n")); err != nil {
		t.Fatal(err)
	}
	execOut(t, d, other.ID, "sh", "-c", "mkdir -p /src/in && echo x > /src/in/x && chown -R 1234:1234 /src")
	cp(other.ID+":/src", sb.ID+":/tmp/fromother")
	if got := owners(sb.ID, "/tmp/f.txt", "/tmp/tree", "/tmp/tree/sub", "/tmp/tree/sub/b.txt", "/tmp/w.txt",
		"/tmp/fromother", "/tmp/fromother/in/x"); got != strings.TrimSpace(strings.Repeat("1000:1000 ", 7)) {
		t.Fatalf("owners of what was copied in: %s, want 1000:1000 each", got)
	}
	// The sandbox's user (exec's default) edits and adds.
	if out := execOut(t, d, sb.ID, "sh", "-c", "echo two >> /tmp/f.txt && echo c > /tmp/tree/c.txt && "+
		"echo more >> /tmp/tree/sub/b.txt && echo w2 >> /tmp/w.txt && echo y > /tmp/fromother/in/y && id -u && cat /tmp/f.txt"); out != "1000\none\ntwo\n" {
		t.Fatalf("the sandbox's user editing the copies: %q", out)
	}

	// A directory the files API makes (and the parents it makes on the
	// way) is the sandbox's user's too; a parent that was there stays
	// root's.
	if err := d.c.Mkdir(ctx, sb.ID, "/tmp/made/by/api", true); err != nil {
		t.Fatal(err)
	}
	if got := owners(sb.ID, "/tmp", "/tmp/made", "/tmp/made/by", "/tmp/made/by/api"); got != "0:0 1000:1000 1000:1000 1000:1000" {
		t.Fatalf("owners of what mkdir made: %s, want /tmp root's and the rest 1000:1000", got)
	}
	if out := execOut(t, d, sb.ID, "sh", "-c", "echo in > /tmp/made/by/api/f && cat /tmp/made/by/api/f"); out != "in\n" {
		t.Fatalf("the sandbox's user writing into a directory mkdir made: %q", out)
	}

	// --user: another user of the sandbox.
	cp("--user", "0", filepath.Join(host, "f.txt"), sb.ID+":/tmp/root.txt")
	if _, err := d.c.WriteFileWith(ctx, sb.ID, "/tmp/w2.txt", 0o644, strings.NewReader("w\n"), client.WriteOptions{User: "2000:3000"}); err != nil {
		t.Fatal(err)
	}
	if got := owners(sb.ID, "/tmp/root.txt", "/tmp/w2.txt"); got != "0:0 2000:3000" {
		t.Fatalf("owners with --user: %s", got)
	}
	// --preserve-owner: the local files' owners; between sandboxes, the
	// source's.
	if err := filepath.Walk(filepath.Join(host, "tree"), func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 4321, 4322)
	}); err != nil {
		t.Fatal(err)
	}
	cp("--preserve-owner", filepath.Join(host, "tree"), sb.ID+":/tmp/kept")
	cp("-a", filepath.Join(host, "tree", "a.txt"), sb.ID+":/tmp/kept-a.txt")
	cp("-a", other.ID+":/src", sb.ID+":/tmp/kept-other")
	if got := owners(sb.ID, "/tmp/kept", "/tmp/kept/sub/b.txt", "/tmp/kept-a.txt", "/tmp/kept-other/in/x"); got != "4321:4322 4321:4322 4321:4322 1234:1234" {
		t.Fatalf("owners with --preserve-owner: %s", got)
	}
	if _, e, code := d.cli("cp", "-a", "--user", "1", filepath.Join(host, "f.txt"), sb.ID+":/tmp/x"); code == 0 || !strings.Contains(e, "do not go together") {
		t.Fatalf("-a with --user: %d %q", code, e)
	}
	for _, id := range []string{sb.ID, other.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
}
