package interp

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	for _, want := range []string{"etc/R/ldpaths", "etc/R/Renviron", "opt/berth/interp/server.py", "opt/berth/interp/bash_kernel.py",
		"opt/berth/interp/berth_charts.py", "opt/berth/interp/kernels/deno/kernel.json", "opt/berth/interp/kernels/berth-bash/kernel.json"} {
		if !slices.Contains(names, want) {
			t.Errorf("the layer lacks %s: %q", want, names)
		}
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

func TestKernelSpecs(t *testing.T) {
	for name, b := range map[string][]byte{"deno": denoSpec, "berth-bash": bashSpec} {
		var spec struct {
			Argv     []string `json:"argv"`
			Language string   `json:"language"`
		}
		if err := json.Unmarshal(b, &spec); err != nil || len(spec.Argv) < 2 || !slices.Contains(spec.Argv, "{connection_file}") {
			t.Errorf("kernelspec %s: %v %+v", name, err, spec)
		}
	}
	if !bytes.Contains(bashSpec, []byte("/opt/berth/interp/bash_kernel.py")) {
		t.Error("the bash kernelspec does not run the layer's bash_kernel.py")
	}
}

func TestMissingKernels(t *testing.T) {
	root := t.TempDir()
	if got := MissingKernels(root); len(got) != 3 || !strings.Contains(got[0], "deno") {
		t.Fatalf("empty root: %q", got)
	}
	for _, k := range Kernels {
		p := filepath.Join(root, k.Needs)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := MissingKernels(root); len(got) != 0 {
		t.Fatalf("all there: missing %q", got)
	}
}
