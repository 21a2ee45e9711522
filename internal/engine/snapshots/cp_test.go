package snapshots

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
)

func tarNames(t testing.TB, entries ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		name, link, _ := strings.Cut(e, "=")
		hdr := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg}
		switch {
		case strings.HasSuffix(name, "/"):
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case link != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, link
		default:
			hdr.Size = int64(len(name))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			tw.Write([]byte(name))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func namesOf(t testing.TB, b []byte) string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return strings.Join(out, ",")
		}
		if err != nil {
			t.Fatal(err)
		}
		n := h.Name
		if h.Linkname != "" {
			n += "=" + h.Linkname
		}
		out = append(out, n)
	}
}

func TestRetar(t *testing.T) {
	in := tarNames(t, "out/", "out/a", "out/sub/", "out/sub/b", "out/h=out/a", "other", "../escape")
	for _, tc := range []struct{ base, rename, want string }{
		{"out", "", "out/,out/a,out/sub/,out/sub/b,out/h=out/a,other,../escape"},
		{"out", ".", "a,sub/,sub/b,h=a"},
		{"out", "new", "new/,new/a,new/sub/,new/sub/b,new/h=new/a"},
	} {
		var buf bytes.Buffer
		if err := retar(bytes.NewReader(in), &buf, tc.base, tc.rename); err != nil {
			t.Fatal(err)
		}
		if got := namesOf(t, buf.Bytes()); got != tc.want {
			t.Errorf("retar(%q→%q) = %s, want %s", tc.base, tc.rename, got, tc.want)
		}
	}
	var buf bytes.Buffer
	if err := retar(bytes.NewReader(tarNames(t, "f")), &buf, "f", "g"); err != nil {
		t.Fatal(err)
	}
	if got := namesOf(t, buf.Bytes()); got != "g" {
		t.Errorf("file rename = %s", got)
	}
	if err := retar(strings.NewReader("not a tar archive at all, just text that goes on and on"), io.Discard, "f", "g"); err == nil {
		t.Error("retar of garbage succeeded")
	}
}

// FuzzRetar: whatever a sandbox's agent sends, retar neither panics nor
// emits a name outside rename when renaming.
func FuzzRetar(f *testing.F) {
	f.Add(tarNames(f, "out/", "out/a", "out/h=out/a", "x"), "out", "new")
	f.Add(tarNames(f, "out/", "out/a"), "out", ".")
	f.Add([]byte("garbage"), "a", "b")
	f.Fuzz(func(t *testing.T, in []byte, base, rename string) {
		if base == "" || rename == "" || strings.Contains(base, "/") || strings.Contains(rename, "/") {
			return
		}
		var buf bytes.Buffer
		if retar(bytes.NewReader(in), &buf, base, rename) != nil {
			return
		}
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err != nil {
				return
			}
			n := strings.TrimSuffix(h.Name, "/")
			if rename != "." && n != rename && !strings.HasPrefix(n, rename+"/") {
				t.Fatalf("entry %q outside %q", h.Name, rename)
			}
		}
	})
}
