// Package interp is the code-interpreter template: E2B's code-interpreter
// server (the wire @e2b/code-interpreter speaks, on port 49999) as a small
// Python program over jupyter_client and ipykernel, run by the template's
// service inside the sandbox. The program is embedded here; Layer is the
// template's layer that holds it, over the builtin template's. Nothing of
// it runs on the host. See docs/code-interpreter.md.
//
// The template is registered at serve start (templates.Builder.EnsureBuiltin)
// as code-interpreter, alias code-interpreter-v1 (the E2B SDK's default),
// when Missing finds the host's Python packages; otherwise doctor reports a
// template finding naming scripts/install-deps.sh.
package interp

import (
	"archive/tar"
	"bytes"
	_ "embed"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

//go:embed server.py
var serverPy []byte

// Template is the builtin template's name; Alias is the name E2B's SDK
// asks for by default.
const (
	Template = "code-interpreter"
	Alias    = "code-interpreter-v1"
)

// Port is the port the server listens on in the sandbox.
const Port = 49999

// ServerPath is where the layer puts the server in the sandbox (outside
// /usr, which is the host's, read-only).
const ServerPath = "/opt/berth/interp/server.py"

// Modules are the Python packages the server needs from the host's /usr.
var Modules = []string{"ipykernel", "jupyter_client", "matplotlib", "numpy", "pandas", "matplotlib_inline"}

// InstallHint names what installs the modules.
const InstallHint = "run scripts/install-deps.sh (Debian: python3-ipykernel python3-jupyter-client python3-matplotlib python3-numpy python3-pandas)"

// Service is the template's service: the server, restarted when it ends.
func Service() *store.ServiceSpec {
	return &store.ServiceSpec{
		Cmd:     []string{"/usr/bin/python3", "-u", ServerPath},
		Restart: store.RestartAlways,
		Env:     map[string]string{"PYTHONDONTWRITEBYTECODE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "HOME": "/root", "JUPYTER_RUNTIME_DIR": "/tmp/berth-interp-jupyter"},
		Dir:     "/workspace",
		// Root, as E2B's server (its kernels may work anywhere, /root
		// included), whatever the sandbox's default user.
		User:      "root",
		ReadyPort: Port,
	}
}

// Missing returns what the host under root (its /usr is the sandbox's)
// lacks for the server: python3 and the Modules not found in its
// dist-packages.
func Missing(root string) []string {
	var out []string
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		out = append(out, "python3")
	}
	for _, m := range Modules {
		if _, err := os.Stat(filepath.Join(root, "usr/lib/python3/dist-packages", m)); err != nil {
			out = append(out, m)
		}
	}
	return out
}

// Layer is the template's own layer: ServerPath and its parents, as a tar
// byte-for-byte the same for the same server, so its id is stable.
func Layer() ([]byte, error) {
	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"opt/", "opt/berth/", "opt/berth/interp/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: ServerPath[1:], Typeflag: tar.TypeReg, Mode: 0o644,
		Size: int64(len(serverPy)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(serverPy); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
