package agentd

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
	"golang.org/x/sys/unix"
)

// mountSecretsTmpfs mounts a tmpfs at root/run/secrets (the test runs as
// root, as the e2e suite does) and unmounts it at the end.
func mountSecretsTmpfs(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, "run/secrets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=256,mode=755"); err != nil {
		t.Fatalf("mount tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir
}

func TestSecretFilesOp(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	writeFile(t, a.root, "etc/passwd", "root:x:0:0::/root:/bin/sh\ndev:x:1000:1001::/home/dev:/bin/sh\n")
	files := []wire.SecretFile{{Path: "/run/secrets/db/pass", Data: []byte("s3cret")}, {Path: "/run/secrets/tok", Data: []byte("t0k")}}

	// Not a tmpfs (a directory of the writable layer): refused, nothing
	// written.
	if err := os.MkdirAll(filepath.Join(a.root, "run/secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantCategory(t, c.SecretFiles(ctx, "dev", files), errdefs.ErrConflict)
	if ents, _ := os.ReadDir(filepath.Join(a.root, "run/secrets")); len(ents) != 0 {
		t.Fatalf("written to a non-tmpfs: %v", ents)
	}

	dir := mountSecretsTmpfs(t, a.root)
	outside, check := sentinel(t)
	// The sandbox planted symlinks out and a stale file with a hard link.
	symlink(t, outside, filepath.Join(dir, "db"))
	symlink(t, filepath.Join(outside, "sentinel"), filepath.Join(dir, "tok"))
	writeFile(t, dir, "old", "old-value")
	if err := os.Link(filepath.Join(dir, "old"), filepath.Join(dir, "old-link")); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(dir, "old"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	if err := c.SecretFiles(ctx, "dev", files); err != nil {
		t.Fatal(err)
	}
	check()
	for _, f := range files {
		p := filepath.Join(a.root, f.Path)
		b, err := os.ReadFile(p)
		st, serr := os.Lstat(p)
		if err != nil || serr != nil || !bytes.Equal(b, f.Data) || st.Mode() != 0o400 {
			t.Fatalf("%s: %q %v %v %v", f.Path, b, st.Mode(), err, serr)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 1000 || s.Gid != 1001 {
			t.Fatalf("%s owned by %d:%d", f.Path, s.Uid, s.Gid)
		}
	}
	names := dirNames(t, dir)
	if names != "db tok" {
		t.Fatalf("the tmpfs holds %s", names)
	}
	// The removed file was overwritten before the unlink: the inode a
	// process still holds reads zeros.
	b := make([]byte, 9)
	if _, err := held.ReadAt(b, 0); err != nil || !bytes.Equal(b, make([]byte, 9)) {
		t.Fatalf("the removed file still reads %q %v", b, err)
	}

	// The next sync without tok removes it (revocation); a new value
	// replaces the old one; root ("") owns it.
	if err := c.SecretFiles(ctx, "", []wire.SecretFile{{Path: "/run/secrets/db/pass", Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "db/pass")); err != nil || string(b) != "new" {
		t.Fatalf("replaced: %q %v", b, err)
	}
	if names := dirNames(t, dir); names != "db" {
		t.Fatalf("after revocation the tmpfs holds %s", names)
	}
	// An empty list empties it.
	if err := c.SecretFiles(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); names != "" {
		t.Fatalf("after an empty sync: %s", names)
	}

	// Refused requests change nothing.
	for _, bad := range [][]wire.SecretFile{
		{{Path: "/run/secrets/../etc/passwd", Data: []byte("x")}},
		{{Path: "/run/secrets/a/./b", Data: []byte("x")}},
		{{Path: "/etc/x", Data: []byte("x")}},
		{{Path: "/run/secrets", Data: []byte("x")}},
		{{Path: "/run/secrets/a", Data: []byte("x")}, {Path: "/run/secrets/a", Data: []byte("y")}},
		{{Path: "/run/secrets/a", Data: []byte("x")}, {Path: "/run/secrets/a/b", Data: []byte("y")}},
		{{Path: "/run/secrets/big", Data: make([]byte, wire.MaxSecretFileBytes+1)}},
	} {
		if err := c.SecretFiles(ctx, "", bad); err == nil {
			t.Fatalf("accepted %v", bad[0].Path)
		}
	}
	many := make([]wire.SecretFile, wire.MaxSecretFiles+1)
	for i := range many {
		many[i] = wire.SecretFile{Path: "/run/secrets/f" + strconv.Itoa(i), Data: []byte("x")}
	}
	wantCategory(t, c.SecretFiles(ctx, "", many), errdefs.ErrTooLarge)
	total := make([]wire.SecretFile, 9)
	for i := range total {
		total[i] = wire.SecretFile{Path: "/run/secrets/g" + strconv.Itoa(i), Data: make([]byte, wire.MaxSecretFileBytes)}
	}
	wantCategory(t, c.SecretFiles(ctx, "", total), errdefs.ErrTooLarge)
	if names := dirNames(t, dir); names != "" {
		t.Fatalf("a refused request wrote %s", names)
	}
	// An unknown user is refused.
	if err := c.SecretFiles(ctx, "nobody-here", files); err == nil {
		t.Fatal("unknown owner accepted")
	}
}

// TestSecretFilesDirSymlink: /run/secrets itself a symlink (to a tmpfs
// elsewhere) is not followed.
func TestSecretFilesDirSymlink(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	other := mountSecretsTmpfs(t, filepath.Join(a.root, "elsewhere"))
	if err := os.MkdirAll(filepath.Join(a.root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "../elsewhere/run/secrets", filepath.Join(a.root, "run/secrets"))
	if err := c.SecretFiles(ctx, "", []wire.SecretFile{{Path: "/run/secrets/x", Data: []byte("v")}}); err == nil {
		t.Fatal("a symlinked /run/secrets was followed")
	}
	if names := dirNames(t, other); names != "" {
		t.Fatalf("written through the symlink: %s", names)
	}
}

func dirNames(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return strings.Join(n, " ")
}

// TestSecretFilesEgressCA: the egress CA bundle is the image's system
// bundle (else the daemon's) followed by the CA, 0444 root's, kept beside
// the secret files; bounds and its reserved path are refused.
func TestSecretFilesEgressCA(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	dir := mountSecretsTmpfs(t, a.root)
	ca := []byte("-----BEGIN CERTIFICATE-----\nsandbox-ca\n-----END CERTIFICATE-----\n")
	files := []wire.SecretFile{{Path: "/run/secrets/tok", Data: []byte("t0k")}}
	bundle := filepath.Join(dir, filepath.Base(wire.EgressCABundle))

	// No system bundle in the image: the daemon's is used.
	if err := c.SecretFilesCA(ctx, "", files, ca, []byte("host-system-cas\n")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bundle)
	if err != nil || string(b) != "host-system-cas\n\n"+string(ca) {
		t.Fatalf("bundle %q %v", b, err)
	}
	if fi, _ := os.Stat(bundle); fi.Mode().Perm() != 0o444 {
		t.Fatalf("bundle mode %v", fi.Mode())
	}
	// The image's own bundle wins, and a symlinked one is followed only
	// inside the root.
	writeFile(t, a.root, "etc/ssl/certs/ca-certificates.crt", "image-system-cas\n")
	if err := c.SecretFilesCA(ctx, "", files, ca, []byte("host-system-cas\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(bundle); string(b) != "image-system-cas\n\n"+string(ca) {
		t.Fatalf("bundle %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tok")); string(b) != "t0k" {
		t.Fatalf("the secret file beside the bundle: %q", b)
	}
	// A delivery without the CA removes the bundle.
	if err := c.SecretFiles(ctx, "", files); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Fatalf("bundle left: %v", err)
	}
	wantCategory(t, c.SecretFilesCA(ctx, "", nil, bytes.Repeat([]byte("x"), wire.MaxEgressCABytes+1), nil), errdefs.ErrTooLarge)
	wantCategory(t, c.SecretFilesCA(ctx, "", nil, ca, bytes.Repeat([]byte("x"), wire.MaxSystemCABytes+1)), errdefs.ErrTooLarge)
	wantCategory(t, c.SecretFilesCA(ctx, "", nil, nil, []byte("x")), errdefs.ErrInvalid)
	wantCategory(t, c.SecretFiles(ctx, "", []wire.SecretFile{{Path: wire.EgressCABundle, Data: []byte("x")}}), errdefs.ErrInvalid)
}
