package client

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func mkTar(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := int64(0o644)
		if typ == tar.TypeDir {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Size: int64(len(e.body)), Linkname: e.link}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
		case d.Type()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			got[rel] = "-> " + l
		case d.IsDir():
			got[rel+"/"] = ""
		default:
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestExtractTar(t *testing.T) {
	for _, tc := range []struct {
		name    string
		base    string
		entries []tarEntry
		want    map[string]string
	}{
		{
			name: "docker style, prefixed with the base name",
			base: "work",
			entries: []tarEntry{
				{name: "work/", typ: tar.TypeDir},
				{name: "work/a.txt", body: "A"},
				{name: "work/sub/", typ: tar.TypeDir},
				{name: "work/sub/b.txt", body: "B"},
				{name: "work/hard", typ: tar.TypeLink, link: "work/a.txt"},
			},
			want: map[string]string{"a.txt": "A", "sub/": "", "sub/b.txt": "B", "hard": "A"},
		},
		{
			name: "contents style with ./",
			base: "work",
			entries: []tarEntry{
				{name: "./", typ: tar.TypeDir},
				{name: "./a.txt", body: "A"},
				{name: "./lnk", typ: tar.TypeSymlink, link: "a.txt"},
			},
			want: map[string]string{"a.txt": "A", "lnk": "-> a.txt"},
		},
		{
			name: "contents style, parents created",
			base: "work",
			entries: []tarEntry{
				{name: "deep/er/c.txt", body: "C"},
			},
			want: map[string]string{"deep/": "", "deep/er/": "", "deep/er/c.txt": "C"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := extractTar(mkTar(t, tc.entries...), dir, tc.base); err != nil {
				t.Fatal(err)
			}
			got := readTree(t, dir)
			if len(got) != len(tc.want) {
				t.Errorf("tree = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (tree %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func TestExtractTarRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tarEntry
	}{
		{"absolute", []tarEntry{{name: "/etc/passwd", body: "x"}}},
		{"dotdot", []tarEntry{{name: "../escape", body: "x"}}},
		{"dotdot inside", []tarEntry{{name: "a/../../escape", body: "x"}}},
		{"through symlink", []tarEntry{
			{name: "out", typ: tar.TypeSymlink, link: "../outside"},
			{name: "out/escape", body: "x"},
		}},
		{"through absolute symlink", []tarEntry{
			{name: "out", typ: tar.TypeSymlink, link: "/tmp"},
			{name: "out/escape", body: "x"},
		}},
		{"hard link out", []tarEntry{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "dst")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := extractTar(mkTar(t, tc.entries...), dir, "dst"); err == nil {
				t.Error("extractTar accepted an escaping archive")
			}
			if _, err := os.Stat(filepath.Join(parent, "escape")); err == nil {
				t.Error("a file was written outside the destination")
			}
			if _, err := os.Stat(filepath.Join(parent, "outside", "escape")); err == nil {
				t.Error("a file was written outside the destination")
			}
			if _, err := os.Stat("/tmp/escape"); err == nil {
				t.Error("a file was written to /tmp")
			}
		})
	}
}

func TestWriteTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a.txt"), []byte("A"), 0o600))
	must(os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink("a.txt", filepath.Join(src, "link")))

	for _, prefix := range []string{"", "proj"} {
		var buf bytes.Buffer
		must(writeTar(&buf, src, prefix, false))
		var names []string
		tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: owner %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
			}
			if h.Name == strings.TrimPrefix(prefix+"/sub/run.sh", "/") && h.Mode&0o111 == 0 {
				t.Errorf("%s lost its exec bit", h.Name)
			}
			names = append(names, h.Name)
		}
		want := "a.txt link sub/ sub/run.sh"
		if prefix != "" {
			want = "proj/ proj/a.txt proj/link proj/sub/ proj/sub/run.sh"
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("prefix %q: names = %q, want %q", prefix, got, want)
		}

		dst := t.TempDir()
		base := prefix
		if base == "" {
			base = "src"
		}
		must(extractTar(&buf, dst, base))
		got := readTree(t, dst)
		if got["a.txt"] != "A" || got["sub/run.sh"] != "#!/bin/sh\n" || got["link"] != "-> a.txt" {
			t.Errorf("prefix %q: extracted %v", prefix, got)
		}
		fi, err := os.Stat(filepath.Join(dst, "sub", "run.sh"))
		must(err)
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("mode = %v, want 0755", fi.Mode())
		}
	}
}
