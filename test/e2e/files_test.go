package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestFilesInfoAndMove, on runc and runsc: file info's POSIX view (mode
// string, permission number, type, owner as the sandbox sees it, symlink
// target) and move's rename(2) rules, symlinks included.
func TestFilesInfoAndMove(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt})
			if err != nil {
				t.Fatal(err)
			}
			defer d.c.DeleteSandbox(ctx, sb.ID, true)
			execOut(t, d, sb.ID, "sh", "-c", "mkdir -m 0755 /w && echo f > /w/f && chown 1000:1001 /w/f && chmod 4750 /w/f && "+
				"ln -s /w/f /w/ln && mkdir -p /w/a /w/b /w/full && echo in > /w/full/x && echo g > /w/a/g && echo t > /w/target")

			fi, err := d.c.Stat(ctx, sb.ID, "/w")
			if err != nil {
				t.Fatal(err)
			}
			if fi.Permissions != 493 || fi.ModeString != "drwxr-xr-x" || fi.Type != "dir" || !fi.IsDir ||
				fi.UID == nil || *fi.UID != 0 || fi.GID == nil || *fi.GID != 0 {
				t.Errorf("stat /w = %+v, want 493 drwxr-xr-x dir 0:0", fi)
			}
			fi, err = d.c.Stat(ctx, sb.ID, "/w/f")
			if err != nil {
				t.Fatal(err)
			}
			if fi.Permissions != 0o4750 || fi.ModeString != "-rwsr-x---" || fi.Type != "file" || fi.Size != 2 ||
				fi.UID == nil || *fi.UID != 1000 || fi.GID == nil || *fi.GID != 1001 {
				t.Errorf("stat /w/f = %+v, want 04750 -rwsr-x--- file 1000:1001 (the sandbox's ids, not the host's)", fi)
			}
			fi, err = d.c.Stat(ctx, sb.ID, "/w/ln")
			if err != nil {
				t.Fatal(err)
			}
			if fi.Type != "symlink" || fi.Link != "/w/f" || !strings.HasPrefix(fi.ModeString, "l") {
				t.Errorf("stat /w/ln = %+v, want a symlink to /w/f", fi)
			}
			fis, err := d.c.List(ctx, sb.ID, "/w")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range fis {
				if e.ModeString == "" || e.Type == "" || e.UID == nil {
					t.Errorf("list entry without the POSIX view: %+v", e)
				}
			}

			// Move: rename, across directories, onto a file, refusals.
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			wantCode := func(err error, status int) {
				t.Helper()
				var ce *client.Error
				if !errors.As(err, &ce) || ce.Status != status {
					t.Errorf("got %v, want HTTP %d", err, status)
				}
			}
			must(d.c.Move(ctx, sb.ID, "/w/a/g", "/w/a/g2", false))
			must(d.c.Move(ctx, sb.ID, "/w/a/g2", "/w/b/g", false))
			wantCode(d.c.Move(ctx, sb.ID, "/w/target", "/w/b/g", true), 409)
			must(d.c.Move(ctx, sb.ID, "/w/target", "/w/b/g", false))
			wantCode(d.c.Move(ctx, sb.ID, "/w/b/g", "/w/a", false), 409)    // file onto a dir
			wantCode(d.c.Move(ctx, sb.ID, "/w/a", "/w/full", false), 409)   // dir onto a non-empty dir
			wantCode(d.c.Move(ctx, sb.ID, "/w/full", "/w/b/g", false), 409) // dir onto a file
			wantCode(d.c.Move(ctx, sb.ID, "/w/full", "/w/full/sub", false), 400)
			wantCode(d.c.Move(ctx, sb.ID, "/w/nope", "/w/x", false), 404)
			wantCode(d.c.Move(ctx, sb.ID, "/w/b/g", "relative", false), 400)
			must(d.c.Move(ctx, sb.ID, "/w/full", "/w/a", false)) // dir onto an empty dir
			// A symlink is moved, not its target; moving onto one
			// replaces the link.
			must(d.c.Move(ctx, sb.ID, "/w/ln", "/w/ln2", false))
			must(d.c.Move(ctx, sb.ID, "/w/b/g", "/w/ln2", false))
			if out := execOut(t, d, sb.ID, "sh", "-c", "cat /w/a/x /w/ln2 /w/f; test -L /w/ln2 || echo notlink; ls -A /w/b | wc -l; test -e /w/full || echo nofull"); out != "in\nt\nf\nnotlink\n0\nnofull\n" {
				t.Errorf("after the moves: %q", out)
			}
			// The CLI verbs over the same routes.
			if _, se, code := d.cli("fs", "mv", sb.ID+":/w/f", "/w/f2"); code != 0 {
				t.Fatalf("berth fs mv: %d %s", code, se)
			}
			so, se, code := d.cli("fs", "ls", sb.ID+":/w")
			if code != 0 || !regexp.MustCompile(`(?m)^-rwsr-x---\s+1000\s+1001\s+2\s.*\sf2$`).MatchString(so) {
				t.Errorf("berth fs ls: %d %q %s", code, so, se)
			}
			if _, se, code := d.cli("fs", "mkdir", "-p", sb.ID+":/w/m/n"); code != 0 {
				t.Fatalf("berth fs mkdir: %d %s", code, se)
			}
			if _, se, code := d.cli("fs", "rm", "-r", sb.ID+":/w/m"); code != 0 {
				t.Fatalf("berth fs rm: %d %s", code, se)
			}
			so, _, code = d.cli("fs", "stat", sb.ID+":/w/f2", "-o", "json")
			var st api.FileInfo
			if code == 0 {
				jsonDecode(t, so, &st)
			}
			if code != 0 || st.Permissions != 0o4750 || st.UID == nil || *st.UID != 1000 {
				t.Errorf("berth fs stat: %d %q", code, so)
			}
			if out := execOut(t, d, sb.ID, "sh", "-c", "ls /w | tr '\\n' ' '"); out != "a b f2 ln2 " {
				t.Errorf("/w = %q", out)
			}
		})
	}
}

