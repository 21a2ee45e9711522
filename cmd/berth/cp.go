package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// cpEndpoint is one side of `berth cp`: a sandbox path (ID:/path) or a local
// path ("-" for a tar stream on stdin or stdout).
type cpEndpoint struct {
	sandbox string // empty for a local path
	path    string
}

func (e cpEndpoint) remote() bool { return e.sandbox != "" }

// parseCpArg splits ID:/path as docker cp does: a colon before any slash
// marks a sandbox. A local path with a colon in it needs a ./ prefix.
func parseCpArg(s string) (cpEndpoint, error) {
	if s == "" {
		return cpEndpoint{}, errors.New("empty path")
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.ContainsRune(s[:i], '/') {
		return cpEndpoint{path: s}, nil
	}
	if i == 0 {
		return cpEndpoint{}, fmt.Errorf("invalid %q: want ID:/path", s)
	}
	p := s[i+1:]
	if p == "" {
		return cpEndpoint{}, fmt.Errorf("invalid %q: missing the path after %q", s, s[:i+1])
	}
	return cpEndpoint{sandbox: s[:i], path: p}, nil
}

// parseCpArgs checks that at least one side is in a sandbox; when both are,
// the copy goes from sandbox to sandbox, and "-" cannot be used.
func parseCpArgs(src, dst string) (cpEndpoint, cpEndpoint, error) {
	s, err := parseCpArg(src)
	if err != nil {
		return s, cpEndpoint{}, err
	}
	d, err := parseCpArg(dst)
	if err != nil {
		return s, d, err
	}
	switch {
	case !s.remote() && !d.remote():
		return s, d, errors.New("one of SRC and DST must be in a sandbox, as ID:/path")
	}
	return s, d, nil
}

func newCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the local machine and a sandbox, or between sandboxes",
		Long: `Copy files or directories between the local machine and a sandbox, as docker cp
does, or directly from one sandbox to another. A sandbox side is ID:/path (the
id or name of a sandbox).

  A file is copied to DST, or into DST when DST is an existing directory.
  A directory SRC becomes DST when DST does not exist, or DST/<name of SRC>
  when it does; SRC ending in /. copies only its contents.
  "-" as the local side is a tar stream: read from stdin into the sandbox
  directory DST, or written to stdout from the sandbox path SRC.

When both sides are sandboxes (berth cp CHILD:/path PARENT:/dir), the daemon
copies SRC, a file or a directory, into the directory DST of the other sandbox
(created if missing); nothing passes through this machine.

Archives from a sandbox are extracted safely: absolute paths, ".." and links
that lead outside the destination are refused.`,
		Example: `  berth cp ./src $id:/work
  berth cp $id:/work/out.json .
  berth cp $id:/work - | tar t
  berth cp $child:/workspace/result $parent:/workspace/incoming`,
		Args: exactArgs(2, "SRC and DST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst, err := parseCpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if src.remote() && dst.remote() {
				return c.Copy(cmd.Context(), api.CopyRequest{From: src.sandbox, FromPath: src.path, To: dst.sandbox, ToPath: dst.path})
			}
			if src.remote() {
				return copyFromSandbox(cmd.Context(), c, src, dst.path, cmd.OutOrStdout())
			}
			return copyToSandbox(cmd.Context(), c, src.path, dst, cmd.InOrStdin())
		},
	}
}

// copyToSandbox copies the local path src (or a tar on stdin) into a sandbox.
func copyToSandbox(ctx context.Context, c *client.Client, src string, dst cpEndpoint, stdin io.Reader) error {
	if src == "-" {
		return c.WriteTar(ctx, dst.sandbox, dst.path, stdin)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("cannot copy %s: %w", src, unwrapPathError(err))
	}
	dfi, err := c.Stat(ctx, dst.sandbox, dst.path)
	dstExists := err == nil
	if err != nil && !client.IsNotFound(err) {
		return err
	}
	if !fi.IsDir() {
		target := dst.path
		switch {
		case dstExists && dfi.IsDir:
			target = path.Join(dst.path, filepath.Base(src))
		case strings.HasSuffix(dst.path, "/"):
			if err := c.Mkdir(ctx, dst.sandbox, dst.path, true); err != nil {
				return err
			}
			target = path.Join(dst.path, filepath.Base(src))
		}
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("cannot copy %s: %w", src, unwrapPathError(err))
		}
		defer f.Close()
		_, err = c.WriteFile(ctx, dst.sandbox, target, fi.Mode(), f)
		return err
	}

	// A directory: stream a tar of it. Into an existing directory it goes
	// as DST/<base> (unless SRC ends in "/."); otherwise DST is created and
	// receives SRC's contents.
	if dstExists && !dfi.IsDir {
		return fmt.Errorf("cannot copy directory %s onto file %s:%s", src, dst.sandbox, dst.path)
	}
	prefix := ""
	if dstExists && !strings.HasSuffix(src, string(filepath.Separator)+".") && src != "." {
		prefix = filepath.Base(filepath.Clean(src))
	}
	if !dstExists {
		if err := c.Mkdir(ctx, dst.sandbox, dst.path, true); err != nil {
			return err
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src, prefix)) }()
	err = c.WriteTar(ctx, dst.sandbox, dst.path, pr)
	pr.CloseWithError(errors.New("upload ended")) // unblocks writeTar if the upload failed
	return err
}

