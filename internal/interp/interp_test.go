package interp

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLayerHoldsTheServer(t *testing.T) {
	a, err := Layer()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Layer()
	if !bytes.Equal(a, b) {
		t.Fatal("two layers of the same server differ: the template's layer id would change at every start")
	}
	tr := tar.NewReader(bytes.NewReader(a))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == ServerPath[1:] {
			body, _ := io.ReadAll(tr)
			if !bytes.Equal(body, serverPy) || h.Mode != 0o644 || h.Uid != 0 {
				t.Fatalf("server entry: mode %o uid %d, %d bytes", h.Mode, h.Uid, len(body))
			}
		}
	}
	if want := []string{"opt/", "opt/berth/", "opt/berth/interp/", "opt/berth/interp/server.py"}; !slices.Equal(names, want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	if !bytes.Contains(serverPy, []byte("49999")) || !bytes.Contains(serverPy, []byte("jupyter_client")) {
		t.Fatal("embedded server is not the interpreter")
	}
}

func TestServiceIsValid(t *testing.T) {
	s := Service()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Cmd[len(s.Cmd)-1] != ServerPath || s.Restart != "always" {
		t.Fatalf("service %+v", s)
	}
}

func TestMissing(t *testing.T) {
	root := t.TempDir()
	got := Missing(root)
	if want := append([]string{"python3"}, Modules...); !slices.Equal(got, want) {
		t.Fatalf("empty root: missing %q, want %q", got, want)
	}
	for _, p := range []string{"usr/bin/python3"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range Modules[1:] {
		if err := os.MkdirAll(filepath.Join(root, "usr/lib/python3/dist-packages", m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := Missing(root); !slices.Equal(got, Modules[:1]) {
		t.Fatalf("missing %q, want %q", got, Modules[:1])
	}
}
