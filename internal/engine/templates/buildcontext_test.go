package templates

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/image/dockerfile"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func contextTar(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: typ, Linkname: e.link}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return &buf
}

// TestBuildContextRefusesEscapes: a context archive whose names leave its
// root, or that holds hard links or devices, is refused whole.
func TestBuildContextRefusesEscapes(t *testing.T) {
	df := tarEntry{name: "Dockerfile", body: "FROM base\n"}
	for _, bad := range []tarEntry{
		{name: "../evil", body: "x"},
		{name: "/etc/evil", body: "x"},
		{name: "a/../../evil", body: "x"},
		{name: "hard", link: "Dockerfile", typ: tar.TypeLink},
		{name: "dev", typ: tar.TypeChar},
	} {
		_, _, err := readContext(contextTar(t, df, bad), t.TempDir(), "Dockerfile")
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: %v", bad.name, err)
		}
	}
	if _, _, err := readContext(contextTar(t, tarEntry{name: "x", body: "y"}), t.TempDir(), "Dockerfile"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("no Dockerfile: %v", err)
	}
}

// TestBuildContextCopy: .dockerignore drops what it names, COPY sources
// are names of the index with docker's file/directory/wildcard rules, and
// what is written is owned by root with names relative to its directory.
func TestBuildContextCopy(t *testing.T) {
	bc, src, err := readContext(contextTar(t,
		tarEntry{name: "Dockerfile", body: "FROM base\n"},
		tarEntry{name: ".dockerignore", body: "secret\n**/*.log\n"}, // docker's rule: *.log would be the root's only
		tarEntry{name: "secret", body: "s"},
		tarEntry{name: "app/main.py", body: "print(1)"},
		tarEntry{name: "app/debug.log", body: "noise"},
		tarEntry{name: "app/sub/x.py", body: "x"},
		tarEntry{name: "a.txt", body: "a"},
		tarEntry{name: "b.txt", body: "b"},
		tarEntry{name: "link", link: "/etc/shadow", typ: tar.TypeSymlink},
		tarEntry{name: DockerfileInContext, body: "FROM other\n"},
	), t.TempDir(), DockerfileInContext)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	if string(src) != "FROM other\n" || bc.entries[DockerfileInContext] != nil {
		t.Fatalf("dockerfile %q; kept in the index: %v", src, bc.entries[DockerfileInContext] != nil)
	}
	if bc.entries["secret"] != nil || bc.entries["app/debug.log"] != nil {
		t.Fatalf(".dockerignore not applied: %v", bc.names)
	}
	for _, tc := range []struct {
		cp   dockerfile.Copy
		want []string // names written, by dir
		err  string
	}{
		{cp: dockerfile.Copy{Srcs: []string{"app"}, Dst: "/srv"}, want: []string{"/srv: main.py sub/x.py"}},
		{cp: dockerfile.Copy{Srcs: []string{"a.txt"}, Dst: "/x/y.txt"}, want: []string{"/x: y.txt"}},
		{cp: dockerfile.Copy{Srcs: []string{"a.txt"}, Dst: "/x", DstIsDir: true}, want: []string{"/x: a.txt"}},
		{cp: dockerfile.Copy{Srcs: []string{"*.txt"}, Dst: "/t", DstIsDir: true}, want: []string{"/t: a.txt", "/t: b.txt"}},
		{cp: dockerfile.Copy{Srcs: []string{"link"}, Dst: "/l", DstIsDir: true}, want: []string{"/l: link"}},
		{cp: dockerfile.Copy{Srcs: []string{"*.txt"}, Dst: "/t"}, err: "several"},
		{cp: dockerfile.Copy{Srcs: []string{"secret"}, Dst: "/s"}, err: "no such file"},
		{cp: dockerfile.Copy{Srcs: []string{"etc/shadow"}, Dst: "/s"}, err: "no such file"},
	} {
		items, _, err := bc.plan(&tc.cp)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want %q", tc.cp, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc.cp, err)
		}
		var got []string
		for _, it := range items {
			var buf bytes.Buffer
			if err := bc.writeTar(&buf, it); err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(&buf)
			var names []string
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if hdr.Uid != 0 || hdr.Gid != 0 {
					t.Fatalf("owner %d:%d", hdr.Uid, hdr.Gid)
				}
				names = append(names, hdr.Name)
			}
			got = append(got, it.dir+": "+strings.Join(names, " "))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%+v: %q, want %q", tc.cp, got, tc.want)
		}
	}
}