// writeTar writes the tree at root to w with names under prefix (or at the
// top when prefix is empty). Ownership is not kept: in the sandbox the files
// belong to its root, as with docker cp.
func writeTar(w io.Writer, root, prefix string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if prefix != "" {
			name = path.Join(prefix, name)
		}
		if name == "." {
			return nil // the root itself: DST
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() && !info.IsDir() && link == "" {
			return nil // sockets, devices, fifos: nothing to copy
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// copyFromSandbox copies src out of a sandbox to the local path dst (or as a
// tar to stdout).
func copyFromSandbox(ctx context.Context, c *client.Client, src cpEndpoint, dst string, stdout io.Writer) error {
	if dst == "-" {
		return c.ReadTar(ctx, src.sandbox, src.path, stdout)
	}
	sfi, err := c.Stat(ctx, src.sandbox, src.path)
	if err != nil {
		return err
	}
	lfi, lerr := os.Stat(dst)
	dstExists := lerr == nil
	if lerr != nil && !errors.Is(lerr, fs.ErrNotExist) {
		return fmt.Errorf("cannot copy to %s: %w", dst, unwrapPathError(lerr))
	}
	base := path.Base(path.Clean(src.path))

	if !sfi.IsDir {
		target := dst
		switch {
		case dstExists && lfi.IsDir():
			target = filepath.Join(dst, base)
		case strings.HasSuffix(dst, string(filepath.Separator)):
			return fmt.Errorf("cannot copy to %s: directory does not exist", dst)
		}
		return readFileTo(ctx, c, src, target)
	}

	if dstExists && !lfi.IsDir() {
		return fmt.Errorf("cannot copy directory %s:%s onto file %s", src.sandbox, src.path, dst)
	}
	root := dst
	if dstExists && !strings.HasSuffix(src.path, "/.") {
		root = filepath.Join(dst, base)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("cannot copy to %s: %w", root, unwrapPathError(err))
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.ReadTar(ctx, src.sandbox, src.path, pw)) }()
	err = extractTar(pr, root, base)
	pr.CloseWithError(errors.New("extraction ended")) // stops the download if extraction failed
	return err
}

// readFileTo downloads one file into a temporary file beside target and
// renames it into place, so a failed copy leaves no half-written file.
func readFileTo(ctx context.Context, c *client.Client, src cpEndpoint, target string) error {
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".berth-*")
	if err != nil {
		return fmt.Errorf("cannot copy to %s: %w", target, unwrapPathError(err))
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	mode, _, err := c.ReadFile(ctx, src.sandbox, src.path, tmp)
	if err != nil {
		tmp.Close()
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := tmp.Chmod(mode.Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// extractTar extracts a tar stream into dir. Entries may be named relative
// to the archived directory ("a.txt", "./a.txt") or, as docker archives
// are, under its base name ("work/a.txt"); both land in dir. Every write
// goes through an os.Root, so neither names nor symlinks in the archive can
// reach outside dir.
func extractTar(r io.Reader, dir, base string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	stripBase := false
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := archiveName(hdr.Name)
		if err != nil {
			return err
		}
		if first && base != "/" && base != "." && (name == base || strings.HasPrefix(name, base+"/")) {
			stripBase = true
		}
		strip := func(n string) string {
			if stripBase {
				n = strings.TrimPrefix(strings.TrimPrefix(n, base), "/")
			}
			if n == "" {
				return "."
			}
			return n
		}
		if hdr.Typeflag == tar.TypeLink {
			target, err := archiveName(hdr.Linkname)
			if err != nil || target == "" {
				return fmt.Errorf("refusing archive entry %q: hard link to %q", hdr.Name, hdr.Linkname)
			}
			hdr.Linkname = strip(target)
		}
		if err := extractEntry(root, tr, hdr, strip(name)); err != nil {
			return fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
	}
}

// archiveName cleans an entry name and refuses the ones that would leave
// the destination.
func archiveName(n string) (string, error) {
	if strings.HasPrefix(n, "/") || strings.Contains(n, `\`) {
		return "", fmt.Errorf("refusing archive entry %q: absolute path", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("refusing archive entry %q: it contains a .. component", n)
		}
	}
	c := path.Clean(n)
	if c == "." {
		return "", nil
	}
	return c, nil
}

func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	perm := fs.FileMode(hdr.Mode).Perm()
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if name == "." {
			return nil
		}
		if err := root.MkdirAll(name, 0o755); err != nil {
			return err
		}
		return root.Chmod(name, perm|0o700) // keep it writable for what follows
	case tar.TypeReg:
		_ = root.Remove(name) // never write through an existing symlink
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		return nil
	case tar.TypeSymlink:
		_ = root.Remove(name)
		// The link is created as is; os.Root keeps any later access
		// through it inside dir.
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		// Linkname was checked and made relative to dir by extractTar.
		_ = root.Remove(name)
		return root.Link(hdr.Linkname, name)
	default:
		return nil // devices, fifos: not recreated
	}
}

// unwrapPathError drops the operation and path a *PathError repeats.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
