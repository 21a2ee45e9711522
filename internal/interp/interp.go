// Package interp is the code-interpreter template: E2B's code-interpreter
// server (the wire @e2b/code-interpreter speaks, on port 49999) as a small
// Python program over jupyter_client, run by the template's service inside
// the sandbox, with a Jupyter kernel per context: ipykernel (Python),
// Deno's (JavaScript, TypeScript), IRkernel (R) and bash_kernel.py, berth's
// own (Bash: neither Debian nor npm packages one). Python kernels load
// berth_charts.py, which reads a matplotlib figure into E2B's chart JSON.
// The programs are embedded here; Layer is the template's layer that holds
// them, over the builtin template's. Nothing of it runs on the host. See
// docs/code-interpreter.md.
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
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

//go:embed server.py
var serverPy []byte

//go:embed bash_kernel.py
var bashKernelPy []byte

//go:embed berth_charts.py
var chartsPy []byte

//go:embed kernels/deno/kernel.json
var denoSpec []byte

//go:embed kernels/berth-bash/kernel.json
var bashSpec []byte

//go:embed r-ldpaths
var rLdpaths []byte

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
const InstallHint = "run scripts/install-deps.sh (Debian: python3-ipykernel python3-jupyter-client python3-matplotlib python3-numpy python3-pandas; for R r-base-core r-cran-irkernel; npm: deno)"

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

// entry is one file of the layer: a directory (name ends in /), a
// symlink (link set) or a regular file.
type entry struct {
	name string
	link string
	data []byte
}

// layerEntries are the layer's files: the server, the chart extraction
// its Python kernels load, the Bash kernel and the kernelspecs beside it (the server's JUPYTER_PATH), and R's two files of
// /etc/R (Debian keeps them in the host's /etc, which the sandbox does not
// have; without ldpaths R does not start).
func layerEntries() []entry {
	return []entry{
		{name: "etc/"},
		{name: "etc/R/"},
		{name: "etc/R/Renviron", link: "/usr/lib/R/etc/Renviron.ucf"},
		{name: "etc/R/ldpaths", data: rLdpaths},
		{name: "opt/"},
		{name: "opt/berth/"},
		{name: "opt/berth/interp/"},
		{name: ServerPath[1:], data: serverPy},
		{name: "opt/berth/interp/bash_kernel.py", data: bashKernelPy},
		{name: "opt/berth/interp/berth_charts.py", data: chartsPy},
		{name: "opt/berth/interp/kernels/"},
		{name: "opt/berth/interp/kernels/berth-bash/"},
		{name: "opt/berth/interp/kernels/berth-bash/kernel.json", data: bashSpec},
		{name: "opt/berth/interp/kernels/deno/"},
		{name: "opt/berth/interp/kernels/deno/kernel.json", data: denoSpec},
	}
}

// Kernels are the languages beyond Python and what each needs from the
// host's /usr (scripts/install-deps.sh installs them): without it the
// template still serves the others and answers 400 for that language.
var Kernels = []struct{ Languages, Needs string }{
	{"javascript, typescript", "usr/bin/deno"},
	{"r", "usr/bin/R"},
	{"r", "usr/lib/R/site-library/IRkernel"},
}

// MissingKernels returns, for the host under root, what the Kernels lack,
// as "path (languages)".
func MissingKernels(root string) []string {
	var out []string
	for _, k := range Kernels {
		if _, err := os.Stat(filepath.Join(root, k.Needs)); err != nil {
			out = append(out, "/"+k.Needs+" ("+k.Languages+")")
		}
	}
	return out
}

// Layer is the template's own layer: layerEntries as a tar,
// byte-for-byte the same for the same server, so its id is stable. The
// host's /etc/alternatives come from the base it sits on (image.Builtin).
func Layer() ([]byte, error) {
	ents := layerEntries()
	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case e.link != "":
			h.Typeflag, h.Mode, h.Linkname = tar.TypeSymlink, 0o777, e.link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
