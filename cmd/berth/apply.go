package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/templatefile"
)

// maxApplyFiles caps the local files a template file's copy steps may send:
// they travel in one JSON request.
const maxApplyFiles = 1 << 30

func newApplyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Build a template from a template file (only what changed)",
		Long: `Build the template a template file (YAML or JSON) describes: a base image or
template, setup steps (run, copy, env, workdir, user), default resources and
policies. A user step (- user: {name: dev, uid: 1000, default: true}) adds a
user with its group and home; default makes it the user the template's
commands run as and /workspace belongs to. Steps themselves run as root.
Each step is cached by its content, like a layer cache, so applying an unchanged
file builds nothing, and a changed template rolls its warm pool over to the new
build. Progress is shown on stderr; the template's name is printed at the end.

The local files that copy steps name (- copy: {src: ./dir, dst: /app}) are sent
with the file. Their src is relative to the file's directory and must stay
inside it: absolute paths, ".." out of it and symlinks leading out are refused.
"-f -" reads the file from stdin, with src relative to the current directory.`,
		Example: `  berth apply -f py.yaml

  # py.yaml
  name: py
  from: base
  steps:
    - user: {name: dev, uid: 1000, default: true}
    - copy: {src: ./requirements.txt, dst: /app/requirements.txt}
    - run: mkdir -p /app/out && chown dev:dev /app/out
    - workdir: /app
  pool: {min: 2}`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "template file, YAML or JSON (\"-\" for stdin)")
	_ = cmd.MarkFlagRequired("file")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		req, err := applyRequest(file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		t, err := c.Apply(cmd.Context(), req, cmd.ErrOrStderr())
		if err != nil {
			return fmt.Errorf("apply %s: %w", file, err)
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), t)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), t.Name)
		return err
	}
	return cmd
}

// applyRequest reads and checks the template file (stdin for "-") and
// packs the local files its copy steps name.
func applyRequest(file string, stdin io.Reader) (api.ApplyRequest, error) {
	var (
		spec []byte
		err  error
		dir  = filepath.Dir(file)
	)
	if file == "-" {
		spec, err = io.ReadAll(stdin)
		dir = "."
	} else {
		spec, err = os.ReadFile(file)
	}
	if err != nil {
		return api.ApplyRequest{}, fmt.Errorf("cannot read %s: %w", file, unwrapPathError(err))
	}
	tf, err := templatefile.Parse(spec)
	if err != nil {
		return api.ApplyRequest{}, fmt.Errorf("%s: %w", file, err)
	}
	files, err := packCopySources(dir, tf.CopySources())
	if err != nil {
		return api.ApplyRequest{}, fmt.Errorf("%s: %w", file, err)
	}
	return api.ApplyRequest{Spec: string(spec), Files: files}, nil
}

// packCopySources writes a tar of the copy sources srcs, read under dir, and
// returns it (nil when there are none). Entries are named by their cleaned
// path relative to dir; a directory brings its whole tree, its symlinks as
// symlinks. Every read goes through an os.Root, so no name or symlink can
// reach outside dir. The archive depends only on names, modes and contents
// (owners and times are not kept), so an unchanged tree packs to the same
// bytes and the daemon's step cache sees no change.
func packCopySources(dir string, srcs []string) ([]byte, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(srcs))
	for _, src := range srcs {
		name, err := templatefile.SourceName(src)
		if err != nil {
			return nil, fmt.Errorf("copy src: %w", err)
		}
		names = append(names, name)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", dir, unwrapPathError(err))
	}
	defer root.Close()
	fsys := root.FS()
	var buf bytes.Buffer
	p := &packer{tw: tar.NewWriter(&buf), root: root, seen: map[string]bool{}}
	for i, name := range names {
		err := fs.WalkDir(fsys, name, func(n string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return p.add(fsys, n, d, n == name)
		})
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("copy src %q: %s does not exist", srcs[i], pe.Path)
			}
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("copy src %q: %s: %w", srcs[i], pe.Path, pe.Err)
			}
			return nil, fmt.Errorf("copy src %q: %w", srcs[i], err)
		}
	}
	if err := p.tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// packer adds the entries of packCopySources' archive.
type packer struct {
	tw   *tar.Writer
	root *os.Root
	seen map[string]bool // names already written (sources may overlap)
	size int64
}

var packEpoch = time.Unix(0, 0)

// add writes the entry n. top says n is a copy source itself, whose
// symlink (if it is one) is followed, as WalkDir did.
func (p *packer) add(fsys fs.FS, n string, d fs.DirEntry, top bool) error {
	if p.seen[n] {
		return nil
	}
	p.seen[n] = true
	var (
		info fs.FileInfo
		err  error
	)
	if top {
		info, err = fs.Stat(fsys, n) // follows a symlink, inside the root only
	} else {
		info, err = d.Info()
	}
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: n, Mode: int64(info.Mode().Perm()), ModTime: packEpoch}
	switch {
	case info.IsDir():
		if n == "." {
			return nil // the template file's directory itself
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, n+"/"
	case info.Mode()&fs.ModeSymlink != 0:
		if hdr.Linkname, err = p.root.Readlink(n); err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
	case info.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		if p.size += info.Size(); p.size > maxApplyFiles {
			return fmt.Errorf("the copy sources are larger than %s: build large content into a base image instead", formatSize(maxApplyFiles))
		}
	default:
		return nil // sockets, devices, fifos: nothing to copy
	}
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := fsys.Open(n)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(p.tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s changed while being read: %w", n, err)
	}
	return nil
}