// TestCpDockerRules: berth cp follows docker cp in every direction —
// host to sandbox, sandbox to host, sandbox to sandbox and within one
// sandbox — for files and directories, to missing and existing
// destinations, src/. and a trailing slash on a missing destination.
func TestCpDockerRules(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	a, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteSandbox(ctx, a.ID, true)
	b, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteSandbox(ctx, b.ID, true)
	// The source tree, in a sandbox and on the host.
	const setup = "rm -rf /src /dst && mkdir -p /src/dir/sub /dst/dir-exists && echo F > /src/file && echo A > /src/dir/a && echo B > /src/dir/sub/b && echo old > /dst/file-exists"
	host := t.TempDir()
	for p, c := range map[string]string{"src/file": "F\n", "src/dir/a": "A\n", "src/dir/sub/b": "B\n"} {
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Each case: source (relative to the source root), destination
	// (relative to /dst), and what `find` lists under /dst afterwards
	// (besides the dst setup), or "error".
	cases := []struct{ src, dst, want string }{
		{"file", "new", "new=F"},
		{"file", "file-exists", "file-exists=F"},
		{"file", "dir-exists", "dir-exists/file=F"},
		{"file", "missing/", "error"},
		{"dir", "newdir", "newdir/a=A newdir/sub/b=B"},
		{"dir", "dir-exists", "dir-exists/dir/a=A dir-exists/dir/sub/b=B"},
		{"dir/.", "dir-exists", "dir-exists/a=A dir-exists/sub/b=B"},
		{"dir", "file-exists", "error"},
	}
	// listing returns the files under dst as name=content, the setup's
	// untouched file-exists left out.
	listing := func(id string) string {
		out := execOut(t, d, id, "sh", "-c", `cd /dst && for f in $(find . -type f | sort); do c=$(cat $f); n=${f#./}; [ "$n=$c" = "file-exists=old" ] || printf '%s=%s ' "$n" "$c"; done`)
		return strings.TrimSpace(out)
	}
	hostListing := func(dst string) string {
		var parts []string
		filepath.Walk(dst, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(dst, p)
			c, _ := os.ReadFile(p)
			s := rel + "=" + strings.TrimSpace(string(c))
			if s != "file-exists=old" {
				parts = append(parts, s)
			}
			return nil
		})
		return strings.Join(parts, " ")
	}
	check := func(what string, tc struct{ src, dst, want string }, err error, got string) {
		t.Helper()
		switch {
		case tc.want == "error" && err == nil:
			t.Errorf("%s %s → %s: no error, got %q", what, tc.src, tc.dst, got)
		case tc.want != "error" && err != nil:
			t.Errorf("%s %s → %s: %v", what, tc.src, tc.dst, err)
		case tc.want != "error" && got != tc.want:
			t.Errorf("%s %s → %s: %q, want %q", what, tc.src, tc.dst, got, tc.want)
		}
	}
	for _, tc := range cases {
		// host → sandbox (runc)
		execOut(t, d, a.ID, "sh", "-c", setup)
		err := d.c.CopyToSandbox(ctx, host+"/src/"+tc.src, a.ID, "/dst/"+tc.dst) // not Join: it would clean dir/.
		check("host→sandbox", tc, err, listing(a.ID))
		// sandbox (runc) → sandbox (runsc)
		execOut(t, d, b.ID, "sh", "-c", setup)
		err = d.c.Copy(ctx, api.CopyRequest{From: a.ID, FromPath: "/src/" + tc.src, To: b.ID, ToPath: "/dst/" + tc.dst})
		check("sandbox→sandbox", tc, err, listing(b.ID))
		// within one sandbox
		execOut(t, d, b.ID, "sh", "-c", setup)
		err = d.c.Copy(ctx, api.CopyRequest{From: b.ID, FromPath: "/src/" + tc.src, To: b.ID, ToPath: "/dst/" + tc.dst})
		check("within a sandbox", tc, err, listing(b.ID))
		// sandbox (runsc) → host, through the CLI
		dst := filepath.Join(t.TempDir(), "dst")
		if err := os.MkdirAll(filepath.Join(dst, "dir-exists"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "file-exists"), []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dst, tc.dst)
		if strings.HasSuffix(tc.dst, "/") {
			target += "/"
		}
		_, se, code := d.cli("cp", b.ID+":/src/"+tc.src, target)
		var cerr error
		if code != 0 {
			cerr = errors.New(se)
		}
		check("sandbox→host", tc, cerr, hostListing(dst))
	}
}

// TestQuarantineOwners, on runc and runsc: a quarantined sandbox's files,
// read from the host side by the daemon, show the sandbox's own uids and
// gids in stat, list and tar — root and a workspace volume alike — not
// the host's shifted ones.
func TestQuarantineOwners(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt, Persistent: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.c.DeleteSandbox(ctx, sb.ID, true)
			execOut(t, d, sb.ID, "sh", "-c", "mkdir -p /data && echo r > /data/f && chown -R 1000:1001 /data && "+
				"echo w > /workspace/f && chown 1002:1003 /workspace/f")
			want := func(before map[string][2]uint32) {
				t.Helper()
				for p, ids := range before {
					fi, err := d.c.Stat(ctx, sb.ID, p)
					if err != nil {
						t.Fatal(err)
					}
					if fi.UID == nil || fi.GID == nil || *fi.UID != ids[0] || *fi.GID != ids[1] {
						t.Errorf("%s: stat %s owner = %v:%v, want %d:%d", sb.State, p, fi.UID, fi.GID, ids[0], ids[1])
					}
				}
				fis, err := d.c.List(ctx, sb.ID, "/data")
				if err != nil || len(fis) != 1 || fis[0].UID == nil || *fis[0].UID != 1000 {
					t.Errorf("list /data = %+v, %v", fis, err)
				}
				var buf bytes.Buffer
				if err := d.c.ReadTar(ctx, sb.ID, "/data", &buf); err != nil {
					t.Fatal(err)
				}
				tr := tar.NewReader(&buf)
				n := 0
				for {
					h, err := tr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					n++
					if h.Uid != 1000 || h.Gid != 1001 {
						t.Errorf("tar %s owner %d:%d, want 1000:1001", h.Name, h.Uid, h.Gid)
					}
				}
				if n != 2 {
					t.Errorf("tar of /data has %d entries", n)
				}
			}
			owners := map[string][2]uint32{"/data": {1000, 1001}, "/data/f": {1000, 1001}, "/workspace/f": {1002, 1003}, "/etc/passwd": {0, 0}}
			want(owners) // through the sandbox's agent
			q, err := d.c.Quarantine(ctx, sb.ID)
			if err != nil || q.State != "quarantined" {
				t.Fatalf("quarantine: %+v %v", q, err)
			}
			sb.State = q.State
			want(owners) // from the host side
			if _, err := d.c.Release(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
